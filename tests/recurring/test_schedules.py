"""Recurring schedules on a real server: one event per tick across services, misfires, spec
changes, DST, and a keeper killed mid-run."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import orjson
import pytest
import redis.asyncio as redis

from aioqueue import ConfigurationError, EventServiceBuilder
from aioqueue._recurring.records import ScheduleInfo, read_record
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueKeys
from tests.support.common import EVERY_TOPOLOGY, Recorder, server_time_ms, wait_until
from tests.support.ops import ROOT
from tests.support.workers.schedule_worker import Beat, beat

pytestmark = pytest.mark.backends("standalone", "cluster")

Builder = Callable[[], EventServiceBuilder]
RECORDS = "aioqueue:{Beat}:schedules"
KEYS = QueueKeys.for_type("aioqueue", "Beat")
HOUR_MS = 3_600_000


def tick_of(event_id: str) -> int:
    return int(event_id.removeprefix("beat-"))


@EVERY_TOPOLOGY
async def test_three_services_produce_exactly_one_event_per_tick(service_builder: Builder) -> None:
    handled = Recorder()
    services = [service_builder().build() for _ in range(3)]
    for service in services:
        service.add_schedule("beat", every=0.2, event=beat)
    services[0].add_handler(Beat, handled, parallelism=4)
    async with services[0], services[1], services[2]:
        await handled.wait_for(10)
    ticks = sorted(tick_of(event_id) for event_id in handled.ids)
    assert Counter(ticks).most_common(1)[0][1] == 1  # no tick twice
    assert [later - earlier for earlier, later in itertools.pairwise(ticks)] == [200] * (
        len(ticks) - 1
    )  # and none skipped


async def test_schedules_lists_what_redis_holds(service_builder: Builder) -> None:
    async with service_builder().build() as service:
        service.add_schedule("nightly", cron="0 3 * * *", tz="Europe/Paris", event=beat)

        # The keeper declares the schedule's record, then writes its next tick: two calls.
        async def listed_with_its_tick() -> bool:
            names = [info.name for info in await service.schedules()]
            return names == ["nightly"] and bool((await service.pending(Beat)).events)

        await wait_until(listed_with_its_tick)
        [info] = await service.schedules()
        assert (info.event_type, info.spec, info.tz) == ("Beat", "0 3 * * *", "Europe/Paris")
        assert info.next_tick is not None
        assert (info.next_tick.hour, info.next_tick.minute) == (3, 0)
        assert info.next_tick.utcoffset() in (timedelta(hours=1), timedelta(hours=2))
        assert info.last_tick is None
        pending = await service.pending(Beat)
        assert [e.id for e in pending.events] == [
            f"beat-{round(info.next_tick.timestamp() * 1000)}"
        ]
        assert await service.remove_schedule("nightly")
        assert await service.schedules() == []
        assert (await service.pending(Beat)).events == []  # its next tick is gone too
        assert not await service.remove_schedule("nightly")


@pytest.mark.parametrize(
    ("misfire", "max_catch_up", "expected_hours_ago"),
    [("skip", 100, []), ("once", 100, [0]), ("all", 100, [4, 3, 2, 1, 0]), ("all", 2, [1, 0])],
)
async def test_missed_ticks_follow_the_misfire_policy(
    service_builder: Builder,
    redis_client: redis.Redis,
    misfire: str,
    max_catch_up: int,
    expected_hours_ago: list[int],
) -> None:
    """Services were down for five hourly ticks (the record says its last tick was 5 hours
    before the latest one): on return, the policy decides which missed ticks run now."""
    spec = ScheduleSpec.of(cron=None, every=timedelta(hours=1), tz="UTC")
    latest = spec.latest_at_or_before(round(datetime.now(timezone.utc).timestamp() * 1000))
    assert latest is not None
    record = {"spec": spec.key, "tick": latest - 5 * HOUR_MS, "tick_id": "old", "produced_at": 0}
    await redis_client.hset(RECORDS, "hourly", orjson.dumps(record))
    handled = Recorder()
    service = service_builder().build()
    service.add_schedule("hourly", every=timedelta(hours=1), event=beat, misfire=misfire,  # type: ignore[arg-type]
                         max_catch_up=max_catch_up)  # fmt: skip
    service.add_handler(Beat, handled)
    async with service:

        async def next_tick_pending() -> bool:
            page = await service.pending(Beat)
            return [e.id for e in page.events] == [f"beat-{latest + HOUR_MS}"]

        await wait_until(next_tick_pending)
        await handled.wait_for(len(expected_hours_ago))
        await service.run_due()  # nothing more is due: every catch-up tick is handled
    assert sorted(tick_of(i) for i in handled.ids) == [
        latest - hours * HOUR_MS for hours in expected_hours_ago
    ]


async def test_fourteen_days_down_produce_the_latest_max_catch_up_ticks_and_warn_once(
    service_builder: Builder, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A schedule every second whose services were down for 14 days (1.2 million missed
    ticks), misfire="all": the catch-up writes the latest 100 ticks before its time, the
    ticks then go on one a second, and the warning is logged once. Nothing is dispatched, so
    every produced tick is still in Redis to count."""
    caplog.set_level(logging.WARNING, logger="aioqueue")
    started = await server_time_ms(redis_client)
    spec = ScheduleSpec.of(cron=None, every=1, tz="UTC")
    down_since = started // 1000 * 1000 - 14 * 24 * HOUR_MS
    record = {"spec": spec.key, "tick": down_since, "tick_id": "old", "produced_at": 0}
    await redis_client.hset(RECORDS, "rep", orjson.dumps(record))
    service = service_builder().enable_scheduling(False).build()
    service.add_schedule("rep", every=1, event=beat, misfire="all", max_catch_up=100)
    async with service:

        async def caught_up() -> bool:
            record = await read_record(redis_client, KEYS, "rep")
            return record is not None and record.tick is not None and record.tick > record.now

        await wait_until(caught_up)
    stopped = await server_time_ms(redis_client)
    ticks = sorted(tick_of(text(i)) for i in await redis_client.hkeys(KEYS.events))
    assert [b - a for a, b in itertools.pairwise(ticks)] == [1000] * (len(ticks) - 1)
    # The catch-up's 100 ticks end at the latest tick of its moment, between start and stop.
    assert started // 1000 * 1000 - 99_000 <= ticks[0] <= stopped // 1000 * 1000 - 99_000
    assert sum(1 for tick in ticks if tick <= started) <= 100
    warnings = [r.getMessage() for r in caplog.records if "max_catch_up" in r.getMessage()]
    assert len(warnings) == 1, warnings


async def test_a_changed_spec_replaces_the_pending_tick_and_the_latest_declaration_wins(
    service_builder: Builder, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aioqueue")
    # Minute 7 and minute 37 of every hour: the two specs never share a tick, whatever the
    # time of the run (every 1 h and every 2 h share one every other hour).
    old = service_builder().build()
    old.add_schedule("report", cron="7 * * * *", event=beat)
    async with old:

        async def one_pending() -> bool:
            return len((await old.pending(Beat)).events) == 1

        await wait_until(one_pending)
        [old_tick] = (await old.pending(Beat)).events
        new = service_builder().build()
        new.add_schedule("report", cron="37 * * * *", event=beat)
        async with new:

            async def replaced() -> bool:
                ids = [e.id for e in (await new.pending(Beat)).events]
                return len(ids) == 1 and ids != [old_tick.id]

            await wait_until(replaced)
            [new_tick] = (await new.pending(Beat)).events
            assert tick_of(new_tick.id) % HOUR_MS == 37 * 60_000
            [info] = await new.schedules()
            assert info.spec == "37 * * * *"
    warnings = [r.getMessage() for r in caplog.records]
    assert any("changed from 'cron 7 * * * * UTC' to 'cron 37 * * * * UTC'" in w for w in warnings)
    [info] = await _schedules_after(service_builder)
    assert info.spec == "37 * * * *"  # the old service did not flip it back


async def _schedules_after(service_builder: Builder) -> list[ScheduleInfo]:
    async with service_builder().build() as service:
        return await service.schedules()


def test_cron_in_a_zone_with_dst_fires_once_on_both_change_days() -> None:
    """Europe/Paris: 2026-03-29 has no 02:30 (clocks jump 02:00 -> 03:00) and 2026-10-25 has
    two (03:00 -> 02:00). A daily 02:30 job runs once each day: at 03:00 on the spring day,
    at the first 02:30 on the autumn day. (Pure computation: the due times a keeper writes.)"""
    spec = ScheduleSpec.of(cron="30 2 * * *", every=None, tz="Europe/Paris")

    def three_ticks_from(day: datetime) -> list[str]:
        ticks = spec.ticks_after(round(day.timestamp() * 1000))
        return [spec.tick_time(next(ticks)).isoformat() for _ in range(3)]

    assert three_ticks_from(datetime(2026, 3, 28, 12, tzinfo=timezone.utc)) == [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00",
    ]  # fmt: skip
    assert three_ticks_from(datetime(2026, 10, 24, 12, tzinfo=timezone.utc)) == [
        "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00",
    ]  # fmt: skip
    for bad in ({"cron": "61 * * * *"}, {"every": 0.001}, {"cron": "* * * * *", "every": 1}):
        with pytest.raises(ConfigurationError):
            ScheduleSpec.of(cron=bad.get("cron"), every=bad.get("every"), tz="UTC")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="unknown time zone"):
        ScheduleSpec.of(cron="* * * * *", every=None, tz="Mars/Olympus")


@pytest.mark.backends("standalone")
async def test_a_keeper_killed_mid_run_loses_and_doubles_no_tick(
    service_builder: Builder, redis_url: str
) -> None:
    worker = subprocess.Popen(  # noqa: ASYNC220 -- started once, read line by line below
        [sys.executable, "-m", "tests.support.workers.schedule_worker", redis_url],
        cwd=ROOT, env=os.environ.copy(), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    handled = Recorder()
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "keeping"
        consumer = service_builder().build()
        consumer.add_handler(Beat, handled, parallelism=4)
        async with consumer:
            await handled.wait_for(4)  # ticks produced by the worker alone
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            killed_at = len(handled.ids)
            keeper = service_builder().build()
            keeper.add_schedule("beat", every=0.2, event=beat, misfire="all")
            async with keeper:
                await handled.wait_for(killed_at + 6)
    finally:
        worker.kill()
        worker.wait(10)
        if worker.stdout is not None:
            worker.stdout.close()
    ticks = sorted(tick_of(event_id) for event_id in handled.ids)
    assert Counter(ticks).most_common(1)[0][1] == 1
    assert [later - earlier for earlier, later in itertools.pairwise(ticks)] == [200] * (
        len(ticks) - 1
    )
