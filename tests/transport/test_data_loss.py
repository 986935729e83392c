"""A server that loses its data under running services (FLUSHALL, or a restart without
persistence, which also cuts every connection): the services record their types' settings
again (registry entry, schema, serial field, rate limit) before they dispatch the types'
events again, so events written after the loss keep their serial keys and rate limits (see
settings_marks.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis.asyncio as redis
from redis.asyncio.cluster import RedisCluster

from aioqueue import EventService, EventServiceBuilder, FixedDelays
from aioqueue._model.rate_limit import RateLimit
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import enqueue_items
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.rate_limits import read_rate_limit, set_rate_limit
from aioqueue._wire.registry import read_registry
from aioqueue._wire.schemas import read_schema
from aioqueue._wire.settings_marks import mark_recorded
from aioqueue._wire.store import DispatchResult, QueueStore
from tests.conftest import ServerFactory
from tests.support.common import (
    EVERY_TOPOLOGY,
    KeyWatch,
    OrderStep,
    PaymentCheck,
    Recorder,
    flush_everything,
    key_on,
    restart_empty,
)

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
ORDER_STEP = QueueLayout("aioqueue", "OrderStep")
PAYMENT_CHECK = QueueLayout("aioqueue", "PaymentCheck")
HOURLY_LIMIT = RateLimit(limit=2, per_ms=3_600_000)


async def lose_all_data(client: RedisClient) -> None:
    """FLUSHALL everywhere, proved by a marker on every master that is gone after it.

    Markers rather than an empty SCAN: the running service may already have recorded its
    types again between the flush and the check, which is what the tests are about."""
    if isinstance(client, RedisCluster):
        markers = [key_on(client, node, "lost-marker") for node in client.get_primaries()]
    else:
        markers = ["lost-marker"]
    for marker in markers:
        await client.set(marker, b"1")
    await flush_everything(client)
    assert [marker for marker in markers if await client.exists(marker)] == []


@EVERY_TOPOLOGY
async def test_a_running_service_records_its_types_again_and_keeps_serial_keys_and_limits(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    steps, checks = KeyWatch(seconds=0.02), Recorder()
    service = service_builder().rate_limit(PaymentCheck, 2, per=3600).build()
    service.add_handler(OrderStep, steps, parallelism=4)
    service.add_handler(PaymentCheck, checks, parallelism=4)
    async with service:
        await service.enqueue(OrderStep(id="before", order_id=1), delay=0)
        await steps.recorder.wait_for(1)

        await lose_all_data(redis_client)
        # Written after the loss by the same, long-lived producer: four steps of one order,
        # all due at once, for a handler that could run four at a time; five checks against
        # a limit of two an hour.
        for n in range(4):
            await service.enqueue(OrderStep(id=f"after-{n}", order_id=7), delay=0)
        for n in range(5):
            await service.enqueue(PaymentCheck(id=f"check-{n}", order_id=n), delay=0)

        await steps.recorder.wait_for(5)
        await checks.wait_for(2)
        assert steps.overlaps == 0
        assert await redis_client.get(ORDER_STEP.all_keys[0].serial_field) == b"order_id"
        assert await read_rate_limit(redis_client, PAYMENT_CHECK) == HOURLY_LIMIT
        registry = await read_registry(redis_client, "aioqueue")
        assert [layout.event_type for layout in registry.layouts] == ["OrderStep", "PaymentCheck"]
        assert await read_schema(redis_client, "aioqueue", "OrderStep") is not None
        # The other three checks wait for the next hour's window, in the schedule.
        assert await redis_client.zcard(PAYMENT_CHECK.all_keys[0].schedule) == 3
    assert len(checks.deliveries) == 2


@pytest.mark.backends("standalone")
async def test_a_restart_without_persistence_keeps_serial_keys_of_later_events(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()  # no AOF, no snapshots: a restart comes back empty
    steps = KeyWatch(seconds=0.02)
    service = (
        EventService.builder()
        .url(server.url)
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )
    service.add_handler(OrderStep, steps, parallelism=4)
    async with service:
        await service.enqueue(OrderStep(id="before", order_id=1), delay=0)
        await steps.recorder.wait_for(1)

        await restart_empty(server)
        for n in range(4):
            await service.enqueue(OrderStep(id=f"after-{n}", order_id=7), delay=0)

        await steps.recorder.wait_for(5)
        assert steps.overlaps == 0
        async with redis.Redis.from_url(server.url) as observer:
            assert await observer.get(ORDER_STEP.all_keys[0].serial_field) == b"order_id"
            assert await observer.get(ORDER_STEP.all_keys[0].recorded) == b"1"


async def test_a_limit_an_operator_cleared_stays_cleared(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    checks = Recorder()
    service = service_builder().rate_limit(PaymentCheck, 2, per=3600).build()
    service.add_handler(PaymentCheck, checks, parallelism=4)
    async with service:
        await service.enqueue(PaymentCheck(id="first", order_id=0), delay=0)
        await checks.wait_for(1)
        await set_rate_limit(redis_client, PAYMENT_CHECK, None)  # `aioqueue rate-limit --clear`
        for n in range(4):
            await service.enqueue(PaymentCheck(id=f"check-{n}", order_id=n), delay=0)
        await checks.wait_for(5)  # past the cleared limit of two an hour
        assert await read_rate_limit(redis_client, PAYMENT_CHECK) is None


async def test_a_dispatch_takes_nothing_while_the_type_is_unrecorded(
    redis_client: RedisClient,
) -> None:
    keys = PAYMENT_CHECK.all_keys[0]
    store = QueueStore(redis_client, keys, "PaymentCheck")
    await enqueue_items(
        redis_client,
        keys,
        "PaymentCheck",
        [EnqueueItem("due", '{"order_id":1}', "{}", 0, absolute=False)],
        mode=WriteMode(),
    )

    async def dispatch() -> DispatchResult:
        return await store.dispatch(
            batch_size=10, lease_ms=60_000, max_attempts=3, ready_capacity=100,
            check_recorded=True,
        )  # fmt: skip

    unrecorded = await dispatch()
    assert unrecorded.unrecorded
    assert unrecorded.dispatched == 0
    assert await redis_client.zrange(keys.schedule, 0, -1) == [b"due"]

    await mark_recorded(redis_client, PAYMENT_CHECK)
    recorded = await dispatch()
    assert not recorded.unrecorded
    assert recorded.dispatched == 1
    assert await redis_client.llen(keys.ready) == 1
