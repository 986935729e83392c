"""`durability(...)` on Redis Cluster: each master confirms the calls it ran, with one WAIT on
the connection that sent them, in the same round trip (3 masters with a replica each)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anyio
import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.crc import key_slot

from aioqueue import Durability, DurabilityError, EventService
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import enqueue_many_steps
from aioqueue._transport.steps import run_steps_sync
from aioqueue._wire.keys import QueueLayout
from aioqueue.testing import EmbeddedCluster, EmbeddedServer
from tests.support.common import PaymentCheck
from tests.support.replication import command_calls, freeze, resume, wait_for_replicas

PARTITIONS = 6
LAYOUT = QueueLayout("aioqueue", "PaymentCheck", PARTITIONS)
TIMEOUT = 0.2
HOUR = 3600


@pytest.fixture(scope="module")
def cluster() -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(masters=3, replicas_per_master=1) as started:
        for slot_range in started.slot_ranges():
            replicas = [started.node_on(port) for port in slot_range.replica_ports]
            probe = next(
                key
                for key in (f"probe-{n}" for n in range(100_000))
                if slot_range.first <= key_slot(key.encode()) <= slot_range.last
            )
            wait_for_replicas(started.node_on(slot_range.master_port), replicas, probe)
        yield started


@pytest.fixture
async def client(cluster: EmbeddedCluster) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(cluster.url.replace("+cluster", ""))
    await client.initialize()
    await client.flushall(target_nodes=RedisCluster.PRIMARIES)
    yield client
    await client.aclose()


def master_and_replica(
    cluster: EmbeddedCluster, event_id: str
) -> tuple[EmbeddedServer, EmbeddedServer]:
    """The master that holds an event's partition, and its replica."""
    slot = key_slot(LAYOUT.keys_for(event_id).events.encode())
    for slot_range in cluster.slot_ranges():
        if slot_range.first <= slot <= slot_range.last:
            [replica_port] = slot_range.replica_ports
            return cluster.node_on(slot_range.master_port), cluster.node_on(replica_port)
    raise AssertionError(f"no master serves slot {slot}")


async def on_replica(cluster: EmbeddedCluster, event_id: str) -> bool:
    _, replica = master_and_replica(cluster, event_id)
    # Straight to the replica (the cluster client reads from masters), on one connection
    # that READONLY lets read its master's slots.
    async with Redis(host=replica.host, port=replica.port, single_connection_client=True) as direct:
        await direct.execute_command("READONLY")  # type: ignore[no-untyped-call]
        return bool(await direct.hexists(LAYOUT.keys_for(event_id).events, event_id))


def durable_service(cluster: EmbeddedCluster) -> EventService:
    return (
        EventService.builder()
        .url(cluster.url)
        .partitions(PaymentCheck, PARTITIONS)
        .enable_scheduling(False)
        .durability(replicas=1, timeout=TIMEOUT)
        .build()
    )


async def test_each_master_confirms_its_own_calls_with_one_wait(
    cluster: EmbeddedCluster, client: RedisCluster
) -> None:
    events = [PaymentCheck(id=f"e-{n}", order_id=n) for n in range(120)]
    masters = cluster.masters()
    assert len({master_and_replica(cluster, e.id)[0].port for e in events}) == len(masters)
    async with durable_service(cluster) as service:
        # The first calls on a node may find no function library yet: run again on their
        # own, they are confirmed by a second pipeline (see durability.py).
        assert await service.enqueue(PaymentCheck(id="warm-up", order_id=0), HOUR)
        await service.enqueue_many([PaymentCheck(id=f"w-{n}", order_id=n) for n in range(60)], 0)
        waits = {master.port: command_calls(master, "wait") for master in masters}
        assert await service.enqueue_many(events, HOUR) == [True] * len(events)
    # One call per partition, one pipeline and one WAIT per master, not per call or event.
    assert {m.port: command_calls(m, "wait") - waits[m.port] for m in masters} == {
        m.port: 1 for m in masters
    }
    for event in events:  # right after the return, with no waiting
        assert await on_replica(cluster, event.id), event.id


async def test_a_frozen_replica_fails_the_writes_of_its_master_only(
    cluster: EmbeddedCluster, client: RedisCluster
) -> None:
    held_back = PaymentCheck(id="e-0", order_id=0)
    master, replica = master_and_replica(cluster, held_back.id)
    elsewhere = next(
        PaymentCheck(id=f"e-{n}", order_id=n)
        for n in range(1, 100)
        if master_and_replica(cluster, f"e-{n}")[0] is not master
    )
    async with durable_service(cluster) as service:
        freeze(replica)
        try:
            with pytest.raises(DurabilityError):
                await service.enqueue(held_back, HOUR)
            assert await service.enqueue(elsewhere, HOUR)
            # A batch that reaches the frozen master fails as a whole: retry it whole.
            with pytest.raises(DurabilityError):
                await service.enqueue_many([held_back, elsewhere], HOUR)
        finally:
            resume(replica)
        assert await service.enqueue_many([held_back, elsewhere], HOUR) == [False, False]
    assert await on_replica(cluster, held_back.id)


async def test_the_blocking_cluster_client_confirms_per_node_too(
    cluster: EmbeddedCluster, client: RedisCluster
) -> None:
    """What a SyncProducer or a Spark task runs on a cluster."""
    items = [
        EnqueueItem(f"s-{n}", '{"order_id":1}', "{}", HOUR * 1000, absolute=False)
        for n in range(30)
    ]
    durability = Durability.of(1, TIMEOUT)
    with SyncRedisCluster.from_url(cluster.url.replace("+cluster", "")) as sync_client:

        def enqueue(batch: list[EnqueueItem]) -> list[bool]:
            writes = [(LAYOUT.keys_for(item.id), LAYOUT.event_type, item) for item in batch]
            steps = enqueue_many_steps(sync_client, writes, mode=WriteMode(), durability=durability)
            return run_steps_sync(sync_client, steps)

        assert await anyio.to_thread.run_sync(enqueue, items) == [True] * len(items)
        for item in items:
            assert await on_replica(cluster, item.id)
        _, replica = master_and_replica(cluster, items[0].id)
        freeze(replica)
        try:
            with pytest.raises(DurabilityError):
                await anyio.to_thread.run_sync(enqueue, items)
        finally:
            resume(replica)
        assert await anyio.to_thread.run_sync(enqueue, items) == [False] * len(items)
