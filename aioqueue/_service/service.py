"""EventService: enqueue events, register handlers, and own every background task."""

from __future__ import annotations

from types import TracebackType

import anyio

from aioqueue._delivery.dispatcher import Dispatcher
from aioqueue._delivery.leases import Leases
from aioqueue._delivery.wake_ups import WakeUps
from aioqueue._delivery.watchdog import LoopWatchdog
from aioqueue._model.config import ServiceConfig
from aioqueue._model.errors import ServiceStateError
from aioqueue._producing.producer import Producer
from aioqueue._transport.call_gate import close_gate, open_gate
from aioqueue._transport.client import RedisClient
from aioqueue._wire.event_types import EventTypes
from aioqueue._wire.queues import QueueDirectory

from .base import ServiceState
from .browsing import ServiceBrowsing
from .builder import EventServiceBuilder
from .dead_letters import ServiceDeadLetters
from .flow_control import ServiceFlowControl
from .handlers import ServiceHandlers
from .producing import ServiceProducing
from .run_due import ServiceRunDue
from .schedules import ServiceSchedules

__all__ = ["EventService", "ServiceState"]


class EventService(
    ServiceHandlers,
    ServiceProducing,
    ServiceDeadLetters,
    ServiceBrowsing,
    ServiceRunDue,
    ServiceSchedules,
    ServiceFlowControl,
):
    """Schedules events and delivers them to handlers when due.

    Build one with `EventService.builder()`. `async with service:` starts the dispatcher and
    one consumer per handler; leaving it stops taking events, gives running handlers
    `shutdown_grace` to finish, cancels the rest and closes the connection if the service
    opened it. A closed service cannot be entered again. What leaves the block is what was
    raised in it, never an exception group.
    """

    # This module holds the lifecycle; each group of methods lives in a module of its own
    # (handlers, producing, dead_letters, browsing, run_due, schedules, flow_control), all
    # sharing the state declared in base.ServiceBase.

    def __init__(self, config: ServiceConfig, client: RedisClient, *, owns_client: bool) -> None:
        self._config = config
        self._client = client
        self._owns_client = owns_client
        self._state = ServiceState.IDLE
        types = EventTypes(
            config.prefix, config.serializer, config.partitions, default_partitions=1
        )
        self._queues = QueueDirectory(client, config.prefix, types)
        self._producer = Producer(client, self._queues, config)
        self._registrations = {}
        self._leases = Leases(client, config.lease_ms)
        self._schedules = {}
        # Made when the service starts: anyio's primitives need a running event loop, and a
        # service is often built at import time.
        self._dispatcher = None
        self._wake_ups = None
        self._task_group = None
        self._handler_threads = None
        self._background_failure = None

    def _start_wake_ups(self) -> None:
        """The dispatcher (if the service dispatches) and what wakes it and the consumers."""
        dispatcher = None
        if self._config.enable_scheduling:
            dispatcher = Dispatcher(
                self._config, self._client, self._dispatch_targets, pushed=self._pushed
            )
        self._dispatcher = dispatcher
        self._wake_ups = WakeUps(
            self._client,
            self._config.scheduling_interval,
            dispatched=self._dispatched_stores,
            wake_queue=dispatcher.wake_queue if dispatcher else lambda key: None,
            saw_earliest=dispatcher.saw_earliest if dispatcher else lambda *seen: None,
        )
        self._start_background("wake-ups", self._wake_ups.run)
        if dispatcher is not None:
            self._start_background("dispatcher", dispatcher.run)

    @staticmethod
    def builder() -> EventServiceBuilder:
        """A builder for a new service: set a connection (`.url(...)` or `.client(...)`) and
        any other settings, then `build()`."""
        return EventServiceBuilder(EventService)

    @property
    def config(self) -> ServiceConfig:
        """The settings the service was built with, frozen."""
        return self._config

    @property
    def state(self) -> ServiceState:
        """Where the service is in its life: idle, running, closing or closed."""
        return self._state

    def __repr__(self) -> str:
        handled = ", ".join(sorted(self._registrations)) or "none"
        return (
            f"<EventService {self._state.value} prefix={self._config.prefix!r} handlers={handled}>"
        )

    async def __aenter__(self) -> EventService:
        if self._state is not ServiceState.IDLE:
            raise ServiceStateError(
                f"the service is {self._state.value}; build a new one instead of re-entering it"
            )
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._handler_threads = anyio.CapacityLimiter(self._config.handler_threads)
        self._state = ServiceState.RUNNING
        # From here every call of the service waits its turn for one of a few connections,
        # however many types it produces and consumes (see call_gate.py).
        open_gate(self._client)
        self._start_background("lease renewals", self._leases.run)
        self._start_wake_ups()
        if self._config.loop_blocking_threshold > 0:
            watchdog = LoopWatchdog(self._config.loop_blocking_threshold, self._handler_codes)
            self._start_background("loop watchdog", watchdog.run)
        for registration in self._registrations.values():
            self._start_consumer(registration)
        for schedule in self._schedules.values():
            self._start_keeper(schedule)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stops the service; an error of the `async with` body leaves exactly as raised.

        The task group is how the service owns its tasks, not something its caller should
        see. anyio wraps any error its host code raises in an ExceptionGroup, which would
        turn `except KeyError` or `except redis.exceptions.ConnectionError` around the block
        into dead code. Two rules keep it inside, as aiojobs keeps its jobs' errors from its
        caller: background tasks never raise into the group (see ServiceBase._supervised: a
        crash is logged and raised as ServiceFailedError by the next operation or here), and
        the body's error is not handed to the group (only a cancellation is, so the group's
        scope can tell whether it caused it). Unwrapping a one-error group afterwards, the
        other common fix, loses the error's place in the traceback and fails as soon as a
        second error joins it.
        """
        assert self._task_group is not None
        self._state = ServiceState.CLOSING
        try:
            # Phase 1: take nothing new, and give back what no handler began. Phase 2: let
            # running handlers finish within the grace period. Phase 3: cut off the handlers
            # still running and give their events back (a sync handler's thread cannot be
            # cut off: it is waited for, its lease renewed meanwhile), then cancel the rest.
            if self._dispatcher is not None:
                self._dispatcher.stop()
            consumers = [r.consumer for r in self._registrations.values() if r.consumer]
            for consumer in consumers:
                consumer.stop_taking()
            with anyio.move_on_after(self._config.shutdown_grace):
                for consumer in consumers:
                    await consumer.wait_finished()
            for consumer in consumers:
                consumer.cut_off()
            for consumer in consumers:
                await consumer.wait_finished()
            self._task_group.cancel_scope.cancel()
        finally:
            cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
            try:
                if cancelled:
                    await self._task_group.__aexit__(exc_type, exc, traceback)
                else:
                    await self._task_group.__aexit__(None, None, None)
            finally:
                self._task_group = None
                self._state = ServiceState.CLOSED
                await close_gate(self._client)
                if self._owns_client:
                    await self._client.aclose()
        if exc is None:
            self._raise_background_failure()
