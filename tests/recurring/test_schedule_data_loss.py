"""Recurring schedules on a server that loses its data under running services (FLUSHALL, a
restart without persistence, a failover to an empty replica; on a cluster perhaps only the
node of the name directory): the keepers declare their schedules again and the ticks go on,
while a removal or a move, which leaves its marks, still stops them (records.after_gone)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

import pytest

from aioqueue import EventService, EventServiceBuilder
from aioqueue._recurring.names import directory_key, read_entry
from aioqueue._recurring.records import (
    ScheduleRecord,
    Tombstone,
    after_gone,
    declare,
    read_stored,
    remove_by_name,
)
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys
from tests.support.common import EVERY_TOPOLOGY, Recorder, flush_everything
from tests.support.workers.schedule_worker import Beat, beat

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
KEYS = QueueKeys.for_type("aioqueue", "Beat")
EVERY_200_MS = ScheduleSpec.of(cron=None, every=0.2, tz="UTC").key


def tick_of(event_id: str) -> int:
    return int(event_id.removeprefix("beat-"))


def beating_service(service_builder: Builder, handled: Recorder) -> EventService:
    """A service that keeps the "beat" schedule (every 0.2 s) and handles its ticks."""
    service = service_builder().build()
    service.add_schedule("beat", every=0.2, event=beat)
    service.add_handler(Beat, handled, parallelism=2)
    return service


@EVERY_TOPOLOGY
async def test_a_schedule_keeps_ticking_after_the_server_lost_its_data(
    service_builder: Builder, redis_client: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aioqueue")
    handled = Recorder()
    service = beating_service(service_builder, handled)
    async with service:
        await handled.wait_for(2)
        await flush_everything(redis_client)
        lost_at = len(handled.deliveries)
        await handled.wait_for(lost_at + 3)
        assert [info.name for info in await service.schedules()] == ["beat"]
    ticks = [tick_of(event_id) for event_id in handled.ids]
    assert Counter(ticks).most_common(1)[0][1] == 1  # no tick twice
    assert all(tick % 200 == 0 for tick in ticks)
    assert any("declares it again" in record.getMessage() for record in caplog.records)


async def test_a_lost_directory_under_records_of_later_tokens_keeps_the_schedule(
    service_builder: Builder, redis_client: RedisClient
) -> None:
    """On a cluster the directory's node may lose its data alone: the directory then hands
    out tokens from 1 again while the record holds a larger one. The claim takes the
    record's token as its floor, so the declaration is not refused as an old one."""
    # Declared, removed and declared again: the record holds token 3.
    await declare(redis_client, "aioqueue", "Beat", "beat", EVERY_200_MS)
    await remove_by_name(redis_client, "aioqueue", "beat")
    await declare(redis_client, "aioqueue", "Beat", "beat", EVERY_200_MS)
    stored = await read_stored(redis_client, KEYS, "beat")
    assert isinstance(stored, ScheduleRecord)
    assert stored.token == 3

    handled = Recorder()
    service = beating_service(service_builder, handled)
    async with service:
        await handled.wait_for(1)
        await redis_client.delete(directory_key("aioqueue"))
        lost_at = len(handled.deliveries)
        await handled.wait_for(lost_at + 3)
        entry = await read_entry(redis_client, "aioqueue", "beat")
        assert entry is not None
        assert (entry.event_type, entry.token) == ("Beat", 3)


async def test_what_a_keeper_does_without_a_live_record(redis_client: RedisClient) -> None:
    async def again(event_type: str = "Beat") -> bool:
        stored = await read_stored(redis_client, QueueKeys.for_type("aioqueue", event_type), "b")
        assert not isinstance(stored, ScheduleRecord)
        decision, _ = await after_gone(redis_client, "aioqueue", event_type, "b", stored)
        return decision

    # Nothing at all, no directory entry either: everything was lost.
    assert await again()
    # The directory gives the name to this type, its record is gone: the record was lost.
    await declare(redis_client, "aioqueue", "Beat", "b", EVERY_200_MS)
    await redis_client.delete(KEYS.schedules)
    assert await again()
    # Removed: a tombstone and a directory entry without a type; either one alone still
    # says so (the other lost).
    await declare(redis_client, "aioqueue", "Beat", "b", EVERY_200_MS)
    assert await remove_by_name(redis_client, "aioqueue", "b")
    assert isinstance(await read_stored(redis_client, KEYS, "b"), Tombstone)
    assert not await again()
    await redis_client.delete(directory_key("aioqueue"))
    assert not await again()
    await declare(redis_client, "aioqueue", "Beat", "b", EVERY_200_MS)
    assert await remove_by_name(redis_client, "aioqueue", "b")
    await redis_client.delete(KEYS.schedules)
    assert not await again()
    # Moved to another type: not for the type it left, lost record or not.
    await declare(redis_client, "aioqueue", "Beat", "b", EVERY_200_MS)
    await declare(redis_client, "aioqueue", "Other", "b", EVERY_200_MS)
    assert not await again()
    await redis_client.delete(KEYS.schedules)
    assert not await again()
