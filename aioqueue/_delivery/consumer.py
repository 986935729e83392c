"""A consumer: takes one event type's due events when handler slots are free, runs them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from aioqueue._engine.held_connection import HeldConnection
from aioqueue._engine.recovery import REDIS_ERRORS, ErrorBackoff
from aioqueue._engine.store import Claimed, QueueStore
from aioqueue._model.config import ServiceConfig
from aioqueue._model.event import Event

from .acknowledger import Acknowledger
from .handler_runner import Handler, HandlerRunner, Succeeded
from .handler_timeouts import TimeoutLane
from .handoff import Handoff
from .slots import SlotPool, SlotRequest

__all__ = ["Consumer"]


@dataclass(eq=False)
class _Partition:
    """One partition's keys, and the successes waiting to be acknowledged there."""

    store: QueueStore
    acknowledger: Acknowledger
    claims: HeldConnection
    """The connection the partition's claims go out on, one after another."""
    carries_acknowledgements: bool = False
    """True while the partition's taker is about to claim: successes then ride that claim.
    False while it waits inside Redis or has stopped: successes are then acknowledged on
    their own, so that none waits for a claim that may be a polling timeout away."""
    succeeded: list[Succeeded] = field(default_factory=list)
    """Successes handed to the taker, each still holding its handler slot."""
    waiting: SlotRequest | None = None
    """The taker's pending request for slots; handing it a success wakes it too."""
    ready_left: int | None = None
    """Deliveries its ready list held after the taker's last claim (None before the first)."""


@dataclass(slots=True)  # not frozen: one is made per event, and frozen init is slower
class _Delivery:
    partition: _Partition
    raw: bytes | str
    claimed_at_ms: int


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
    """

    def __init__(
        self,
        *,
        stores: Sequence[QueueStore],
        event_class: type[Event],
        handler: Handler,
        parallelism: int,
        config: ServiceConfig,
        on_claiming: Callable[[int], None] = lambda ready_left: None,
        thread_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        """`thread_limiter` bounds the threads of a sync handler, shared with the service's
        other sync handlers (anyio's default limiter if None). `on_claiming` is called as a
        claim goes out, with the length its ready list will have once the claim is served
        (going by the last claim's reply), so that a dispatcher tops the list up meanwhile."""
        event_type = stores[0].event_type
        self._partitions = [
            _Partition(store, Acknowledger(store), HeldConnection(store.client)) for store in stores
        ]
        self._runner = HandlerRunner(
            event_type=event_type,
            event_class=event_class,
            handler=handler,
            config=config,
            thread_limiter=thread_limiter,
        )
        self._on_claiming = on_claiming
        self._parallelism = parallelism
        self._config = config
        self._slots = SlotPool(parallelism)
        self._taking = anyio.CancelScope()
        self._finished = anyio.Event()

    async def run(self) -> None:
        """Takes and handles events until stop_taking(), then waits for running handlers."""
        # Never more than `parallelism` deliveries wait in it, one per slot in use. None tells
        # a worker to stop.
        deliveries: Handoff[_Delivery | None] = Handoff()
        try:
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
                        # After what was claimed: the workers finish every claimed event.
                        for _ in range(self._parallelism):
                            deliveries.put(None)
                timer.cancel_scope.cancel()
        finally:
            self._finished.set()

    def stop_taking(self) -> None:
        """Takes no more events; handlers already running go on."""
        self._taking.cancel()

    async def wait_finished(self) -> None:
        await self._finished.wait()

    # -- workers ------------------------------------------------------------------------------

    async def _work(self, deliveries: Handoff[_Delivery | None]) -> None:
        """Handles deliveries until the takers have stopped and every claimed one is handled."""
        lane = self._runner.timeouts.lane()
        while True:
            with anyio.CancelScope() as lane.scope:
                await self._work_in_lane(deliveries, lane)
                return
            # Only reached when the timeout cancelled the lane's scope (see HandlerTimeouts).
            if await self._runner.settle_timeout(lane):
                self._slots.release(1)

    async def _work_in_lane(self, deliveries: Handoff[_Delivery | None], lane: TimeoutLane) -> None:
        while (delivery := await deliveries.get()) is not None:
            partition = delivery.partition
            succeeded = await self._runner.run(
                partition.store, delivery.raw, delivery.claimed_at_ms, lane
            )
            if succeeded is None:
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
                    self._runner.report_success(success)
                self._slots.release(granted + len(succeeded) - len(claimed.envelopes))
                partition.ready_left = claimed.ready_left
                for raw in claimed.envelopes:
                    deliveries.put(_Delivery(partition, raw, claimed.server_now_ms))
                if claimed.limited_until_ms is not None and not partition.succeeded:
                    # The rate window is full: nothing can be handed out before it moves on.
                    wait = (claimed.limited_until_ms - claimed.server_now_ms + 1) / 1000
                    await self._wait_apart(partition, max(0.001, wait))
                elif claimed.paused and claimed.ready_left and not partition.succeeded:
                    await self._wait_apart(partition, self._config.polling_timeout)
                elif count and not claimed.envelopes and not partition.succeeded:
                    # Paused or not: an empty ready list fills only once dispatch (resumed)
                    # pushes to it, and that ends this wait at once.
                    await self._wait_for_ready(partition, errors)
        finally:
            partition.carries_acknowledgements = False
            succeeded, partition.succeeded = partition.succeeded, []
            await self._acknowledge_apart(partition, succeeded)
            await partition.claims.release()

    async def _claim(
        self, partition: _Partition, count: int, succeeded: list[Succeeded]
    ) -> Claimed:
        # Shielded: a claim that returned must reach a handler. Cancelling it halfway would
        # leave its events leased and late by a handler timeout. (The script call has a
        # deadline of its own, so a dead server cannot hold it forever.)
        with anyio.CancelScope(shield=True):
            claimed = await partition.store.claim(
                count,
                lease_ms=self._config.lease_ms,
                acknowledge=[success.envelope for success in succeeded],
                held=partition.claims,
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

    async def _wait_for_ready(self, partition: _Partition, errors: ErrorBackoff) -> None:
        """Blocks inside Redis until the ready list has envelopes; successes meanwhile are
        acknowledged on their own."""
        partition.carries_acknowledgements = False
        try:
            succeeded, partition.succeeded = partition.succeeded, []
            await self._acknowledge_apart(partition, succeeded)
            await partition.store.wait_for_ready(self._config.polling_timeout)
        except REDIS_ERRORS as exc:
            await errors.sleep_after(exc)
        finally:
            partition.carries_acknowledgements = True
