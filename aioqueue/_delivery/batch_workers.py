"""The workers of a batch handler: `parallelism` tasks, each gathering up to `max_size`
claimed events, for at most `max_wait` after the first, and running the handler on them.

A consumer of a batch handler has `parallelism` x `max_size` handler slots, so its takers
claim whole batches in one script call; the successes of a batch ride the next claim of
their partition, which acknowledges them and takes the next batch in the same call."""

from __future__ import annotations

import time

import anyio

from aioqueue._model.batches import Batching

from .batch_runner import BatchRunner
from .handler_runner import NotStarted, Succeeded
from .handoff import Handoff
from .leases import Lease
from .takers import Claim, Partition
from .threaded_calls import LeaseLapsed
from .worker_base import WorkerParts, Workers

__all__ = ["BatchWorkers"]


class BatchWorkers(Workers[BatchRunner]):
    """Runs a batch handler on the claims a consumer's takers hand over."""

    def __init__(
        self, runner: BatchRunner, parts: WorkerParts, *, parallelism: int, batching: Batching
    ) -> None:
        super().__init__(runner, parts, parallelism=parallelism)
        self._batching = batching

    def warn_of_threads(self) -> None:
        """The thread of a sync batch handler warns of itself (threaded_calls.py)."""

    async def run(self, claims: Handoff[Claim | None]) -> None:
        async with anyio.create_task_group() as workers:
            for _ in range(self.parallelism):
                workers.start_soon(self._work, claims)

    async def _work(self, claims: Handoff[Claim | None]) -> None:
        stopping = False
        while not stopping:
            first = await claims.get()
            if first is None:
                return
            batch = [first]
            stopping = await self._gather(claims, batch)
            now = time.monotonic()
            # A handler beginning now might begin after these leases ended (see Lease).
            lapsed: list[Lease] = []
            kept: list[Claim] = []
            for claim in batch:
                if claim.lease.lapsed(now):
                    lapsed.append(claim.lease)
                else:
                    kept.append(claim)
            if lapsed:
                batch = kept
                await self._leases.give_back_lapsed(lapsed, now)
                self._slots.release(len(lapsed))
                if not batch:
                    continue
            leases = [claim.lease for claim in batch]
            try:
                succeeded = await self.runner.run(leases)
            except LeaseLapsed:
                await self._leases.give_back_lapsed(leases, time.monotonic())
                self._slots.release(len(leases))
                continue
            except NotStarted:
                # The consumer stopped taking while the call waited for a thread.
                await self._leases.hand_back(leases)
                self._slots.release(len(leases))
                continue
            except anyio.get_cancelled_exc_class():
                # The service cut its handlers off (its grace is over): given back, spent
                # if the call began.
                self._returns.interrupted(leases)
                raise
            await self._settle(batch, succeeded)

    async def _gather(self, claims: Handoff[Claim | None], batch: list[Claim]) -> bool:
        """Adds claims to `batch` until it is full or `max_wait` has passed since its first;
        True if the takers have stopped meanwhile (this worker took its None)."""
        most = self._batching.max_size
        deadline = anyio.current_time() + self._batching.max_wait
        while True:
            batch.extend(claim for claim in claims.take_up_to(most - len(batch)) if claim)
            if len(batch) >= most:
                return False
            with anyio.move_on_after(deadline - anyio.current_time()):
                claim = await claims.get()
                if claim is None:
                    return True
                batch.append(claim)
                continue
            return False

    async def _settle(self, batch: list[Claim], succeeded: list[Succeeded]) -> None:
        """Frees the failures' slots (settled already) and hands each partition its
        successes, to be acknowledged."""
        by_lease = {id(success.lease): success for success in succeeded}
        by_partition: dict[Partition, list[Succeeded]] = {}
        failed = 0
        for claim in batch:
            success = by_lease.get(id(claim.lease))
            if success is None:
                self._leases.end(claim.lease)
                failed += 1
            else:
                by_partition.setdefault(claim.partition, []).append(success)
        self._slots.release(failed)
        for partition, successes in by_partition.items():
            await self._takers.hand_back(partition, successes)
