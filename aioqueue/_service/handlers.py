"""EventService's handlers: adding and removing them, before or while the service runs."""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from types import CodeType
from typing import Any, TypeVar, overload

from aioqueue._delivery.consumer import Consumer
from aioqueue._delivery.dispatcher import DispatchTarget
from aioqueue._delivery.watchdog import handler_code
from aioqueue._model.errors import HandlerRegistrationError, PartitionCountMismatchError
from aioqueue._model.event import Event, event_type_name, serial_key_of
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.rate_limits import record_rate_limit
from aioqueue._wire.settings_marks import mark_recorded
from aioqueue._wire.store import QueueStore

from .base import Registration, ServiceBase, ServiceState
from .handler_signature import annotated_event_class

__all__ = ["ServiceHandlers"]

E = TypeVar("E", bound=Event)
F = TypeVar("F", bound=Callable[..., Any])


class ServiceHandlers(ServiceBase):
    def add_handler(
        self,
        event_class: type[E],
        handler: Callable[[E], Awaitable[bool]] | Callable[[E], bool],
        *,
        parallelism: int = 1,
    ) -> None:
        """Delivers due events of `event_class` to `handler`, at most `parallelism` at once.

        Works before and while the service runs. The handler returns True when done; False,
        an exception, the handler timeout or any other return value mean "try again later".
        An `async def` handler runs on the event loop; a plain function runs in a worker
        thread (see EventServiceBuilder.handler_threads).

        Raises HandlerRegistrationError for a handler that could never work: not callable,
        a coroutine object instead of the function, a first parameter annotated with
        another event class, `parallelism` below 1, or a type that already has a handler.
        Raises EventDefinitionError for an event class with a field that cannot round-trip
        through JSON, or a `__serial_key__` that names no field.
        """
        self._ensure_open()
        event_type = event_type_name(event_class)
        serial_key_of(event_class)  # a __serial_key__ naming no field fails here
        _check_handler(event_class, handler)
        # A field that cannot round-trip fails here, not at the first delivery.
        self._config.serializer.schema(event_class)
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
        registration = Registration(
            event_class=event_class,
            event_type=event_type,
            handler=handler,
            parallelism=parallelism,
        )
        self._registrations[event_type] = registration
        if self._state is ServiceState.RUNNING:
            self._start_consumer(registration)
            if self._wake_ups is not None:
                self._wake_ups.dispatching()
            if self._dispatcher is not None:
                self._dispatcher.wake()

    @overload
    def handler(
        self, event_class: type[Event] | None = None, /, *, parallelism: int = 1
    ) -> Callable[[F], F]: ...

    @overload
    def handler(self, function: F, /) -> F: ...

    def handler(
        self, target: type[Event] | Callable[..., Any] | None = None, /, *, parallelism: int = 1
    ) -> Any:
        """The decorator form of add_handler: `@service.handler(PaymentCheck, parallelism=4)`
        above the handler registers it exactly as add_handler does and returns it unchanged.
        The event class may be left out when the handler's first parameter is annotated with
        it (`@service.handler(parallelism=4)` or plain `@service.handler`)."""
        if target is not None and not isinstance(target, type):
            return self._register_annotated(None, target, parallelism)  # bare @service.handler

        def register(function: F) -> F:
            return self._register_annotated(target, function, parallelism)

        return register

    def _register_annotated(
        self, event_class: type[Event] | None, function: F, parallelism: int
    ) -> F:
        chosen = event_class if event_class is not None else annotated_event_class(function)
        if chosen is None:
            raise HandlerRegistrationError(
                f"cannot tell which events {getattr(function, '__qualname__', function)!r} "
                "takes: annotate its first parameter with the event class, or name the class "
                "(@service.handler(PaymentCheck))"
            )
        self.add_handler(chosen, function, parallelism=parallelism)
        return function

    def remove_handler(self, event_class: type[Event]) -> bool:
        """Stops delivering `event_class` here; running handlers finish. False if none was set."""
        registration = self._registrations.pop(event_type_name(event_class), None)
        if registration is None:
            return False
        if registration.consumer is not None:
            registration.consumer.stop_taking()
        if self._wake_ups is not None:
            for store in self._queues.queue(registration.event_type).stores:
                self._wake_ups.forget(store)
            self._wake_ups.dispatching()
        return True

    def _start_consumer(self, registration: Registration) -> None:
        assert self._wake_ups is not None
        registration.consumer = Consumer(
            stores=self._queues.queue(registration.event_type).stores,
            event_class=registration.event_class,
            handler=registration.handler,
            parallelism=registration.parallelism,
            config=self._config,
            leases=self._leases,
            ready_event=self._wake_ups.ready_event,
            on_claiming=self._ready_list_draining,
            thread_limiter=self._handler_threads,
        )
        consumer = registration.consumer
        if (
            registration.event_type in self._config.rate_limits
            or serial_key_of(registration.event_class) is not None
        ):
            # The limit or serial key must be in Redis before this consumer takes its first
            # event (dispatch.lua reads them there).
            async def record_then_consume() -> None:
                await self._record_type(registration)
                await consumer.run()

            self._start_background(f"consumer of {registration.event_type}", record_then_consume)
            return
        self._start_background(f"consumer of {registration.event_type}", consumer.run)
        self._start_background(
            f"recording of {registration.event_type}",
            functools.partial(self._record_type, registration),
        )

    async def _record_type(self, registration: Registration, *, again: bool = False) -> None:
        """Makes sure the registry records the type with this service's partition count,
        publishes the type's payload schema and records its rate limit (if this service has
        one and none is recorded), then marks the settings recorded (see settings_marks.py)
        and wakes the dispatcher, which waits for that mark; on a partition count mismatch
        the consumer stops (it would read keys nobody writes) and the service fails loudly
        (see ServiceBase._supervised). `again`: after the server lost them."""
        errors = ErrorBackoff(f"recording {registration.event_type} in the registry")
        registration.recording = True
        try:
            while True:
                try:
                    queue = await self._queues.recorded(registration.event_class, again=again)
                    wanted = self._config.rate_limits.get(registration.event_type)
                    if wanted is not None:
                        await record_rate_limit(self._client, queue.layout, wanted)
                    await mark_recorded(self._client, queue.layout)
                    break
                except PartitionCountMismatchError:
                    if registration.consumer is not None:
                        registration.consumer.stop_taking()
                    raise
                except REDIS_ERRORS as exc:
                    await errors.sleep_after(exc)
        finally:
            registration.recording = False
        registration.recorded_at = time.monotonic()
        if self._dispatcher is not None:
            self._dispatcher.wake()

    def _settings_lost(self, registration: Registration, dispatched_at: float) -> None:
        """A dispatch sent at `dispatched_at` (monotonic) found the type's settings missing
        from the server (see settings_marks.py): records them again, unless a recording is
        under way (a service's first dispatch usually meets the one it starts with) or ended
        after that dispatch was sent (its answer is older than the mark, and the recording's
        wake-up brings a new one)."""
        recorded_at = registration.recorded_at
        if (
            registration.recording
            or (recorded_at is not None and recorded_at >= dispatched_at)
            or self._registrations.get(registration.event_type) is not registration
        ):
            return
        if recorded_at is not None:
            logger.warning(
                "the settings of %s are gone from Redis (did the server lose its data?); "
                "recording them again before its events are dispatched",
                registration.event_type,
            )
        registration.recording = True  # from now: the next pass must not start another
        self._start_background(
            f"recording of {registration.event_type}",
            functools.partial(self._record_type, registration, again=recorded_at is not None),
        )

    def _handler_codes(self) -> dict[CodeType, str]:
        codes = {}
        for registration in list(self._registrations.values()):
            code = handler_code(registration.handler)
            if code is not None:
                name = getattr(registration.handler, "__qualname__", code.co_name)
                codes[code] = f"{name} ({registration.event_type})"
        return codes

    def _ready_list_draining(self, ready_left: int) -> None:
        if self._dispatcher is not None:
            self._dispatcher.ready_list_draining(ready_left)

    def _pushed(self, store: QueueStore) -> None:
        if self._wake_ups is not None:
            self._wake_ups.pushed(store)

    def _dispatched_stores(self) -> Iterator[QueueStore]:
        if self._dispatcher is None:
            return
        for event_type in self._registrations:
            yield from self._queues.queue(event_type).stores

    def _dispatch_targets(self) -> Iterator[DispatchTarget]:
        for event_type, registration in self._registrations.items():
            settings_lost = functools.partial(self._settings_lost, registration)
            for store in self._queues.queue(event_type).stores:
                yield DispatchTarget(store, registration.parallelism, settings_lost)


def _check_handler(event_class: type[Event], handler: object) -> None:
    """Refuses, at registration rather than at the first delivery, a handler that cannot take
    `event_class` events: not callable, a coroutine object (the handler called instead of
    passed), no parameter for the event, or a first parameter annotated with another class."""
    if inspect.iscoroutine(handler):
        name = handler.__qualname__
        handler.close()  # never awaited on purpose: spare the caller Python's warning about it
        raise HandlerRegistrationError(
            f"the handler for {event_class.__qualname__} is a coroutine object: pass the "
            f"function itself ({name}), not the result of calling it ({name}(...))"
        )
    if not callable(handler):
        raise HandlerRegistrationError(
            f"the handler for {event_class.__qualname__} must be a function (async def, or a "
            f"plain def run in a worker thread), got {handler!r}"
        )
    annotated = annotated_event_class(handler)
    if annotated is not None and not issubclass(event_class, annotated):
        raise HandlerRegistrationError(
            f"handler {getattr(handler, '__qualname__', type(handler).__qualname__)} takes "
            f"{annotated.__qualname__} events but is added for {event_class.__qualname__}"
        )
