"""enqueue_many and partitioned types, through the public API on a real server."""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable

import anyio
import pytest
import redis.asyncio as redis

from aioqueue import EventServiceBuilder, InvalidEnqueueError
from aioqueue._wire.keys import QueueLayout
from tests.support.common import (
    DispatchSizes,
    OrderTimeout,
    PaymentCheck,
    Recorder,
    queue_key,
    wait_until,
)
from tests.support.script_calls import ScriptCall

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]


async def test_enqueue_many_schedules_each_event_once_and_reports_kept_ones(
    service_builder: Builder,
) -> None:
    """Results line up with the input; ids already pending come back False and are kept."""
    handler = Recorder()
    async with service_builder().build() as service:
        assert await service.enqueue(PaymentCheck(id="p-3", order_id=-1), 0.2)
        events = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(1200)]
        results = await service.enqueue_many(events, 0.2, context={"batch": "b-1"})
        assert results == [n != 3 for n in range(1200)]
        service.add_handler(PaymentCheck, handler, parallelism=50)
        deliveries = await handler.wait_for(1200)
    assert Counter(handler.ids) == Counter(f"p-{n}" for n in range(1200))
    kept = next(d for d in deliveries if d.event.id == "p-3")
    assert kept.event == PaymentCheck(id="p-3", order_id=-1)
    assert kept.context == {}
    assert all(d.context == {"batch": "b-1"} for d in deliveries if d.event.id != "p-3")


async def test_enqueue_many_validates_everything_before_writing(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """One bad event in a batch rejects the batch and writes nothing at all."""
    async with service_builder().build() as service:
        with pytest.raises(InvalidEnqueueError, match="id must be a non-empty string"):
            await service.enqueue_many(
                [PaymentCheck(id="p-1", order_id=1), PaymentCheck(id="", order_id=2)], 1
            )
    assert await redis_client.exists("aioqueue:{PaymentCheck}:events") == 0


async def test_enqueue_many_mixes_event_types(service_builder: Builder) -> None:
    """Each event lands in its own type's queue."""
    payments, timeouts = Recorder(), Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, payments)
        service.add_handler(OrderTimeout, timeouts)
        await service.enqueue_many(
            [PaymentCheck(id="x", order_id=1), OrderTimeout(id="x"), PaymentCheck("y", 2)], 0
        )
        await payments.wait_for(2)
        await timeouts.wait_for(1)
    assert sorted(payments.ids) == ["x", "y"]
    assert timeouts.ids == ["x"]


async def test_a_partitioned_type_spreads_over_its_partitions_and_delivers_once(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """Ids go to crc32(id) % n; every partition is consumed; dedupe and cancel by id work."""
    layout = QueueLayout("aioqueue", "PaymentCheck", 4)
    handler = Recorder()
    builder = service_builder().partitions(PaymentCheck, 4)
    async with builder.build() as service:
        events = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(200)]
        assert all(await service.enqueue_many(events, 0.3))
        assert await service.enqueue(PaymentCheck(id="p-7", order_id=0), 0) is False
        assert await service.cancel(PaymentCheck, "p-9") is True
        for n in (0, 1, 2, 3):
            keys = layout.all_keys[n]
            expected = sum(
                1 for m in range(200) if m != 9 and zlib.crc32(f"p-{m}".encode()) % 4 == n
            )
            assert await redis_client.hlen(keys.events) == expected
            assert expected > 0
        service.add_handler(PaymentCheck, handler, parallelism=8)
        await handler.wait_for(199)
    assert Counter(handler.ids) == Counter(f"p-{n}" for n in range(200) if n != 9)
    assert await redis_client.hget("aioqueue:types", "PaymentCheck") == b"4"


async def test_the_largest_batches_go_through_the_scripts_in_chunks(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """A dispatch of the largest batch size and claims for thousands of free slots: the
    scripts batch their commands, and Lua unpacks only about 8000 arguments at a time."""
    handler = Recorder()
    metrics = DispatchSizes()
    builder = service_builder().scheduling_batch_size(10_000).metrics(metrics)
    async with builder.build() as service:
        events = [PaymentCheck(id=f"p-{n}", order_id=n) for n in range(10_000)]
        assert all(await service.enqueue_many(events, 0))
        service.add_handler(PaymentCheck, handler, parallelism=5_000)
        await handler.wait_for(10_000, within=30)

        async def drained() -> bool:
            return await redis_client.hlen(queue_key("PaymentCheck", "events")) == 0

        await wait_until(drained)
    assert Counter(handler.ids) == Counter(f"p-{n}" for n in range(10_000))
    assert max(metrics.sizes) == 10_000  # one dispatch call moved them all


async def test_concurrent_enqueues_of_a_partitioned_type_share_one_call_per_partition(
    service_builder: Builder, script_calls: list[ScriptCall]
) -> None:
    """32 enqueues in flight at once, spread over 8 partitions: they go out together, one
    script call per partition (pipelined per node), not one call per partition and caller."""
    async with service_builder().partitions(OrderTimeout, 8).build() as service:
        await service.enqueue(OrderTimeout(id="first"), 60)  # records the type
        script_calls.clear()
        async with anyio.create_task_group() as callers:
            for n in range(32):
                callers.start_soon(service.enqueue, OrderTimeout(id=f"o-{n}"), 60)
    enqueues = [call for call in script_calls if call.script == "enqueue"]
    partitions = {zlib.crc32(f"o-{n}".encode()) % 8 for n in range(32)}
    assert len(enqueues) == len(partitions)
    assert sum((len(call.args) - 2) // 5 for call in enqueues) == 32
