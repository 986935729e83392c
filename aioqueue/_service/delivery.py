"""The delivery part of a service: its handlers, and while it runs the dispatcher, one
consumer per handler, the leases they hold, what wakes them, and how they stop. It owns
every one of those."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from types import CodeType

import anyio

from aioqueue._delivery.consumer import Consumer
from aioqueue._delivery.dispatcher import Dispatcher, DispatchTarget
from aioqueue._delivery.handler_runner import Handler
from aioqueue._delivery.heartbeat import Heartbeat
from aioqueue._delivery.leases import Leases
from aioqueue._delivery.wake_ups import WakeUps
from aioqueue._delivery.watchdog import LoopWatchdog, handler_code
from aioqueue._model.batches import BatchHandler, Batching
from aioqueue._model.errors import HandlerRegistrationError
from aioqueue._model.event import Event, event_type_name, serial_key_of
from aioqueue._version import __version__
from aioqueue._wire.store import QueueStore

from .handler_signature import annotated_event_class
from .registrations import Recording, Registration
from .runtime import Runtime

__all__ = ["Delivery"]


class Delivery:
    """Delivers due events to a service's handlers (see EventService for what the public
    methods promise)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._registrations: dict[str, Registration] = {}
        self._targets: list[DispatchTarget] | None = None
        """What the dispatcher fills, made once per change of the handlers: it reads them on
        every pass, and with a thousand types making them was a fifth of the process's time."""
        self._leases = Leases(runtime.client, runtime.config.lease_ms)
        self._recording = Recording(runtime, self._registrations.get, self._recorded)
        # Made when the service starts: anyio's primitives need a running event loop, and a
        # service is often built at import time.
        self._dispatcher: Dispatcher | None = None
        self._wake_ups: WakeUps | None = None
        self._threads: anyio.CapacityLimiter | None = None
        self.heartbeat: Heartbeat | None = None
        """The service's record in the worker registry, from the start of its first
        handler."""

    def __repr__(self) -> str:
        return ", ".join(sorted(self._registrations)) or "none"

    # -- handlers ----------------------------------------------------------------------------

    def add(
        self,
        event_class: type[Event],
        handler: Handler | BatchHandler,
        parallelism: int,
        batching: Batching | None = None,
    ) -> None:
        """Registers a handler of one event, or with `batching` a batch handler."""
        self._runtime.ensure_open()
        event_type = event_type_name(event_class)
        serial_key_of(event_class)  # a __serial_key__ naming no field fails here
        _check_handler(event_class, handler)
        # A field that cannot round-trip fails here, not at the first delivery.
        self._runtime.config.serializer.schema(event_class)
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
        registration = Registration(event_class, event_type, handler, parallelism, batching)
        self._registrations[event_type] = registration
        self._targets = None
        if self._runtime.running:
            self._start_consumer(registration)
            assert self._wake_ups is not None
            self._wake_ups.dispatching()
            self.wake_dispatcher()
            self._start_heartbeat()

    def remove(self, event_class: type[Event]) -> bool:
        registration = self._registrations.pop(event_type_name(event_class), None)
        if registration is None:
            return False
        self._targets = None
        if registration.consumer is not None:
            registration.consumer.stop_taking()
        if self._wake_ups is not None:
            for store in self._runtime.queues.queue(registration.event_type).stores:
                self._wake_ups.forget(store)
            self._wake_ups.dispatching()
        return True

    def handled_types(self) -> list[str]:
        return list(self._registrations)

    def consumer_of(self, event_class: type[Event]) -> Consumer | None:
        """The type's consumer while the service runs (for tests and the worker registry)."""
        registration = self._registrations.get(event_type_name(event_class))
        return None if registration is None else registration.consumer

    # -- what other parts tell it ------------------------------------------------------------

    def due_sooner(self, event_type: str, due_in: float) -> None:
        """An event of `event_type` was written due in `due_in` s: the dispatcher, if this
        service dispatches the type, calls its queues sooner than planned if it must."""
        if self._dispatcher is not None and event_type in self._registrations:
            self._dispatcher.wake_for(self._schedule_keys(event_type), due_in)

    def _recorded(self, event_type: str) -> None:
        """The type's settings are recorded: its queues are dispatched now (a dispatch that
        found them missing took nothing and waits for this)."""
        if self._dispatcher is not None:
            for key in self._schedule_keys(event_type):
                self._dispatcher.wake_queue(key)

    def _schedule_keys(self, event_type: str) -> Iterator[str]:
        return (store.keys.schedule for store in self._runtime.queues.queue(event_type).stores)

    def wake_dispatcher(self) -> None:
        """Dispatches every queue now (a handler added, a type recorded, a requeue: work
        that may be due now)."""
        if self._dispatcher is not None:
            self._dispatcher.wake()

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the lease renewals, the dispatcher and what wakes it, the loop watchdog and
        a consumer per handler, in the service's task group."""
        runtime = self._runtime
        config = runtime.config
        self._threads = anyio.CapacityLimiter(config.handler_threads)
        runtime.start_background("lease renewals", self._leases.run)
        dispatcher = None
        if config.enable_scheduling:
            dispatcher = Dispatcher(
                config, runtime.client, self._dispatch_targets, pushed=self._pushed
            )
        self._dispatcher = dispatcher
        self._wake_ups = WakeUps(
            runtime.client,
            config.scheduling_interval,
            dispatched=self._dispatched_stores,
            wake_queue=dispatcher.wake_queue if dispatcher else lambda key: None,
            saw_earliest=dispatcher.saw_earliest if dispatcher else lambda *seen: None,
        )
        runtime.start_background("wake-ups", self._wake_ups.run)
        if dispatcher is not None:
            runtime.start_background("dispatcher", dispatcher.run)
        if config.loop_blocking_threshold > 0:
            watchdog = LoopWatchdog(config.loop_blocking_threshold, self._handler_codes)
            runtime.start_background("loop watchdog", watchdog.run)
        for registration in self._registrations.values():
            self._start_consumer(registration)
        self._start_heartbeat()

    async def stop(self) -> None:
        """Phase 1: take nothing new, and give back what no handler began. Phase 2: let
        running handlers finish within the shutdown grace. Phase 3: cut off the handlers
        still running and give their events back (a sync handler's thread cannot be cut
        off: it is waited for, its lease renewed meanwhile). The caller then cancels the
        rest of the service's tasks."""
        if self._dispatcher is not None:
            self._dispatcher.stop()
        if self.heartbeat is not None:
            self.heartbeat.stopping()
        consumers = [r.consumer for r in self._registrations.values() if r.consumer]
        for consumer in consumers:
            consumer.stop_taking()
        with anyio.move_on_after(self._runtime.config.shutdown_grace):
            for consumer in consumers:
                await consumer.wait_finished()
        for consumer in consumers:
            consumer.cut_off()
        for consumer in consumers:
            await consumer.wait_finished()
        if self.heartbeat is not None:
            await self.heartbeat.leave()

    def _start_heartbeat(self) -> None:
        if self.heartbeat is None and self._registrations:
            runtime = self._runtime
            self.heartbeat = Heartbeat(
                runtime.client,
                runtime.config.prefix,
                runtime.config.heartbeat,
                __version__,
                self._handlers_in_hand,
            )
            runtime.start_background("heartbeat", self.heartbeat.run)

    def _handlers_in_hand(self) -> list[tuple[str, int, int]]:
        queues = self._runtime.queues
        return [
            (
                event_type,
                registration.in_hand,
                self._leases.held_in(queues.queue(event_type).stores),
            )
            for event_type, registration in self._registrations.items()
        ]

    def _start_consumer(self, registration: Registration) -> None:
        assert self._wake_ups is not None
        runtime = self._runtime
        consumer = registration.consumer = Consumer(
            stores=runtime.queues.queue(registration.event_type).stores,
            event_class=registration.event_class,
            handler=registration.handler,
            parallelism=registration.parallelism,
            batching=registration.batching,
            config=runtime.config,
            leases=self._leases,
            ready_event=self._wake_ups.ready_event,
            on_claiming=self._ready_list_draining,
            thread_limiter=self._threads,
        )
        what = f"consumer of {registration.event_type}"
        if (
            registration.event_type in runtime.config.rate_limits
            or serial_key_of(registration.event_class) is not None
        ):
            # The limit or serial key must be in Redis before this consumer takes its first
            # event (dispatch.lua reads them there).
            async def record_then_consume() -> None:
                await self._recording.record(registration)
                await consumer.run()

            runtime.start_background(what, record_then_consume)
            return
        runtime.start_background(what, consumer.run)
        runtime.start_background(
            f"recording of {registration.event_type}",
            functools.partial(self._recording.record, registration),
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
            yield from self._runtime.queues.queue(event_type).stores

    def _dispatch_targets(self) -> list[DispatchTarget]:
        if self._targets is None:
            self._targets = [
                DispatchTarget(
                    store,
                    registration.in_hand,
                    registration.one_claim,
                    functools.partial(self._recording.settings_lost, registration),
                )
                for event_type, registration in self._registrations.items()
                for store in self._runtime.queues.queue(event_type).stores
            ]
        return self._targets


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
