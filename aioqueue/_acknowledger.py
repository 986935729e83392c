"""Batched acknowledgements: the successes of one consumer share a script call."""

from __future__ import annotations

import anyio

from ._envelope import Envelope
from ._recovery import REDIS_ERRORS, logger
from ._store import QueueStore

__all__ = ["Acknowledger"]

# Acknowledgements run shielded from shutdown, so a handler that finished is not delivered
# again just because the service was closing; the bound keeps a dead server from stalling it.
SETTLE_TIMEOUT = 5.0


class Acknowledger:
    """Collects successful deliveries and deletes them in batches.

    There is no timer: while one batch is on its way to Redis the next one fills up, so a
    quiet consumer acknowledges each event at once and a busy one sends one call for many.
    """

    def __init__(self, store: QueueStore) -> None:
        self._store = store
        self._waiting: list[tuple[Envelope, anyio.Event]] = []
        self._has_work = anyio.Event()

    async def acknowledge(self, envelope: Envelope) -> None:
        """Returns once the event is deleted, or once deleting it failed (logged; the event
        is then delivered again at its pre-scheduled attempt)."""
        done = anyio.Event()
        self._waiting.append((envelope, done))
        self._has_work.set()
        await done.wait()

    async def run(self) -> None:
        """Flushes batches until cancelled."""
        while True:
            await self._has_work.wait()
            self._has_work = anyio.Event()
            batch, self._waiting = self._waiting, []
            try:
                await self._flush([envelope for envelope, _ in batch])
            finally:
                for _, done in batch:
                    done.set()

    async def _flush(self, envelopes: list[Envelope]) -> None:
        problem = f"no answer within {SETTLE_TIMEOUT:g} s"
        with anyio.CancelScope(shield=True), anyio.move_on_after(SETTLE_TIMEOUT):
            # Deleting a version twice is harmless, so one more try is safe; it spares a
            # duplicate delivery when a pooled connection died with a server restart.
            for _ in range(2):
                try:
                    await self._store.acknowledge(envelopes)
                    return
                except REDIS_ERRORS as exc:
                    problem = f"{type(exc).__name__}: {exc}"
        # Not acknowledged: the pre-scheduled retries deliver them again (at-least-once).
        logger.warning(
            "could not acknowledge %d %s events, they will be delivered again: %s",
            len(envelopes),
            self._store.event_type,
            problem,
        )
