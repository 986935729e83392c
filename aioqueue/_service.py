"""EventService: enqueue events, register handlers, and own every background task."""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import CodeType, TracebackType
from typing import TypeVar

import anyio
from anyio.abc import TaskGroup

from ._builder import EventServiceBuilder
from ._client import RedisClient
from ._config import ServiceConfig
from ._consumer import Consumer
from ._dead_letters import read_dead_letters
from ._dispatcher import Dispatcher
from ._durations import Duration
from ._envelope import DeadLetter
from ._errors import HandlerRegistrationError, ServiceStateError
from ._event import Event, event_type_name
from ._producer import DueTime, Producer, context_json
from ._queue import QueueDirectory
from ._recovery import logger
from ._store import QueueStore
from ._watchdog import LoopWatchdog, handler_code

__all__ = ["EventService", "ServiceState"]

E = TypeVar("E", bound=Event)


class ServiceState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass
class _Registration:
    event_class: type[Event]
    event_type: str
    handler: Callable[[Event], Awaitable[bool]]
    parallelism: int
    consumer: Consumer | None = None


class EventService:
    """Schedules events and delivers them to handlers when due.

    Build one with `EventService.builder()`. `async with service:` starts the dispatcher and
    one consumer per handler; leaving it stops taking events, gives running handlers
    `shutdown_grace` to finish, cancels the rest and closes the connection if the service
    opened it. A closed service cannot be entered again.
    """

    def __init__(self, config: ServiceConfig, client: RedisClient, *, owns_client: bool) -> None:
        self._config = config
        self._client = client
        self._owns_client = owns_client
        self._state = ServiceState.IDLE
        self._queues = QueueDirectory(client, config.prefix, config.partitions)
        self._producer = Producer(self._queues, config)
        self._registrations: dict[str, _Registration] = {}
        # Made when the service starts: anyio's primitives need a running event loop, and a
        # service is often built at import time.
        self._dispatcher: Dispatcher | None = None
        self._task_group: TaskGroup | None = None

    @staticmethod
    def builder() -> EventServiceBuilder:
        return EventServiceBuilder(EventService)

    @property
    def config(self) -> ServiceConfig:
        return self._config

    @property
    def state(self) -> ServiceState:
        return self._state

    def __repr__(self) -> str:
        handled = ", ".join(sorted(self._registrations)) or "none"
        return (
            f"<EventService {self._state.value} prefix={self._config.prefix!r} handlers={handled}>"
        )

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> EventService:
        if self._state is not ServiceState.IDLE:
            raise ServiceStateError(
                f"the service is {self._state.value}; build a new one instead of re-entering it"
            )
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._state = ServiceState.RUNNING
        if self._config.enable_scheduling:
            self._dispatcher = Dispatcher(self._config, self._handled_stores)
            task_group.start_soon(self._dispatcher.run)
        if self._config.loop_blocking_threshold > 0:
            watchdog = LoopWatchdog(self._config.loop_blocking_threshold, self._handler_codes)
            task_group.start_soon(watchdog.run)
        for registration in self._registrations.values():
            self._start_consumer(registration)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._task_group is not None
        self._state = ServiceState.CLOSING
        try:
            # Phase 1: take nothing new. Phase 2: let running handlers finish within the
            # grace period. Phase 3: cancel whatever is still running.
            if self._dispatcher is not None:
                self._dispatcher.stop()
            consumers = [r.consumer for r in self._registrations.values() if r.consumer]
            for consumer in consumers:
                consumer.stop_taking()
            with anyio.move_on_after(self._config.shutdown_grace):
                for consumer in consumers:
                    await consumer.wait_finished()
            self._task_group.cancel_scope.cancel()
        finally:
            try:
                await self._task_group.__aexit__(exc_type, exc, traceback)
            finally:
                self._task_group = None
                self._state = ServiceState.CLOSED
                if self._owns_client:
                    await self._client.aclose()

    # -- handlers ----------------------------------------------------------------------------

    def add_handler(
        self,
        event_class: type[E],
        handler: Callable[[E], Awaitable[bool]],
        *,
        parallelism: int = 1,
    ) -> None:
        """Delivers due events of `event_class` to `handler`, at most `parallelism` at once.

        Works before and while the service runs. The handler returns True when done; False,
        an exception or the handler timeout mean "try again later".
        """
        self._ensure_open()
        event_type = event_type_name(event_class)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise HandlerRegistrationError(
                f"parallelism must be an integer >= 1, got {parallelism!r}"
            )
        if event_type in self._registrations:
            registered = self._registrations[event_type].event_class
            raise HandlerRegistrationError(
                f"a handler for event type {event_type!r} ({registered.__qualname__}) is already "
                "registered; remove_handler() it first"
            )
        registration = _Registration(
            event_class=event_class,
            event_type=event_type,
            handler=handler,  # type: ignore[arg-type]
            parallelism=parallelism,
        )
        self._registrations[event_type] = registration
        if self._state is ServiceState.RUNNING:
            self._start_consumer(registration)
            if self._dispatcher is not None:
                self._dispatcher.wake()

    def remove_handler(self, event_class: type[Event]) -> bool:
        """Stops delivering `event_class` here; running handlers finish. False if none was set."""
        registration = self._registrations.pop(event_type_name(event_class), None)
        if registration is None:
            return False
        if registration.consumer is not None:
            registration.consumer.stop_taking()
        return True

    def _start_consumer(self, registration: _Registration) -> None:
        assert self._task_group is not None
        registration.consumer = Consumer(
            stores=self._queues.queue(registration.event_type).stores,
            event_class=registration.event_class,
            handler=registration.handler,
            parallelism=registration.parallelism,
            config=self._config,
            on_claimed=self._ready_list_drained,
        )
        self._task_group.start_soon(registration.consumer.run)

    def _handler_codes(self) -> dict[CodeType, str]:
        codes = {}
        for registration in list(self._registrations.values()):
            code = handler_code(registration.handler)
            if code is not None:
                name = getattr(registration.handler, "__qualname__", code.co_name)
                codes[code] = f"{name} ({registration.event_type})"
        return codes

    def _ready_list_drained(self, ready_left: int) -> None:
        if self._dispatcher is not None:
            self._dispatcher.ready_list_drained(ready_left)

    def _handled_stores(self) -> Iterator[QueueStore]:
        for event_type in self._registrations:
            yield from self._queues.queue(event_type).stores

    # -- producing ---------------------------------------------------------------------------

    async def enqueue(
        self,
        event: Event,
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
        context: Mapping[str, str] | None = None,
        replace: bool = False,
    ) -> bool:
        """Schedules `event` after `delay` (timedelta or seconds) or at `at` (aware datetime).

        Returns True when scheduled, False when an event with the same type and id was
        already pending and was kept. `replace=True` overwrites it instead: new payload,
        context and due time, fresh attempt count.
        """
        self._ensure_open()
        due = DueTime.of(delay, at)
        event_type = event_type_name(type(event))
        context = self._config.instrumentation.enqueue_context(context)
        scheduled = await self._producer.enqueue(event, due, context_json(context), replace=replace)
        self._after_enqueue([(event_type, scheduled)], due)
        return scheduled

    async def enqueue_many(
        self,
        events: Iterable[Event],
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
        context: Mapping[str, str] | None = None,
        replace: bool = False,
    ) -> list[bool]:
        """Schedules many events with one due time and context, a few script calls in all.

        Returns, per event in order, what enqueue() would have. Every event is validated
        before anything is written.
        """
        self._ensure_open()
        due = DueTime.of(delay, at)
        context = self._config.instrumentation.enqueue_context(context)
        outcomes = await self._producer.enqueue_many(
            events, due, context_json(context), replace=replace
        )
        self._after_enqueue(outcomes, due)
        return [scheduled for _, scheduled in outcomes]

    def _after_enqueue(self, outcomes: list[tuple[str, bool]], due: DueTime) -> None:
        metrics = self._config.metrics
        for event_type, scheduled in outcomes:
            metrics.event_enqueued(event_type, scheduled=scheduled)
        if self._dispatcher is not None and any(
            scheduled and event_type in self._registrations for event_type, scheduled in outcomes
        ):
            # A local event due before the dispatcher's next pass wakes it at once.
            self._dispatcher.wake_for(due.due_in)

    async def cancel(self, event_class: type[Event], event_id: str) -> bool:
        """Removes a pending event; once this returns, no handler will be handed it.

        A handler that is already running it is not interrupted. Returns False if no event
        with that id was pending.
        """
        self._ensure_open()
        queue = self._queues.queue(event_type_name(event_class))
        return await queue.store_for(event_id).cancel(event_id)

    # -- dead letters ------------------------------------------------------------------------

    async def dead_letters(self, event_class: type[E], limit: int = 100) -> list[DeadLetter]:
        """The newest `limit` dead letters of a type, each with its last error."""
        self._ensure_open()
        queue = self._queues.queue(event_type_name(event_class))
        return await read_dead_letters(queue, event_class, self._config.serializer, limit)

    async def requeue(self, event_class: type[Event], event_id: str) -> bool:
        """Puts a dead event back, due now, with a fresh attempt count.

        False when there is no such dead letter, when an event with that id is pending (both
        are kept), or when the dead letter's envelope is unreadable.
        """
        self._ensure_open()
        queue = self._queues.queue(event_type_name(event_class))
        result = await queue.store_for(event_id).requeue(event_id)
        if result in ("pending", "unreadable"):
            logger.info(
                "not requeueing %s %r: it is %s", event_class.__qualname__, event_id, result
            )
        return result == "requeued"

    # -- internals ---------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._state in (ServiceState.CLOSING, ServiceState.CLOSED):
            raise ServiceStateError(f"the service is {self._state.value}")
