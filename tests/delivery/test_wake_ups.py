"""Event-driven dispatching: woken by other processes' enqueues, no waiting on full batches."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from aioqueue import EventService, EventServiceBuilder
from aioqueue._delivery import dispatcher as dispatcher_module
from aioqueue._transport.client import RedisClient, client_from_url
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.store import (
    PEEK_CHUNK,
    DispatchCall,
    DispatchResult,
    QueueStore,
    dispatch_queues,
    peek_queues,
)
from tests.support.common import PaymentCheck, Recorder

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


@pytest.mark.parametrize("partitions", [1, 4])
async def test_an_enqueue_from_another_process_wakes_a_sleeping_dispatcher(
    service_builder: Builder, redis_url: str, partitions: int
) -> None:
    """With a 5 s scheduling interval, a sooner event from another client still arrives on time.

    The producer shares nothing with the worker but the server, as another process would;
    only the message the enqueue publishes on the queue's wake channel can tell the sleeping
    dispatcher, and it wakes that queue (the event's partition) alone.
    """
    handler = Recorder()
    producer_client = client_from_url(redis_url)
    producer_builder = EventService.builder().client(producer_client).enable_scheduling(False)
    producer = producer_builder.partitions(PaymentCheck, partitions).build()
    worker = service_builder().scheduling_interval(5).partitions(PaymentCheck, partitions).build()
    async with worker:
        worker.add_handler(PaymentCheck, handler)
        await producer.enqueue(PaymentCheck(id="later", order_id=0), 3600)
        # Once the warm-up event is handled, the dispatcher sleeps until the warm-up's
        # lease (2 s) at least: without a wake-up, the next event would wait for that.
        await producer.enqueue(PaymentCheck(id="warm-up", order_id=1), 0)
        await handler.wait_for(1, within=3)
        started = time.monotonic()
        await producer.enqueue(PaymentCheck(id="soon", order_id=2), 0.2)
        await handler.wait_for(2, within=3)
        elapsed = time.monotonic() - started
    await producer_client.aclose()
    assert handler.ids == ["warm-up", "soon"]
    assert 0.19 <= elapsed < 1.0


async def test_a_wake_up_outlives_a_pass_that_failed(
    service_builder: Builder, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass that a lost connection ends has taken its queues' wake-ups and may not have
    made their calls: the pass after the error calls every queue, so the sooner event does
    not wait for its queue's own time (the warm-up's lease, 2 s on)."""
    failed: list[str] = []

    async def fail_once(
        client: RedisClient, calls: Sequence[tuple[QueueStore, DispatchCall]]
    ) -> list[DispatchResult | ResponseError]:
        if armed and not failed:
            failed.extend(store.event_type for store, _ in calls)
            raise RedisConnectionError("connection lost (injected)")
        return await dispatch_queues(client, calls)

    armed = False
    monkeypatch.setattr(dispatcher_module, "dispatch_queues", fail_once)
    handler = Recorder()
    producer_client = client_from_url(redis_url)
    producer = EventService.builder().client(producer_client).enable_scheduling(False).build()
    worker = service_builder().scheduling_interval(5).build()
    async with worker:
        worker.add_handler(PaymentCheck, handler)
        await producer.enqueue(PaymentCheck(id="warm-up", order_id=1), 0)
        await handler.wait_for(1, within=3)
        armed = True
        started = time.monotonic()
        await producer.enqueue(PaymentCheck(id="soon", order_id=2), 0.2)
        await handler.wait_for(2, within=3)
        elapsed = time.monotonic() - started
    await producer_client.aclose()
    assert failed == ["PaymentCheck"]
    assert handler.ids == ["warm-up", "soon"]
    assert 0.19 <= elapsed < 1.0


async def test_a_full_batch_is_followed_by_the_next_at_once(service_builder: Builder) -> None:
    """With batches of 10 and a 5 s interval, 200 due events still arrive within a second."""
    handler = Recorder()
    service = service_builder().scheduling_interval(5).scheduling_batch_size(10).build()
    async with service:
        await service.enqueue_many([PaymentCheck(id=f"p-{n}", order_id=n) for n in range(200)], 0)
        started = time.monotonic()
        service.add_handler(PaymentCheck, handler, parallelism=20)
        await handler.wait_for(200, within=4)
    assert time.monotonic() - started < 1.0


async def test_a_sweep_reads_many_queues_per_call_and_passes_over_an_unreadable_one(
    redis_client: RedisClient,
) -> None:
    """peek.lua reads a chunk of queues in one call on one server (one per call on a
    cluster, whose calls keep to one slot): 600 queues, one with an event due at a known
    time and one with a string where its ready list should be, each read as it is, the
    unreadable one as None, and the server told of no more calls than the chunks."""
    stores = [
        QueueStore(redis_client, QueueKeys.for_type("sweep", f"Many{n}"), f"Many{n}")
        for n in range(600)
    ]
    due_ms = 4_102_444_800_000  # 2100-01-01
    await redis_client.zadd(stores[7].keys.schedule, {"e-1": due_ms})
    await redis_client.rpush(stores[7].keys.ready, "x", "y")
    await redis_client.set(stores[300].keys.ready, "not a list")
    await peek_queues(redis_client, stores[:1])  # the Lua code loaded before counting
    before = await peek_calls(redis_client)
    peeks = await peek_queues(redis_client, stores)
    calls = await peek_calls(redis_client) - before
    assert peeks[300] is None
    seven = peeks[7]
    assert seven is not None
    assert (seven.earliest_due_ms, seven.ready_length) == (due_ms, 2)
    assert all(p is not None and p.earliest_due_ms is None for p in peeks[8:300])
    assert len(peeks) == 600
    if not isinstance(redis_client, RedisCluster):  # a cluster: a call per queue
        assert calls == -(-600 // PEEK_CHUNK)


async def peek_calls(client: RedisClient) -> int:
    """Script calls the server has run (as functions or scripts) since it started."""
    return _fcalls(await client.info("commandstats"))


def _fcalls(stats: dict[str, Any]) -> int:
    return sum(
        int(stats[name]["calls"]) for name in ("cmdstat_fcall", "cmdstat_evalsha") if name in stats
    )
