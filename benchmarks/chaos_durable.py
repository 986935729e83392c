"""Durable enqueues in the chaos run: acknowledged events through a failover.

With replicas (a cluster's, `--replicas N`, or the Sentinel group's, `--sentinel`), the crash
of the chaos run is a failover, and replication is asynchronous: a master can die with writes
its replicas never got. An enqueue made with `durability(replicas=N)` returns only once the
replicas have its events, so whatever such an enqueue acknowledged must survive the
failover. This module checks that under the whole of the chaos, not in a staged failover
only (tests/faults/test_durability_failover.py stages one):

- Producers in the driver process enqueue main events (ids `durable-N`, due DUE_IN_S later)
  one after another from PRODUCERS tasks at a steady total rate, from the moment the window
  opens until the chaos is over, so the failover comes while some are pending on the master
  that dies and others are being written to it: half the tasks through a service of their
  own with `durability(...)`, half through a SyncProducer with the same durability, each of
  its calls in a worker thread, as blocking code would make it. Their connections are cut
  like everyone's.
- A try that raises (DurabilityError: not confirmed in time; or no node to talk to, a cut
  connection) is made again with the same id until it returns: enqueue is idempotent per id.
  The moment it returns is the producer's promise: the event is *acknowledged*.
- At the end, an acknowledged event that no handler was handed, that is not pending and not
  dead, is *lost*: the run's exit status requires 0. A `durable-` id handed to a handler that
  no try ever wrote is invented.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import anyio
from chaos_worker import PREFIX, ChaosEvent, producer_builder
from redis.exceptions import RedisClusterException, RedisError

from aioqueue import Durability, DurabilityError, SyncProducer

__all__ = ["DURABLE_PREFIX", "DurableProducer", "DurableReport"]

DURABLE_PREFIX = "durable-"
PRODUCERS = 4  # half of them async (a service), half blocking (a SyncProducer)
DUE_IN_S = 1.0
# Short, so that a try refused while a master has no replica yet comes back soon.
CONFIRM_TIMEOUT = timedelta(milliseconds=300)
# Between two tries of one enqueue: nothing tells a client that a failover is over.
RETRY_AFTER_S = 0.02
# A try that never returns in this long fails the run (the event counts as not acknowledged).
GIVE_UP_AFTER_S = 30.0
# What a try may raise and be made again: not confirmed, or no node to talk to.
RETRIED = (DurabilityError, RedisError, RedisClusterException, OSError)


@dataclass
class DurableReport:
    rate_per_s: float
    """Enqueues a second the producer aimed at, all its tasks together."""
    replicas: int
    """Replicas each durable enqueue waited for."""
    acknowledged: int
    """Enqueues that returned."""
    acknowledged_by_sync_producer: int
    """Of those, returned by the SyncProducer."""
    acknowledged_by_crash: tuple[int, int, int]
    """Of those, how many returned before the crash, while the crashed master was down or
    failing over, and after it (all after, without a crash)."""
    refused: int
    """Tries that raised DurabilityError."""
    failed: int
    """Tries that raised another error (no node for the slot, a cut connection)."""
    given_up: int
    """Events whose tries never returned within GIVE_UP_AFTER_S."""
    delivered: int
    """Acknowledged events handed to a handler at least once."""
    lost: int
    """Acknowledged, never handed to a handler, not pending and not dead: must be 0."""
    invented: int
    """`durable-` ids handed to a handler that no try wrote."""


@dataclass
class DurableProducer:
    """The durable enqueues of one chaos run, and what they were promised."""

    rate_per_s: float
    replicas: int
    acknowledged_ms: dict[str, float] = field(default_factory=dict)
    """Event id -> when its enqueue returned (epoch ms)."""
    tried: set[str] = field(default_factory=set)
    acknowledged_by_sync_producer: int = 0
    refused: int = 0
    failed: int = 0
    given_up: int = 0
    _next: int = 0

    async def run(self, url: str, partitions: int, until: float, started: anyio.Event) -> None:
        """Enqueues until the monotonic time `until`; each task finishes the event it began.
        Sets `started` once its service has started."""
        service = (
            producer_builder(url, partitions)
            .durability(replicas=self.replicas, timeout=CONFIRM_TIMEOUT)
            .build()
        )
        blocking = SyncProducer(
            url,
            prefix=PREFIX,
            partitions={ChaosEvent: partitions},
            durability=Durability.of(self.replicas, CONFIRM_TIMEOUT),
        )

        async def enqueue_in_thread(event: ChaosEvent) -> object:
            # Not cancellable once begun: the socket's timeout bounds a blocking call.
            return await anyio.to_thread.run_sync(
                functools.partial(blocking.enqueue, event, DUE_IN_S)
            )

        async def enqueue(event: ChaosEvent) -> object:
            return await service.enqueue(event, DUE_IN_S)

        with blocking:
            async with service, anyio.create_task_group() as tasks:
                started.set()
                for task in range(PRODUCERS):
                    sync = task % 2 == 1
                    tasks.start_soon(
                        self._produce_one_by_one,
                        enqueue_in_thread if sync else enqueue,
                        sync,
                        until,
                    )

    async def _produce_one_by_one(
        self, enqueue: Callable[[ChaosEvent], Awaitable[object]], sync: bool, until: float
    ) -> None:
        # Each task's share of the rate: one enqueue begun every `spacing` seconds at most.
        spacing = PRODUCERS / self.rate_per_s
        while time.monotonic() < until:
            began = time.monotonic()
            if await self._enqueue_until_acknowledged(enqueue):
                self.acknowledged_by_sync_producer += sync
            await anyio.sleep(max(0.0, spacing - (time.monotonic() - began)))

    async def _enqueue_until_acknowledged(
        self, enqueue: Callable[[ChaosEvent], Awaitable[object]]
    ) -> bool:
        """Tries one new event until a try returns (True), or gives up (False)."""
        number, self._next = self._next, self._next + 1
        event_id = f"{DURABLE_PREFIX}{number}"
        event = ChaosEvent(id=event_id, due_ms=round(time.time() * 1000 + DUE_IN_S * 1000))
        self.tried.add(event_id)
        with anyio.move_on_after(GIVE_UP_AFTER_S):
            while True:
                try:
                    # False: an earlier try was stored after all; acknowledged either way.
                    await enqueue(event)
                except DurabilityError:
                    self.refused += 1
                except RETRIED:
                    self.failed += 1
                else:
                    self.acknowledged_ms[event_id] = time.time() * 1000
                    return True
                await anyio.sleep(RETRY_AFTER_S)
        self.given_up += 1
        return False

    def report(
        self,
        *,
        handed_out: Iterable[str],
        still_there: Iterable[str],
        crash_ms: tuple[float, float] | None,
    ) -> DurableReport:
        """What became of the acknowledged events: `handed_out`, every id a handler was handed;
        `still_there`, the ids pending or dead at the end; `crash_ms`, when the crash began and
        how long it lasted (None without one)."""
        handed = {event_id for event_id in handed_out if event_id.startswith(DURABLE_PREFIX)}
        acknowledged = set(self.acknowledged_ms)
        by_crash = [0, 0, 0]
        began, lasted = crash_ms or (0.0, 0.0)
        for at in self.acknowledged_ms.values():
            by_crash[0 if at < began else 1 if at <= began + lasted else 2] += 1
        return DurableReport(
            rate_per_s=self.rate_per_s,
            replicas=self.replicas,
            acknowledged=len(acknowledged),
            acknowledged_by_sync_producer=self.acknowledged_by_sync_producer,
            acknowledged_by_crash=(by_crash[0], by_crash[1], by_crash[2]),
            refused=self.refused,
            failed=self.failed,
            given_up=self.given_up,
            delivered=len(acknowledged & handed),
            lost=len(acknowledged - handed - set(still_there)),
            invented=len(handed - self.tried),
        )
