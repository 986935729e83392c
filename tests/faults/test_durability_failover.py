"""Acknowledged events through a failover that loses writes, with and without durability.

Real processes on loopback. The replica is cut off (SIGSTOP, and its link closed on the
primary, so that nothing written from then on can reach it: see replication_support.py)
while producers go on enqueueing; then the primary is SIGKILLed, the replica resumed and
promoted, and the old primary started again as the new primary's replica (with a single
replica, durable enqueues wait for one to exist). A worker runs throughout.

- With `durability(replicas=1)`: the enqueues tried while the replica was cut off raise
  DurabilityError, the producers try them again until they return after the failover, and
  no acknowledged event is lost.
- Without it (the control run): the primary acknowledges those enqueues, and the promoted
  replica never had them: the test counts them and asserts that it sees a loss, which shows
  that the scenario can lose what durability keeps.

The worker's own writes (dispatches, claims, acknowledgements) during the cut are lost the
same way in both runs: they come back as repeat deliveries, which are counted.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import anyio
import pytest
import redis.asyncio as redis
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError

from aioqueue import EventService, EventServiceBuilder, FixedDelays, ServiceState
from aioqueue._transport.client import client_from_url
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue.testing import EmbeddedCluster, EmbeddedSentinel
from tests.support.common import PaymentCheck, wait_until
from tests.support.failover_flow import Flow, Outcome
from tests.support.replication import cut_off, restart_as_replica, resume, wait_for_replicas

TIMEOUT = 0.2  # of durability: short, so that refused tries come back fast
DUE_IN = 1.0  # events acknowledged during the cut are still pending when the primary dies
BEFORE, DURING, AFTER = 100, 100, 100  # acknowledged before the cut, during it, after
DELIVERED_BEFORE = 50  # of the BEFORE events, which are due at once
PARALLELISM = 8
PARTITIONS = 6
CLUSTER_LAYOUT = QueueLayout("aioqueue", "PaymentCheck", PARTITIONS)
SENTINEL_KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Failover:
    """The rest of a failover whose replica is cut off."""

    kill: Callable[[], Awaitable[None]]
    """SIGKILLs the primary: what it took in from the cut on is gone."""
    promote: Callable[[], Awaitable[None]]
    """Resumes and promotes the replica, and gives it a replica again."""


FailOver = Callable[[], Awaitable[Failover]]
"""Cuts the replica off; returns the rest of the failover."""


def tuned(builder: EventServiceBuilder) -> EventServiceBuilder:
    return (
        builder.scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(1.0)
        .shutdown_grace(2.0)
        .retry_policy(FixedDelays([0.05]))
    )


async def run_through_failover(
    flow: Flow,
    worker: EventService,
    producer: EventService,
    *,
    durable: bool,
    fail_over: FailOver,
    still_pending: Callable[[], Awaitable[bool]],
) -> Run:
    """Runs the flow: BEFORE acknowledged, the cut, DURING acknowledged (or refused), the
    failover, AFTER acknowledged; then waits until everything acknowledged was delivered or
    is gone from the server."""
    async with worker, producer, anyio.create_task_group() as flow_tasks:
        worker.add_handler(PaymentCheck, flow.handler, parallelism=PARALLELISM)
        flow_tasks.start_soon(flow.produce, producer)
        await flow.wait_for(count=BEFORE)
        # The worker is busy when the replica is cut off: its dispatches, claims and
        # acknowledgements from then on die with the primary.
        await flow.handler.wait_for(DELIVERED_BEFORE)
        # Counted from before the cut begins: a delivery while it is under way (the replica
        # frozen, its link not yet closed) may lose its writes too.
        delivered_at_cut = flow.delivered()
        failover = await fail_over()
        cut_at = time.monotonic()
        if durable:
            # Every producer's try is refused: nothing can be confirmed any more.
            await flow.wait_for(refused=2 * flow.producers)
        else:
            await flow.wait_for(acknowledged_since=cut_at, count=DURING)
        # Counted once the primary is dead, not before the kill: events that fell due while
        # it was on its way were delivered from the doomed primary too (a suite run counted 4
        # deliveries and saw 26 repeats).
        await failover.kill()
        killed_at, delivered_in_cut = time.monotonic(), flow.delivered() - delivered_at_cut
        await failover.promote()
        failed_over_at = time.monotonic()
        await flow.wait_for(acknowledged_since=failed_over_at, count=AFTER, within=30)
        flow.stop()

        async def settled() -> bool:
            if set(flow.acknowledged) <= set(flow.handler.ids):
                return True
            try:
                return not await still_pending()
            except RedisConnectionError:
                # This probe's own connection, which the failover's aftermath may still close
                # (it did once, in a CI run): asked again on the next poll. The services'
                # connections are what the test checks, through the flow.
                return False

        await wait_until(settled, within=30)
        assert worker.state is ServiceState.RUNNING
    return Run(failed_over_at - killed_at, delivered_in_cut)


@dataclass(frozen=True)
class Run:
    failover_seconds: float
    delivered_in_cut: int
    """Deliveries that began from the start of the cut to the primary's death: their
    writes may have died with it."""


def services(
    builder: Callable[[], EventServiceBuilder], *, durable: bool
) -> tuple[EventService, EventService]:
    """The worker, and the producer: with durability in the durable run, not in the control."""
    producer = builder().enable_scheduling(False)
    if durable:
        producer = producer.durability(replicas=1, timeout=TIMEOUT)
    return builder().build(), producer.build()


def check(outcome: Outcome, run: Run, what: str, *, durable: bool) -> None:
    print(outcome.report(what, run.failover_seconds), f"({run.delivered_in_cut} in the cut)")
    assert not outcome.invented
    if durable:
        assert outcome.refused > 0  # the cut was seen
        assert not outcome.lost
    else:
        # The control run must be able to see what durability prevents.
        assert outcome.lost
    # Repeats come from the worker's writes lost with the primary: the deliveries of the cut,
    # and those its handlers had begun before it (parallelism 8).
    assert outcome.duplicated <= run.delivered_in_cut + PARALLELISM


# -- Sentinel: one primary, one replica, three sentinels --------------------------------------


@pytest.fixture
def sentinel_group(server_binary: pathlib.Path) -> Iterator[EmbeddedSentinel]:
    with EmbeddedSentinel(binary=server_binary) as group:
        yield group


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "control"])
async def test_sentinel_failover_loses_no_acknowledged_event_with_durability(
    sentinel_group: EmbeddedSentinel, durable: bool
) -> None:
    group = sentinel_group
    primary = await anyio.to_thread.run_sync(group.primary)
    [replica] = [node for node in group.nodes if node is not primary]

    def builder() -> EventServiceBuilder:
        return tuned(EventService.builder().sentinel(group.addresses, service_name="mymaster"))

    worker, producer = services(builder, durable=durable)
    flow = Flow(due_in=DUE_IN, due_at_once=BEFORE)

    async def fail_over() -> Failover:
        await anyio.to_thread.run_sync(cut_off, primary, replica)

        async def kill() -> None:
            await anyio.to_thread.run_sync(group.kill, primary)

        async def promote() -> None:
            resume(replica)
            await anyio.to_thread.run_sync(group.wait_for_failover, primary)
            # The old primary comes back empty, as the new primary's replica.
            await anyio.to_thread.run_sync(restart_as_replica, primary, replica)

        return Failover(kill, promote)

    async with redis.Redis.from_url(replica.url) as new_primary:

        async def still_pending() -> bool:
            return bool(await new_primary.hlen(SENTINEL_KEYS.events))

        run = await run_through_failover(
            flow, worker, producer, durable=durable, fail_over=fail_over,
            still_pending=still_pending,
        )  # fmt: skip
    check(flow.outcome(), run, f"sentinel, {'durable' if durable else 'control'}", durable=durable)


# -- Redis Cluster: three masters, a replica each ---------------------------------------------


@pytest.fixture
def replicated_cluster() -> Iterator[EmbeddedCluster]:
    """A cluster of its own per run: a master gets killed."""
    with EmbeddedCluster(masters=3, replicas_per_master=1, node_timeout_ms=1000) as cluster:
        yield cluster


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "control"])
async def test_cluster_failover_loses_no_acknowledged_event_with_durability(
    replicated_cluster: EmbeddedCluster, durable: bool
) -> None:
    cluster = replicated_cluster
    slot = key_slot(CLUSTER_LAYOUT.all_keys[0].events.encode())
    victim = await anyio.to_thread.run_sync(cluster.master_of_slot, slot)
    [replica] = [
        cluster.node_on(port)
        for slot_range in cluster.slot_ranges()
        if slot_range.master_port == victim.port
        for port in slot_range.replica_ports
    ]

    def builder() -> EventServiceBuilder:
        return tuned(EventService.builder().url(cluster.url).partitions(PaymentCheck, PARTITIONS))

    worker, producer = services(builder, durable=durable)
    flow = Flow(due_in=DUE_IN, due_at_once=BEFORE)

    async def fail_over() -> Failover:
        await anyio.to_thread.run_sync(cut_off, victim, replica)

        async def kill() -> None:
            await anyio.to_thread.run_sync(cluster.kill, victim)

        async def promote() -> None:
            resume(replica)
            await anyio.to_thread.run_sync(cluster.wait_for_new_master, victim)
            # It rejoins as the new master's replica (its saved cluster configuration).
            await anyio.to_thread.run_sync(cluster.restart, victim)
            await anyio.to_thread.run_sync(wait_for_replicas, replica, [victim], probe_key())

        return Failover(kill, promote)

    # The library's own cluster client, which loads a refreshed slot map before it picks a
    # command's node: redis-py's plain one can open a connection on a node that a refresh
    # during the failover has dropped, which closing the client never closes (a CI run ended
    # on ResourceWarnings for four of them).
    client = client_from_url(cluster.url)
    try:

        async def still_pending() -> bool:
            return any([await client.hlen(keys.events) for keys in CLUSTER_LAYOUT.all_keys])

        run = await run_through_failover(
            flow, worker, producer, durable=durable, fail_over=fail_over,
            still_pending=still_pending,
        )  # fmt: skip
    finally:
        await client.aclose()
    check(flow.outcome(), run, f"cluster, {'durable' if durable else 'control'}", durable=durable)


def probe_key() -> str:
    """A key in partition 0's hash tag, for the replication probe on the master serving it."""
    events_key = CLUSTER_LAYOUT.all_keys[0].events
    return f"replication-probe:{events_key[events_key.index('{') : events_key.index('}') + 1]}"
