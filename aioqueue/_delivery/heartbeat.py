"""A service's heartbeat: its record in the worker registry (_wire/workers.py), written every
heartbeat while it runs, marked stopping when it is asked to stop, and removed when it has.

The heartbeat is also what the readiness probe reads: when the last one written is older
than the registry lets a record live, the rest of the world no longer sees this worker."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio

from aioqueue._model.workers import WorkerState
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.workers import (
    LIVES_FOR_BEATS,
    WorkerRecord,
    new_worker_id,
    remove_worker,
    write_heartbeat,
)

__all__ = ["Heartbeat"]

# Leaving the registry runs while the service stops, shielded; this bounds it when Redis is
# gone (the record then expires on its own).
REMOVAL_TIMEOUT = 2.0


class Heartbeat:
    """Keeps one service's record in the registry. `handlers()` says, at each beat, what it
    handles: (type, parallelism, events in hand) per handler."""

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        interval: float,
        version: str,
        handlers: Callable[[], Sequence[tuple[str, int, int]]],
    ) -> None:
        self.worker_id = new_worker_id()
        self._client = client
        self._prefix = prefix
        self._interval = interval
        self._version = version
        self._handlers = handlers
        self._state = WorkerState.RUNNING
        self._woken = anyio.Event()
        self._writing = anyio.Lock()
        """Held by a beat and by leaving, so that no beat lands after the record's removal."""
        self._left = False
        self.written_at: float | None = None
        """When (monotonic) the last heartbeat was written; None before the first."""

    @property
    def fresh(self) -> bool:
        """Whether the registry still lists this worker going by its last heartbeat: one was
        written less than LIVES_FOR_BEATS heartbeats ago."""
        return (
            self.written_at is not None
            and time.monotonic() - self.written_at < self._interval * LIVES_FOR_BEATS
        )

    async def run(self) -> None:
        """Beats every interval until it has left the registry (or is cancelled); a failed
        beat is tried again sooner."""
        errors = ErrorBackoff("writing the worker's heartbeat")
        while not self._left:
            began = time.monotonic()
            if not await errors.attempt(self.beat):
                continue
            # A beat every interval, however long the call took.
            with anyio.move_on_after(began + self._interval - time.monotonic()):
                await self._woken.wait()
            self._woken = anyio.Event()

    async def beat(self) -> None:
        record = WorkerRecord.of(
            version=self._version,
            heartbeat=self._interval,
            state=self._state,
            handlers=self._handlers(),
        )
        async with self._writing:
            if self._left:
                return
            await write_heartbeat(self._client, self._prefix, self.worker_id, record)
            self.written_at = time.monotonic()

    def stopping(self) -> None:
        """The service was asked to stop: the next beat, at once, says so."""
        self._state = WorkerState.STOPPING
        self._woken.set()

    async def leave(self) -> None:
        """Removes the record (the service has stopped); shielded, and bounded when Redis
        does not answer."""
        self._left = True
        self._woken.set()
        with anyio.CancelScope(shield=True), anyio.move_on_after(REMOVAL_TIMEOUT):
            try:
                async with self._writing:
                    await remove_worker(self._client, self._prefix, self.worker_id)
            except REDIS_ERRORS as exc:
                logger.info(
                    "could not leave the worker registry (the record expires on its own): %s: %s",
                    type(exc).__name__,
                    exc,
                )
        self.written_at = None
