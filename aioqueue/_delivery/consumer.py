"""A consumer: takes one event type's due events when handler slots are free, runs them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from aioqueue._model.batches import BatchHandler, Batching
from aioqueue._model.config import ServiceConfig
from aioqueue._model.event import Event
from aioqueue._transport.recovery import logger
from aioqueue._wire.store import QueueStore

from .acknowledger import Acknowledger
from .batch_runner import BatchRunner
from .batch_workers import BatchWorkers
from .event_workers import EventWorkers
from .handler_runner import Handler, HandlerRunner, Succeeded
from .handoff import Handoff
from .leases import Leases
from .slots import SlotPool
from .takers import Claim, Partition, Takers
from .worker_base import WorkerParts, Workers
from .worker_returns import Returns

__all__ = ["Consumer"]


class Consumer:
    """Feeds one handler with up to `parallelism` calls at a time: events one by one, or
    with `batching`, lists of up to `max_size`.

    It asks Redis for events only for free slots (request-one backpressure), so at most
    `parallelism` events (batches of events) of its type are out of Redis in this service at
    any moment. A partitioned type gets one taker per partition, sharing the slots first
    come, first served (takers.py). Long-lived workers run the handler, fed through an
    in-memory handoff.

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
        handler: Handler | BatchHandler,
        parallelism: int,
        config: ServiceConfig,
        leases: Leases,
        ready_event: Callable[[QueueStore], asyncio.Event],
        on_claiming: Callable[[int], None] = lambda ready_left: None,
        thread_limiter: anyio.CapacityLimiter | None = None,
        batching: Batching | None = None,
    ) -> None:
        """`thread_limiter` bounds the threads of a sync handler, shared with the service's
        other sync handlers (anyio's default limiter if None). `ready_event(store)` gives the
        event a partition's taker waits on for deliveries (see WakeUps). `on_claiming` is
        called as a claim goes out, with the length its ready list will have once the claim
        is served (going by the last claim's reply), so that a dispatcher tops the list up
        meanwhile."""
        event_type = stores[0].event_type
        self._partitions = [
            Partition(store, Acknowledger(store), ready_event(store)) for store in stores
        ]
        self._leases = leases
        self._config = config
        self._returns = Returns()
        size = parallelism * (batching.max_size if batching else 1)
        self._slots = SlotPool(size)
        self._takers = Takers(
            slots=self._slots,
            most_per_claim=size,
            leases=leases,
            config=config,
            acknowledged=self._report_successes,
            on_claiming=on_claiming,
        )
        self._workers = self._make_workers(
            event_type, event_class, handler, parallelism, thread_limiter, batching
        )
        self._taking = anyio.CancelScope()
        self._working = anyio.CancelScope()
        self._finished = anyio.Event()

    def _make_workers(
        self,
        event_type: str,
        event_class: type[Event],
        handler: Handler | BatchHandler,
        parallelism: int,
        thread_limiter: anyio.CapacityLimiter | None,
        batching: Batching | None,
    ) -> Workers[Any]:
        config = self._config
        parts = WorkerParts(self._slots, self._leases, self._takers, self._returns)
        if batching is None:
            runner = HandlerRunner(
                event_type=event_type,
                event_class=event_class,
                handler=handler,  # type: ignore[arg-type]  # the registration checked it
                config=config,
                thread_limiter=thread_limiter,
            )
            return EventWorkers(runner, parts, parallelism=parallelism)
        batch_runner = BatchRunner(
            event_type=event_type,
            event_class=event_class,
            handler=handler,  # a BatchHandler takes a list
            config=config,
            thread_limiter=thread_limiter,
        )
        return BatchWorkers(batch_runner, parts, parallelism=parallelism, batching=batching)

    def _report_successes(self, succeeded: Sequence[Succeeded]) -> None:
        self._workers.report_successes(succeeded)

    async def run(self) -> None:
        """Takes and handles events until stop_taking(), then waits for running handlers."""
        # Never more events wait in it than the consumer has slots. None tells a worker to
        # stop.
        claims: Handoff[Claim | None] = Handoff()
        try:
            with self._working:
                await self._run(claims)
        finally:
            await self._give_back()
            self._finished.set()

    async def _run(self, claims: Handoff[Claim | None]) -> None:
        async with anyio.create_task_group() as workers:
            workers.start_soon(self._workers.run, claims)
            try:
                with self._taking:
                    async with anyio.create_task_group() as takers:
                        for partition in self._partitions:
                            takers.start_soon(self._takers.take, partition, claims)
            finally:
                # What was claimed and no worker has taken yet goes back at once, and so
                # does what waits for a thread: the workers finish what they began.
                self._workers.stop_waiting()
                self._returns.not_started += [c.lease for c in claims.take_all() if c]
                await self._give_back()
                for _ in range(self._workers.parallelism):
                    claims.put(None)

    def stop_taking(self) -> None:
        """Takes no more events; handlers already running go on."""
        self._taking.cancel()

    def cut_off(self) -> None:
        """Cancels the handlers still running (the service's shutdown grace is over): their
        events are given back, spent. A sync handler's thread cannot be stopped: its call
        goes on, its lease renewed, and its outcome is settled when it returns."""
        self._workers.warn_of_threads()
        self._working.cancel()

    async def wait_finished(self) -> None:
        await self._finished.wait()

    @property
    def idle_partitions(self) -> int:
        """Partitions whose taker found nothing and waits for a wake-up."""
        return sum(partition.idle for partition in self._partitions)

    async def _give_back(self) -> None:
        """Gives back what no handler began (uncounted) and what was cut off (spent)."""
        not_started, cut_off = self._returns.take()
        if not_started:
            await self._leases.hand_back(not_started)
        if cut_off:
            now = time.monotonic()
            for lease in cut_off:
                assert lease.started is not None
                envelope = lease.envelope
                logger.warning(
                    "handler %s of %s %r (attempt %d) was cut off after %.3g s: the service "
                    "stopped and its shutdown grace (%g s) was over; giving the event back, "
                    "due now",
                    self._workers.handler_name,
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
