"""The workers of a handler of one event: `parallelism` long-lived tasks, each running the
handler on one claimed event at a time, in a timeout lane of its own (handler_timeouts.py).

A worker whose handler succeeded hands the event, with its slot, back to its partition's
taker (takers.py); a failure is settled by the runner and frees the slot at once."""

from __future__ import annotations

import math
import time

import anyio

from aioqueue._transport.recovery import logger

from .handler_runner import HandlerRunner, NotStarted
from .handler_timeouts import TimeoutLane
from .handoff import Handoff
from .takers import Claim
from .threaded_calls import LeaseLapsed
from .worker_base import WorkerParts, Workers

__all__ = ["EventWorkers"]


class EventWorkers(Workers[HandlerRunner]):
    """Runs a handler of one event on the claims a consumer's takers hand over."""

    def __init__(self, runner: HandlerRunner, parts: WorkerParts, *, parallelism: int) -> None:
        super().__init__(runner, parts, parallelism=parallelism)
        self._lanes: list[TimeoutLane] = []

    async def run(self, claims: Handoff[Claim | None]) -> None:
        async with anyio.create_task_group() as timer:
            timer.start_soon(self.runner.timeouts.run)
            async with anyio.create_task_group() as workers:
                for _ in range(self.parallelism):
                    workers.start_soon(self._work, claims)
            timer.cancel_scope.cancel()

    def warn_of_threads(self) -> None:
        now = time.monotonic()
        for lane in self._lanes:
            call = lane.call
            if call is not None and call.lease.started is not None and lane.deadline == math.inf:
                envelope = call.lease.envelope
                logger.warning(
                    "waiting for sync handler %s on %s %r (attempt %d), running for %.3g s: "
                    "a thread cannot be stopped",
                    self.runner.handler_name,
                    envelope.event_type,
                    envelope.id,
                    envelope.attempt,
                    now - call.lease.started,
                )

    async def _work(self, claims: Handoff[Claim | None]) -> None:
        """Handles claims until the takers have stopped and every claimed one is handled."""
        lane = self.runner.timeouts.lane()
        self._lanes.append(lane)
        while True:
            try:
                with anyio.CancelScope() as lane.scope:
                    await self._work_in_lane(claims, lane)
                    return
            except anyio.get_cancelled_exc_class():
                # The service cut its handlers off (its grace is over): the call running in
                # this lane, if one began, is given back as spent.
                running = lane.call
                if running is not None:
                    self._returns.interrupted([running.lease])
                raise
            # Only reached when the timeout cancelled the lane's scope (see HandlerTimeouts).
            call = lane.call
            if call is not None and await self.runner.settle_timeout(lane):
                self._leases.end(call.lease)
                self._slots.release(1)

    async def _work_in_lane(self, claims: Handoff[Claim | None], lane: TimeoutLane) -> None:
        while (claim := await claims.get()) is not None:
            lease = claim.lease
            now = time.monotonic()
            if lease.lapsed(now):
                # The handler would begin after the lease may have ended (see Lease).
                await self._leases.give_back_lapsed([lease], now)
                self._slots.release(1)
                continue
            try:
                succeeded = await self.runner.run(lease, lane)
            except LeaseLapsed:
                await self._leases.give_back_lapsed([lease], time.monotonic())
                self._slots.release(1)
                continue
            except NotStarted:
                # The consumer stopped taking while this call waited for a thread: give it
                # back now, not when the calls that did start are over.
                await self._leases.hand_back([lease])
                self._slots.release(1)
                continue
            if succeeded is None:
                self._leases.end(lease)
                self._slots.release(1)  # settled as a failure already
            else:
                await self._takers.hand_back(claim.partition, [succeeded])
