"""What every part of EventService shares: its state, settings, client and queues.

EventService is one public class whose methods come in groups (handlers, producing, dead
letters, ...), each group in a module of its own that subclasses ServiceBase. The groups
declare here what they read, so each module can be read (and type-checked) on its own.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from aioqueue._delivery.consumer import Consumer
from aioqueue._delivery.dispatcher import Dispatcher
from aioqueue._delivery.handler_runner import Handler
from aioqueue._delivery.leases import Leases
from aioqueue._delivery.wake_ups import WakeUps
from aioqueue._model.config import ServiceConfig
from aioqueue._model.errors import ServiceFailedError, ServiceStateError
from aioqueue._model.event import Event, event_type_name
from aioqueue._producing.producer import Producer
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._wire.queues import QueueDirectory, TypeQueue

if sys.version_info < (3, 11):  # anyio depends on the backport there
    # novermin: the backport of 3.11's builtin, which vermin takes the name for.
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found, unused-ignore]

if TYPE_CHECKING:
    from .schedules import ScheduleRegistration

__all__ = ["Registration", "ServiceBase", "ServiceState"]


class ServiceState(enum.Enum):
    """Where an EventService is in its life: IDLE when built, RUNNING inside `async with`,
    CLOSING while it shuts down, CLOSED after; a closed service cannot be entered again."""

    IDLE = "idle"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass
class Registration:
    """A handler added to the service, and its consumer once the service runs."""

    event_class: type[Event]
    event_type: str
    handler: Handler
    parallelism: int
    consumer: Consumer | None = None
    recording: bool = False
    """The type's settings are being recorded (see ServiceHandlers._record_type)."""
    recorded_at: float | None = None
    """When (monotonic) they were last recorded, None before the first time."""


class ServiceBase:
    """The state the parts of EventService share; EventService.__init__ sets it."""

    _config: ServiceConfig
    _client: RedisClient
    _state: ServiceState
    _queues: QueueDirectory
    _producer: Producer
    _registrations: dict[str, Registration]
    _leases: Leases
    """The attempts this service's consumers hold, renewed together (see leases.py)."""
    _dispatcher: Dispatcher | None
    """Made when the service starts, and only if it dispatches."""
    _wake_ups: WakeUps | None
    """What wakes the dispatcher and the consumers (wake_ups.py); made when it starts."""
    _task_group: TaskGroup | None
    """Owns every background task while the service runs."""
    _handler_threads: anyio.CapacityLimiter | None
    """Bounds the threads of every sync handler; made when the service starts."""
    _schedules: dict[str, ScheduleRegistration]
    """Recurring schedules this service declared, by name (see schedules.py)."""
    _background_failure: tuple[str, Exception] | None
    """(task, its error) once a background task died: every later operation fails."""

    def _ensure_open(self) -> None:
        self._raise_background_failure()
        if self._state in (ServiceState.CLOSING, ServiceState.CLOSED):
            raise ServiceStateError(f"the service is {self._state.value}")

    def _start_background(self, what: str, run: Callable[[], Awaitable[None]]) -> None:
        """Runs `run` in the service's task group, supervised (see EventService.__aexit__)."""
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
            if self._background_failure is None:
                self._background_failure = (what, exc)

    def _raise_background_failure(self) -> None:
        """Raises ServiceFailedError, caused by the task's error, if a background task died."""
        if self._background_failure is not None:
            what, exc = self._background_failure
            first: BaseException = exc
            # novermin: vermin takes the name for 3.11's builtin; on 3.10 it is the backport's.
            while isinstance(first, BaseExceptionGroup):  # the task's own groups: name a leaf
                first = first.exceptions[0]
            raise ServiceFailedError(f"the service's {what} died: {first!r}") from exc

    def _queue_of(self, event_class: type[Event]) -> TypeQueue:
        return self._queues.queue(event_type_name(event_class))
