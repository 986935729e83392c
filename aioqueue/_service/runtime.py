"""What the parts of a service share: its settings, client, queues, life and task group.

EventService is a façade over parts that own their state (producing.py, delivery.py,
schedules.py, administration.py); each part is given this runtime, never another part's
attributes, and asks it for what only the service as a whole knows: whether it is open,
and where its background tasks run.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from aioqueue._model.config import ServiceConfig
from aioqueue._model.errors import RedisUnavailableError, ServiceFailedError, ServiceStateError
from aioqueue._model.event import Event, event_type_name
from aioqueue._transport.call_gate import close_gate, open_gate
from aioqueue._transport.client import RedisClient
from aioqueue._transport.reaching import reach
from aioqueue._transport.recovery import logger
from aioqueue._wire.event_types import EventTypes
from aioqueue._wire.queues import QueueDirectory, TypeQueue

if sys.version_info < (3, 11):  # anyio depends on the backport there
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]  # novermin

__all__ = ["Runtime", "ServiceState"]


class ServiceState(enum.Enum):
    """Where an EventService is in its life: IDLE when built, RUNNING inside `async with`,
    CLOSING while it shuts down, CLOSED after; a closed service cannot be entered again."""

    IDLE = "idle"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


class Runtime:
    """One service's settings, client, queues and state, and the task group that owns every
    background task while it runs."""

    def __init__(
        self,
        config: ServiceConfig,
        client: RedisClient,
        *,
        owns_client: bool,
        address: str | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self._owns_client = owns_client
        self._address = address
        types = EventTypes(
            config.prefix, config.serializer, config.partitions, default_partitions=1
        )
        self.queues = QueueDirectory(client, config.prefix, types)
        self.state = ServiceState.IDLE
        self._task_group: TaskGroup | None = None
        self._failure: tuple[str, Exception] | None = None
        """(task, its error) once a background task died: every later operation fails."""
        self._failed: anyio.Event | None = None
        """Set when `_failure` is; made at start (anyio's primitives need a running loop)."""

    def reconfigure(self, **changes: Any) -> None:
        """Replaces settings before the service starts (its parts read the config when they
        start, so not after)."""
        if self.state is not ServiceState.IDLE:
            raise ServiceStateError(f"the service is {self.state.value}: settings are fixed")
        self.config = dataclasses.replace(self.config, **changes)

    @property
    def running(self) -> bool:
        return self.state is ServiceState.RUNNING

    def queue_of(self, event_class: type[Event]) -> TypeQueue:
        return self.queues.queue(event_type_name(event_class))

    def ensure_open(self) -> None:
        """Raises ServiceFailedError after a background task died, ServiceStateError once
        the service is closing or closed."""
        self.raise_failure()
        if self.state in (ServiceState.CLOSING, ServiceState.CLOSED):
            raise ServiceStateError(f"the service is {self.state.value}")

    async def start(self) -> None:
        """Checks that Redis answers (else RedisUnavailableError: a wrong URL or a server
        that is down is reported once, where the loops would retry it for ever), then
        enters the task group; from here every call of the service waits its turn for one
        of a few connections, however many types it produces and consumes (call_gate.py)."""
        if self.state is not ServiceState.IDLE:
            raise ServiceStateError(
                f"the service is {self.state.value}; build a new one instead of re-entering it"
            )
        try:
            await reach(self.client, self._address)
        except RedisUnavailableError:
            # Nothing started: the service is closed as if it had run, its client with it.
            self.state = ServiceState.CLOSED
            if self._owns_client:
                await self.client.aclose()
            raise
        self._failed = anyio.Event()
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self.state = ServiceState.RUNNING
        open_gate(self.client)

    def start_background(self, what: str, run: Callable[[], Awaitable[None]]) -> None:
        """Runs `run` in the service's task group, supervised (see `stop`)."""
        assert self._task_group is not None
        self._task_group.start_soon(self._supervised, what, run, name=f"aioqueue {what}")

    async def _supervised(self, what: str, run: Callable[[], Awaitable[None]]) -> None:
        # Background tasks ride out Redis outages themselves; anything reaching here is a bug.
        # It is kept rather than raised into the task group, which would cancel the caller's
        # code and leave as an exception group.
        try:
            await run()
        except Exception as exc:
            logger.critical(
                "the service's %s died; the service no longer works", what, exc_info=True
            )
            if self._failure is None:
                self._failure = (what, exc)
                assert self._failed is not None
                self._failed.set()

    @property
    def failure(self) -> str | None:
        """Which background task died and why, in a line; None while all work."""
        if self._failure is None:
            return None
        try:
            self.raise_failure()
        except ServiceFailedError as error:
            return str(error)
        return None  # pragma: no cover - raise_failure raised

    async def wait_failed(self) -> ServiceFailedError:
        """Returns, once a background task died, the error the service's next operation
        raises; never returns while the service works."""
        if self._failed is None:
            raise ServiceStateError("the service is not running")
        await self._failed.wait()
        try:
            self.raise_failure()
        except ServiceFailedError as error:
            return error
        raise AssertionError("a failure was signalled without one")  # pragma: no cover

    def raise_failure(self) -> None:
        """Raises ServiceFailedError, caused by the task's error, if a background task died."""
        if self._failure is not None:
            what, exc = self._failure
            first: BaseException = exc
            # novermin: vermin takes the name for 3.11's builtin; on 3.10 it is the backport's.
            while isinstance(first, BaseExceptionGroup):  # the task's own groups: name a leaf
                first = first.exceptions[0]
            raise ServiceFailedError(f"the service's {what} died: {first!r}") from exc

    def cancel_background(self) -> None:
        assert self._task_group is not None
        self._task_group.cancel_scope.cancel()

    async def stop(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Leaves the task group (its tasks cancelled by now, see EventService.__aexit__),
        gives the connections back, closes the client if the service made it.

        The task group is how the service owns its tasks, not something its caller should
        see. anyio wraps any error its host code raises in an ExceptionGroup, which would
        turn `except KeyError` around the block into dead code. Two rules keep it inside:
        background tasks never raise into the group (`_supervised`: a crash is logged and
        raised as ServiceFailedError by the next operation or on leaving), and the body's
        error is not handed to the group (only a cancellation is, so the group's scope can
        tell whether it caused it).
        """
        assert self._task_group is not None
        cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            if cancelled:
                await self._task_group.__aexit__(exc_type, exc, traceback)
            else:
                await self._task_group.__aexit__(None, None, None)
        finally:
            self._task_group = None
            self.state = ServiceState.CLOSED
            await close_gate(self.client)
            if self._owns_client:
                await self.client.aclose()
