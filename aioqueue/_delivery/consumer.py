"""A consumer: takes one event type's due events when handler slots are free, runs them."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from aioqueue._model.config import ServiceConfig
from aioqueue._model.event import Event
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.envelope import Envelope, EnvelopeError
from aioqueue._wire.store import Claimed, QueueStore

from .acknowledger import Acknowledger
from .handler_runner import Handler, HandlerRunner, NotStarted, Succeeded
from .handler_timeouts import TimeoutLane
from .handoff import Handoff
from .leases import Lease, Leases
from .slots import SlotPool, SlotRequest

__all__ = ["Consumer"]


@dataclass(eq=False)
class _Partition:
    """One partition's keys, and the successes waiting to be acknowledged there."""

    store: QueueStore
    acknowledger: Acknowledger
    ready: asyncio.Event
    """Set when the ready list may hold deliveries (wake_ups.py): cleared before each claim,
    waited on when a claim found nothing."""
    carries_acknowledgements: bool = False
    """True while the partition's taker is about to claim: successes then ride that claim.
    False while it waits inside Redis or has stopped: successes are then acknowledged on
    their own, so that none waits for a claim that may be a polling timeout away."""
    succeeded: list[Succeeded] = field(default_factory=list)
    """Successes handed to the taker, each still holding its handler slot."""
    waiting: SlotRequest | None = None
    """The taker's pending request for slots; handing it a success wakes it too."""
    idle: bool = False
    """The taker found the ready list empty and waits for a wake-up."""
    ready_left: int | None = None
    """Deliveries its ready list held after the taker's last claim (None before the first)."""


@dataclass(slots=True)  # not frozen: one is made per event, and frozen init is slower
class _Delivery:
    partition: _Partition
    lease: Lease


class Consumer:
    """Feeds one handler with up to `parallelism` events at a time.

    It asks Redis for events only for free slots (request-one backpressure), so at most
    `parallelism` events of its type are out of Redis in this service at any moment. A
    partitioned type gets one taker per partition, sharing the slots first come, first served.

    `parallelism` long-lived workers run the handler, fed through an in-memory channel. A
    worker whose handler succeeded hands the event, with its slot, back to the partition's
    taker, and the taker's next claim acknowledges it in the same script call that takes the
    next events: at full speed one round trip per batch settles the last batch and fetches
    the next one, and the slot changes hands atomically inside Redis.

    Every claimed attempt is held in the service's Leases, renewed there, until it is
    settled. When the consumer stops taking, what it claimed and no handler began is given
    back at once; handlers still running when the service cuts them off (its shutdown grace
    is over) are logged and their events given back too (see leases.py).
    """

    def __init__(
        self,
        *,
        stores: Sequence[QueueStore],
        event_class: type[Event],
        handler: Handler,
        parallelism: int,
        config: ServiceConfig,
        leases: Leases,
        ready_event: Callable[[QueueStore], asyncio.Event],
        on_claiming: Callable[[int], None] = lambda ready_left: None,
        thread_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        """`thread_limiter` bounds the threads of a sync handler, shared with the service's
        other sync handlers (anyio's default limiter if None). `ready_event(store)` gives the
        event a partition's taker waits on for deliveries (see WakeUps). `on_claiming` is
        called as a claim goes out, with the length its ready list will have once the claim
        is served (going by the last claim's reply), so that a dispatcher tops the list up
        meanwhile."""
        event_type = stores[0].event_type
        self._partitions = [
            _Partition(store, Acknowledger(store), ready_event(store)) for store in stores
        ]
        self._runner = HandlerRunner(
            event_type=event_type,
            event_class=event_class,
            handler=handler,
            config=config,
            thread_limiter=thread_limiter,
        )
        self._leases = leases
        self._on_claiming = on_claiming
        self._parallelism = parallelism
        self._config = config
        self._slots = SlotPool(parallelism)
        self._taking = anyio.CancelScope()
        self._working = anyio.CancelScope()
        self._lanes: list[TimeoutLane] = []
        self._finished = anyio.Event()
        self._not_started: list[Lease] = []
        """Claimed attempts no handler began, to give back (see _give_back)."""
        self._cut_off: list[Lease] = []
        """Attempts whose handlers the service cut off as it stopped, to give back."""

    async def run(self) -> None:
        """Takes and handles events until stop_taking(), then waits for running handlers."""
        # Never more than `parallelism` deliveries wait in it, one per slot in use. None tells
        # a worker to stop.
        deliveries: Handoff[_Delivery | None] = Handoff()
        try:
            with self._working:
                await self._run(deliveries)
        finally:
            await self._give_back()
            self._finished.set()

    async def _run(self, deliveries: Handoff[_Delivery | None]) -> None:
        async with anyio.create_task_group() as timer:
            timer.start_soon(self._runner.timeouts.run)
            async with anyio.create_task_group() as workers:
                for _ in range(self._parallelism):
                    workers.start_soon(self._work, deliveries)
                try:
                    with self._taking:
                        async with anyio.create_task_group() as takers:
                            for partition in self._partitions:
                                takers.start_soon(self._take_events, partition, deliveries)
                finally:
                    # What was claimed and no worker has taken yet goes back at once, and
                    # so does what waits for a thread: the workers finish what they began.
                    self._runner.stop_waiting()
                    self._not_started += [d.lease for d in deliveries.take_all() if d]
                    await self._give_back()
                    for _ in range(self._parallelism):
                        deliveries.put(None)
            timer.cancel_scope.cancel()

    def stop_taking(self) -> None:
        """Takes no more events; handlers already running go on."""
        self._taking.cancel()

    def cut_off(self) -> None:
        """Cancels the handlers still running (the service's shutdown grace is over): their
        events are given back, spent. A sync handler's thread cannot be stopped: its call
        goes on, its lease renewed, and its outcome is settled when it returns."""
        now = time.monotonic()
        for lane in self._lanes:
            call = lane.call
            if call is not None and call.lease.started is not None and lane.deadline == math.inf:
                envelope = call.lease.envelope
                logger.warning(
                    "waiting for sync handler %s on %s %r (attempt %d), running for %.3g s: "
                    "a thread cannot be stopped",
                    self._runner.handler_name,
                    envelope.event_type,
                    envelope.id,
                    envelope.attempt,
                    now - call.lease.started,
                )
        self._working.cancel()

    async def wait_finished(self) -> None:
        await self._finished.wait()

    @property
    def idle_partitions(self) -> int:
        """Partitions whose taker found nothing and waits for a wake-up."""
        return sum(partition.idle for partition in self._partitions)

    async def _give_back(self) -> None:
        """Gives back what no handler began (uncounted) and what was cut off (spent)."""
        not_started, self._not_started = self._not_started, []
        if not_started:
            await self._leases.hand_back(not_started)
        cut_off, self._cut_off = self._cut_off, []
        if cut_off:
            now = time.monotonic()
            for lease in cut_off:
                assert lease.started is not None
                envelope = lease.envelope
                logger.warning(
                    "handler %s of %s %r (attempt %d) was cut off after %.3g s: the service "
                    "stopped and its shutdown grace (%g s) was over; giving the event back, "
                    "due now",
                    self._runner.handler_name,
                    envelope.event_type,
                    envelope.id,
                    envelope.attempt,
                    now - lease.started,
                    self._config.shutdown_grace,
                )
            await self._leases.hand_back(
                cut_off, cut_off=self._cut_off_reason(cut_off[0].envelope.attempt)
            )

    def _cut_off_reason(self, attempt: int) -> str:
        return (
            f"attempt {attempt} was cut off: its service stopped before the handler "
            f"finished (shutdown grace {self._config.shutdown_grace:g} s)"
        )

    # -- workers ------------------------------------------------------------------------------

    async def _work(self, deliveries: Handoff[_Delivery | None]) -> None:
        """Handles deliveries until the takers have stopped and every claimed one is handled."""
        lane = self._runner.timeouts.lane()
        self._lanes.append(lane)
        while True:
            try:
                with anyio.CancelScope() as lane.scope:
                    await self._work_in_lane(deliveries, lane)
                    return
            except anyio.get_cancelled_exc_class():
                # The service cut its handlers off (its grace is over): the call running in
                # this lane, if one began, is given back as spent.
                running = lane.call
                if running is not None:
                    if running.lease.started is None:
                        self._not_started.append(running.lease)
                    else:
                        self._cut_off.append(running.lease)
                raise
            # Only reached when the timeout cancelled the lane's scope (see HandlerTimeouts).
            call = lane.call
            if call is not None and await self._runner.settle_timeout(lane):
                self._leases.end(call.lease)
                self._slots.release(1)

    async def _work_in_lane(self, deliveries: Handoff[_Delivery | None], lane: TimeoutLane) -> None:
        while (delivery := await deliveries.get()) is not None:
            partition = delivery.partition
            lease = delivery.lease
            try:
                succeeded = await self._runner.run(lease, lane)
            except NotStarted:
                # The consumer stopped taking while this call waited for a thread: give it
                # back now, not when the calls that did start are over.
                await self._leases.hand_back([lease])
                self._slots.release(1)
                continue
            if succeeded is None:
                self._leases.end(lease)
                self._slots.release(1)  # settled as a failure already
            elif partition.carries_acknowledgements:
                partition.succeeded.append(succeeded)
                if partition.waiting is not None:
                    partition.waiting.wakeup.set()
            else:
                await self._acknowledge_apart(partition, [succeeded])

    async def _acknowledge_apart(self, partition: _Partition, succeeded: list[Succeeded]) -> None:
        """Acknowledges without a claim, then frees the successes' slots."""
        if not succeeded:
            return
        # Shielded like every settlement: a handler that finished is not delivered again just
        # because the service was closing (the acknowledger bounds the wait).
        with anyio.CancelScope(shield=True):
            if len(succeeded) == 1:  # concurrent single successes share a call
                await partition.acknowledger.acknowledge(succeeded[0].envelope)
            else:
                await partition.acknowledger.acknowledge_all([s.envelope for s in succeeded])
        for success in succeeded:
            self._leases.end(success.lease)
            self._runner.report_success(success)
        self._slots.release(len(succeeded))

    # -- takers -------------------------------------------------------------------------------

    async def _take_events(
        self, partition: _Partition, deliveries: Handoff[_Delivery | None]
    ) -> None:
        store = partition.store
        errors = ErrorBackoff(f"taking {store.event_type} events")
        partition.carries_acknowledgements = True
        try:
            while True:
                granted = await self._wait_for_slots(partition)
                succeeded, partition.succeeded = partition.succeeded, []
                # The successes' slots pass to the events this claim takes, unless other
                # partitions wait for slots: then they go back to the pool after the claim
                # (acknowledged first), and those partitions have their turn.
                count = granted if self._slots.contended else granted + len(succeeded)
                # Cleared before the claim: a wake-up that comes while it is on its way
                # stands, and the wait after an empty claim returns at once.
                partition.ready.clear()
                if partition.ready_left is not None:
                    # Called before the claim, whose script call is normally written before
                    # this task lets another run: a top-up of the list then goes out behind
                    # the claim, while this process waits for the claim anyway, not while
                    # the handlers of the events it brings run.
                    self._on_claiming(partition.ready_left - count)
                try:
                    claimed = await self._claim(partition, count, succeeded)
                except REDIS_ERRORS as exc:
                    self._slots.release(granted)
                    await self._acknowledge_apart(partition, succeeded)
                    await errors.sleep_after(exc)
                    continue
                errors.reset()
                for success in succeeded:
                    self._leases.end(success.lease)
                    self._runner.report_success(success)
                held = self._hold(store, claimed)
                self._slots.release(granted + len(succeeded) - len(held))
                partition.ready_left = claimed.ready_left
                for lease in held:
                    deliveries.put(_Delivery(partition, lease))
                if claimed.limited_until_ms is not None and not partition.succeeded:
                    # The rate window is full: nothing can be handed out before it moves on.
                    wait = (claimed.limited_until_ms - claimed.server_now_ms + 1) / 1000
                    await self._wait_apart(partition, max(0.001, wait))
                elif claimed.paused and claimed.ready_left and not partition.succeeded:
                    await self._wait_apart(partition, self._config.polling_timeout)
                elif count and not claimed.envelopes and not partition.succeeded:
                    # Paused or not: an empty ready list fills only once dispatch (resumed)
                    # pushes to it, and that ends this wait at once.
                    await self._wait_for_ready(partition)
        finally:
            partition.carries_acknowledgements = False
            succeeded, partition.succeeded = partition.succeeded, []
            await self._acknowledge_apart(partition, succeeded)

    def _hold(self, store: QueueStore, claimed: Claimed) -> list[Lease]:
        """The claimed attempts, each held (renewed) from now on."""
        held = []
        for raw in claimed.envelopes:
            try:
                envelope = Envelope.parse(raw, event_type=store.event_type)
            except EnvelopeError as exc:
                # dispatch.lua buries envelopes this would refuse, so only a disagreement
                # between its checks and Envelope.parse lands here; unsettled, it comes back
                # when its lease ends, until it is buried as lost.
                logger.error("%s: unusable envelope %r: %s", store.event_type, raw, exc)
                continue
            held.append(self._leases.hold(store, envelope, claimed.server_now_ms))
        return held

    async def _claim(
        self, partition: _Partition, count: int, succeeded: list[Succeeded]
    ) -> Claimed:
        # Shielded: a claim that returned must reach a handler. Cancelling it halfway would
        # leave its events leased and late by a lease. (The script call has a
        # deadline of its own, so a dead server cannot hold it forever.)
        with anyio.CancelScope(shield=True):
            claimed = await partition.store.claim(
                count,
                lease_ms=self._config.lease_ms,
                acknowledge=[success.envelope for success in succeeded],
            )
        return claimed

    async def _wait_for_slots(self, partition: _Partition) -> int:
        """Waits until slots are free or successes are waiting to be carried; returns the
        slots granted (possibly none)."""
        request = self._slots.request(self._parallelism)
        if request.granted == 0 and not partition.succeeded:
            partition.waiting = request
            try:
                await request.wakeup.wait()
            except BaseException:
                self._slots.release(self._slots.withdraw(request))
                raise
            finally:
                partition.waiting = None
        return self._slots.withdraw(request)

    async def _wait_apart(self, partition: _Partition, seconds: float) -> None:
        """Waits `seconds` before claiming again, acknowledging successes on their own
        meanwhile: while the rate limit's window is full, or while a paused type's ready list
        holds deliveries anyway (pushed by a service that knows no pause), which a wait on
        the list would return for at once, again and again."""
        partition.carries_acknowledgements = False
        try:
            succeeded, partition.succeeded = partition.succeeded, []
            await self._acknowledge_apart(partition, succeeded)
            await anyio.sleep(seconds)
        finally:
            partition.carries_acknowledgements = True

    async def _wait_for_ready(self, partition: _Partition) -> None:
        """Waits until the partition's ready list may hold deliveries (its event, set by a
        wake-up); successes meanwhile are acknowledged on their own."""
        partition.carries_acknowledgements = False
        try:
            succeeded, partition.succeeded = partition.succeeded, []
            await self._acknowledge_apart(partition, succeeded)
            partition.idle = True
            await partition.ready.wait()
        finally:
            partition.idle = False
            partition.carries_acknowledgements = True
