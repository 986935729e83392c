"""Redis Cluster: every script stays in one slot, and partitioned types spread over masters.

The core suite also runs on the session cluster (its modules are marked
`backends("standalone", "cluster")`, see conftest.py); these tests cover what only a cluster
can show.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
import zlib
from collections import Counter
from collections.abc import Callable

import anyio
import pytest
import redis.asyncio as redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from aioqueue import Event, EventService, EventServiceBuilder
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue.testing import EmbeddedCluster
from tests.support.common import OrderTimeout, PaymentCheck, Recorder, wait_until
from tests.support.script_calls import ScriptCall

Builder = Callable[[], EventServiceBuilder]

# The scripts a running service uses; tools (stats, purge) take their keys from the same
# QueueKeys, which test_every_key_set_of_a_queue_is_in_one_slot covers.
SERVICE_SCRIPTS = {"enqueue", "dispatch", "claim", "acknowledge", "fail", "cancel", "requeue"}


def slot_of(key: str | bytes) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


def partitions_of(event_type: str, partitions: int) -> list[QueueKeys]:
    return list(QueueLayout("aioqueue", event_type, partitions).all_keys)


def test_an_embedded_cluster_starts_in_a_few_seconds_with_the_slots_split_evenly(
    server_binary: pathlib.Path,
) -> None:
    """Start-up waits until all nodes agree, on every server version (a core test of the
    matrix: Redis 6.2 has no CLUSTER ADDSLOTSRANGE); the slots are split in 3 contiguous
    thirds, master i taking the i-th; kill() takes down exactly the node it is given."""
    started = time.monotonic()
    with EmbeddedCluster(masters=3, binary=server_binary) as cluster:
        took = time.monotonic() - started
        ranges = cluster.slot_ranges()
        first = cluster.nodes[0]
        assert cluster.master_of_slot(0) is first
        cluster.kill(first)
        assert first.pid is None
        assert [node.pid is not None for node in cluster.nodes] == [False, True, True]
    print(f"\n3-master cluster ready in {took:.2f} s")
    assert took < 5.0
    assert [(r.first, r.last) for r in ranges] == [(0, 5460), (5461, 10921), (10922, 16383)]
    assert [r.master_port for r in ranges] == [node.port for node in cluster.nodes]
    assert all(not r.replica_ports for r in ranges)


@pytest.mark.parametrize("partitions", [1, 2, 3, 8, 64])
@pytest.mark.parametrize("event_type", ["PaymentCheck", "custom-name", "a.b_c-9"])
def test_every_key_set_of_a_queue_is_in_one_slot(event_type: str, partitions: int) -> None:
    """All keys a script can be given come from one QueueKeys, and each of those is one slot:
    so no script call can span slots, and CROSSSLOT cannot happen. The partitions of a type
    fall in distinct, evenly spread shares of the slot space, so 3 or more of them reach each
    master of an evenly split 3-master cluster."""
    key_sets = partitions_of(event_type, partitions)
    slots = []
    for keys in key_sets:
        [slot] = {slot_of(key) for key in dataclasses.astuple(keys)}
        slots.append(slot)
    assert len(set(slots)) == partitions
    for partition, slot in enumerate(slots):
        assert slot * partitions // REDIS_CLUSTER_HASH_SLOTS == partition
    if partitions >= 3:
        assert {slot * 3 // REDIS_CLUSTER_HASH_SLOTS for slot in slots} == {0, 1, 2}


@pytest.mark.backends("cluster")
async def test_every_script_call_of_the_core_flow_touches_one_slot(
    service_builder: Builder,
    redis_client: RedisClient,
    redis_cluster: EmbeddedCluster,
    script_calls: list[ScriptCall],
) -> None:
    """Enqueue, replace, cancel, dispatch, claim, acknowledge, fail, dead letters and requeue,
    on a plain and on a partitioned type: every script call names keys of one slot, and the
    servers never answered CROSSSLOT."""
    failures_left = {"doomed": 2}

    def succeed_unless_doomed(event: Event) -> bool:
        if failures_left.get(event.id, 0) > 0:
            failures_left[event.id] -= 1
            return False
        return True

    payments = Recorder(outcome=succeed_unless_doomed)
    timeouts = Recorder()
    held_started, release_held = anyio.Event(), anyio.Event()

    async def handle_payment(event: PaymentCheck) -> bool:
        if event.id == "held":
            # Finishes while the consumer waits inside Redis: acknowledged on its own.
            held_started.set()
            await release_held.wait()
        return await payments(event)

    builder = service_builder().retry_attempts(2).partitions(OrderTimeout, 8)
    async with builder.build() as service:
        # Two slots: while "held" runs, the consumer waits for more inside Redis.
        service.add_handler(PaymentCheck, handle_payment, parallelism=2)
        service.add_handler(OrderTimeout, timeouts, parallelism=4)
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
        assert not await service.enqueue(PaymentCheck(id="p-1", order_id=2), 0)
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=3), 0, replace=True)
        assert await service.enqueue(PaymentCheck(id="p-3", order_id=3), 3600)
        assert await service.cancel(PaymentCheck, "p-3")
        assert await service.enqueue(PaymentCheck(id="doomed", order_id=4), 0)
        events = [OrderTimeout(id=f"o-{n}") for n in range(40)]
        assert all(await service.enqueue_many(events, 0))
        assert await service.enqueue(OrderTimeout(id="o-cancelled"), 3600)
        assert await service.cancel(OrderTimeout, "o-cancelled")

        async def doomed_is_dead() -> bool:
            return bool(await service.dead_letters(PaymentCheck))

        await wait_until(doomed_is_dead)
        assert await service.requeue(PaymentCheck, "doomed")
        with anyio.fail_after(10):
            while sorted(set(payments.ids)) != ["doomed", "p-1"]:
                await payments.wait_for(len(payments.deliveries) + 1)
        await timeouts.wait_for(40)
        assert await service.enqueue(PaymentCheck(id="held", order_id=5), 0)
        with anyio.fail_after(10):
            await held_started.wait()

        async def every_consumer_waits() -> bool:
            # One taker per OrderTimeout partition, and the PaymentCheck consumer's.
            consumers = [service._delivery.consumer_of(cls) for cls in (OrderTimeout, PaymentCheck)]
            return sum(c.idle_partitions for c in consumers if c is not None) == 8 + 1

        await wait_until(every_consumer_waits)
        release_held.set()
        await payments.wait_for(len(payments.deliveries) + 1)

    calls = [(call.script, call.keys) for call in script_calls]
    ran = {name for name, _ in calls}
    assert ran >= SERVICE_SCRIPTS, f"not exercised: {SERVICE_SCRIPTS - ran}"
    for name, keys in calls:
        assert len({slot_of(key) for key in keys}) == 1, (name, keys)
    # The 8 partitions of OrderTimeout were all used, each through its own slot.
    order_slots = {slot_of(keys[0]) for _, keys in calls if "OrderTimeout" in keys[0]}
    assert order_slots == {slot_of(k.events) for k in partitions_of("OrderTimeout", 8)}
    assert Counter(timeouts.ids) == Counter(f"o-{n}" for n in range(40))
    for master in await anyio.to_thread.run_sync(redis_cluster.masters):
        async with redis.Redis(host=master.host, port=master.port) as node:
            errors = await node.info("errorstats")
        assert "errorstat_CROSSSLOT" not in errors, errors


@pytest.mark.backends("cluster")
async def test_a_partitioned_type_lands_on_every_master_and_delivers_each_event_once(
    service_builder: Builder, redis_client: RedisClient, redis_cluster: EmbeddedCluster
) -> None:
    """8 partitions of one type on 3 masters: each master holds some of them (asked of the
    nodes themselves, not computed), and 800 events are each delivered exactly once."""
    key_sets = partitions_of("PaymentCheck", 8)
    ids = [f"p-{n}" for n in range(800)]
    handler = Recorder()
    async with service_builder().partitions(PaymentCheck, 8).build() as service:
        assert all(await service.enqueue_many([PaymentCheck(id=i, order_id=0) for i in ids], 0.1))
        holders: dict[int, list[int]] = {}
        masters = await anyio.to_thread.run_sync(redis_cluster.masters)
        for master in masters:
            async with redis.Redis(host=master.host, port=master.port) as node:
                for partition, keys in enumerate(key_sets):
                    # Counts only the keys this node itself holds in the slot.
                    held = await node.cluster("COUNTKEYSINSLOT", slot_of(keys.events))
                    if int(held):
                        holders.setdefault(master.port, []).append(partition)
        service.add_handler(PaymentCheck, handler, parallelism=16)
        await handler.wait_for(len(ids))

        async def drained() -> bool:
            pending = [await redis_client.hlen(keys.events) for keys in key_sets]
            return not any(pending)

        await wait_until(drained)
    assert sorted(holders) == sorted(master.port for master in masters)
    assert sorted(p for partitions in holders.values() for p in partitions) == list(range(8))
    # Exactly once: every id one time, no more (leaving the service waited for all handlers).
    assert Counter(handler.ids) == Counter(ids)


@pytest.mark.backends("cluster")
async def test_a_script_call_takes_one_round_trip(
    service_builder: Builder, redis_cluster: EmbeddedCluster
) -> None:
    """Left to itself, redis-py asks a node where an FCALL goes (COMMAND GETKEYS, with all
    its arguments) before sending it: two round trips a claim or dispatch. The library names
    the node itself (steps.py), so the masters see the calls and no such question."""
    masters = await anyio.to_thread.run_sync(redis_cluster.masters)
    for master in masters:
        async with redis.Redis(host=master.host, port=master.port) as node:
            await node.config_resetstat()
    handler = Recorder()
    async with service_builder().partitions(PaymentCheck, 4).build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=4)
        assert await service.enqueue(PaymentCheck(id="one", order_id=1), 0)
        assert all(
            await service.enqueue_many(
                [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(40)], 0
            )
        )
        await handler.wait_for(41)
    script_calls, questions = 0, 0
    for master in masters:
        async with redis.Redis(host=master.host, port=master.port) as node:
            stats = await node.info("commandstats")
        script_calls += sum(
            int(value["calls"])
            for name, value in stats.items()
            if name in ("cmdstat_fcall", "cmdstat_evalsha")
        )
        questions += int(stats.get("cmdstat_command|getkeys", {"calls": 0})["calls"])
    assert script_calls > 41 // 4  # dispatches and claims at least
    assert questions == 0


async def first_commands_on_a_fresh_client(url: str, ids: list[str]) -> tuple[list[bool], Recorder]:
    """A new service on `url` enqueues `ids` all at once as soon as it has started."""
    handler = Recorder()
    results: list[bool] = []
    service = (
        EventService.builder()
        .url(url)
        .partitions(PaymentCheck, 8)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(5.0)
        .build()
    )

    async def enqueue(event_id: str) -> None:
        results.append(await service.enqueue(PaymentCheck(id=event_id, order_id=0), 0))

    async with service:
        service.add_handler(PaymentCheck, handler, parallelism=8)
        async with anyio.create_task_group() as producers:
            for event_id in ids:
                producers.start_soon(enqueue, event_id)
        # Well within the 6 s lease that a claim run twice would hold an event back for.
        await handler.wait_for(len(ids), within=3)
    return results, handler


@pytest.mark.backends("cluster")
async def test_a_service_with_a_fresh_cluster_client_runs_every_command_once(
    redis_url: str, redis_client: RedisClient
) -> None:
    """A client made from a `redis+cluster://` URL has no slot map until its first command.
    Concurrent first commands (enqueues, and the service's own takers and wake-up waits on 8
    partitions) must each run once: an enqueue run twice would answer False for a new event,
    and a claim run twice would hold its events back for a whole lease."""
    for round_number in range(2):
        ids = [f"r{round_number}-{n}" for n in range(60)]
        results, handler = await first_commands_on_a_fresh_client(redis_url, ids)
        assert results == [True] * len(ids)
        assert Counter(handler.ids) == Counter(ids)


def ids_in_partition(partition: int, partitions: int, count: int, prefix: str) -> list[str]:
    """`count` ids whose partition (crc32 of the id, modulo `partitions`) is `partition`."""
    ids: list[str] = []
    n = 0
    while len(ids) < count:
        candidate = f"{prefix}-{n}"
        if zlib.crc32(candidate.encode()) % partitions == partition:
            ids.append(candidate)
        n += 1
    return ids


@pytest.mark.backends("standalone", "cluster")
async def test_a_flooded_partition_does_not_hold_back_the_others(service_builder: Builder) -> None:
    """800 due events in partition 0, 10 ms of work each, 4 handler slots: about 2 s of work.
    One event enqueued meanwhile in each other partition is delivered within a fraction of
    that, long before the flood is done: partitions share the slots in turn."""
    flood = ids_in_partition(0, 8, 800, "flood")
    others = [ids_in_partition(p, 8, 1, f"other{p}")[0] for p in range(1, 8)]
    recorder = Recorder()
    delivered_at: dict[str, float] = {}

    async def work(event: PaymentCheck) -> bool:
        delivered_at.setdefault(event.id, time.monotonic())
        await anyio.sleep(0.01)  # the handler's work
        return await recorder(event)

    async with service_builder().partitions(PaymentCheck, 8).build() as service:
        assert all(await service.enqueue_many([PaymentCheck(id=i, order_id=0) for i in flood], 0))
        service.add_handler(PaymentCheck, work, parallelism=4)
        await recorder.wait_for(40)
        enqueued_at = time.monotonic()
        assert all(await service.enqueue_many([PaymentCheck(id=i, order_id=1) for i in others], 0))
        with anyio.fail_after(10):
            while not set(others) <= set(recorder.ids):
                await recorder.wait_for(len(recorder.deliveries) + 1)
        flood_done = sum(1 for i in recorder.ids if i.startswith("flood"))
        waited = max(delivered_at[i] for i in others) - enqueued_at
        service.remove_handler(PaymentCheck)
    print(f"\nother partitions waited {waited:.3f} s; {flood_done}/800 flood events were done")
    assert waited < 0.5
    assert flood_done < 400
