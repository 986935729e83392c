"""One owner of a type's partition count: the registry entry, read through one resolver by the
service, the HTTP API and Spark. A count that contradicts it is refused, never re-recorded."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
import redis.asyncio as redis

from aioqueue import EventServiceBuilder, PartitionCountMismatchError, ServiceFailedError
from aioqueue._wire.registry import read_registry, registry_key, resolve_layout
from tests.support.common import PaymentCheck, Recorder, wait_until

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
REGISTRY = registry_key("aioqueue")


async def test_a_service_with_another_count_is_refused_and_the_entry_is_kept(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    """A service built with the default count (1) used to re-record a 4-partition type as 1
    and read keys nobody writes; now its enqueue raises and the registry still says 4."""
    async with service_builder().partitions(PaymentCheck, 4).build() as service:
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 60)
    assert await redis_client.hget(REGISTRY, "PaymentCheck") == b"4"

    async with service_builder().build() as service:
        with pytest.raises(PartitionCountMismatchError, match="has 4 partition"):
            await service.enqueue(PaymentCheck(id="p-2", order_id=2), 60)
    assert await redis_client.hget(REGISTRY, "PaymentCheck") == b"4"

    # The service that agrees with the registry goes on as before.
    handler = Recorder()
    async with service_builder().partitions(PaymentCheck, 4).build() as service:
        service.add_handler(PaymentCheck, handler)
        assert await service.run_due(3600) == 1
    assert handler.ids == ["p-1"]


async def test_a_consumer_with_another_count_stops_and_fails_the_service(
    service_builder: Builder, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A consumer-only service never enqueues, so the check runs beside its consumer: on a
    mismatch the consumer stops taking and the service fails with the resolver's error."""
    caplog.set_level(logging.CRITICAL, logger="aioqueue")
    await redis_client.hset(REGISTRY, "PaymentCheck", "4")
    with pytest.raises(ServiceFailedError) as failed:  # noqa: PT012 -- the whole block's exit
        async with service_builder().build() as service:
            service.add_handler(PaymentCheck, Recorder())

            async def died() -> bool:
                return any("died" in record.getMessage() for record in caplog.records)

            await wait_until(died)
    assert isinstance(failed.value.__cause__, PartitionCountMismatchError)
    assert await redis_client.hget(REGISTRY, "PaymentCheck") == b"4"


@pytest.mark.parametrize("entry", [b"abc", b"0", b"99999", b"-2", b"1.5"])
async def test_an_entry_that_is_no_count_is_refused_by_writers_and_reported_to_readers(
    redis_client: redis.Redis, entry: bytes
) -> None:
    await redis_client.hset(REGISTRY, mapping={"Bad": entry, "Good": b"2"})
    for partitions in (None, 1):
        with pytest.raises(PartitionCountMismatchError, match="no partition count"):
            await resolve_layout(redis_client, "aioqueue", "Bad", partitions)
    # A reader of the whole registry gets the good entries and a problem naming the bad one.
    registry = await read_registry(redis_client, "aioqueue")
    assert {layout.event_type: layout.partitions for layout in registry.layouts} == {"Good": 2}
    [problem] = registry.problems
    assert "Bad" in problem
    assert await redis_client.hget(REGISTRY, "Bad") == entry  # reported, never overwritten


async def test_a_reader_never_records_and_a_writer_records_once(
    redis_client: redis.Redis,
) -> None:
    layout = await resolve_layout(redis_client, "aioqueue", "Fresh", None, record=False)
    assert layout.partitions == 1
    assert not await redis_client.hexists(REGISTRY, "Fresh")
    layout = await resolve_layout(redis_client, "aioqueue", "Fresh", 3)
    assert layout.partitions == 3
    assert await redis_client.hget(REGISTRY, "Fresh") == b"3"
    # Without a count of its own (the HTTP API) a caller takes the recorded one.
    assert (await resolve_layout(redis_client, "aioqueue", "Fresh", None)).partitions == 3
