"""Which missed ticks a keeper produces (aioqueue._recurring.misfire): the latest ones, found
by walking back from now, at most max_catch_up, however long the downtime. Pure computation
on fixed times; the same on a real server is in tests/recurring/test_schedules.py."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from aioqueue._recurring.misfire import ticks_to_produce
from aioqueue._recurring.spec import ScheduleSpec

SECOND_MS = 1000
DAY_MS = 86_400_000
NOW = round(datetime(2026, 5, 4, 12, 0, 0, 400_000, tzinfo=timezone.utc).timestamp() * 1000)


def every_second() -> ScheduleSpec:
    return ScheduleSpec.of(cron=None, every=1, tz="UTC")


@pytest.fixture
def forward_walks_are_short(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fails a test that walks forward through more than two ticks of a schedule."""
    walk_forward = ScheduleSpec.ticks_after

    def at_most_two(spec: ScheduleSpec, after_ms: int) -> Iterator[int]:
        yield from itertools.islice(walk_forward(spec, after_ms), 2)
        raise AssertionError("walked forward through the missed ticks")

    monkeypatch.setattr(ScheduleSpec, "ticks_after", at_most_two)


@pytest.mark.usefixtures("forward_walks_are_short")
def test_fourteen_days_down_every_second_gives_the_latest_max_catch_up_ticks() -> None:
    """The issue's case: 1.2 million missed ticks. Before, the keeper counted forward from the
    last tick, stopped after a million and produced the last 100 of those: 2.4 days old."""
    spec = every_second()
    latest = NOW // SECOND_MS * SECOND_MS
    last = latest - 14 * DAY_MS
    plan = ticks_to_produce(spec, last, NOW, "all", 100)
    assert plan.ticks == [latest - n * SECOND_MS for n in range(99, -1, -1)]
    assert plan.dropped_missed
    once = ticks_to_produce(spec, last, NOW, "once", 100)
    assert (once.ticks, once.dropped_missed) == ([latest], False)
    skip = ticks_to_produce(spec, last, NOW, "skip", 100)
    assert skip.ticks == [latest + SECOND_MS]


def test_a_catch_up_within_max_catch_up_gives_every_missed_tick() -> None:
    spec = every_second()
    latest = NOW // SECOND_MS * SECOND_MS
    plan = ticks_to_produce(spec, latest - 5 * SECOND_MS, NOW, "all", 5)
    assert plan.ticks == [latest - n * SECOND_MS for n in range(4, -1, -1)]
    assert not plan.dropped_missed  # exactly max_catch_up missed: nothing left out
    plan = ticks_to_produce(spec, latest - 6 * SECOND_MS, NOW, "all", 5)
    assert plan.dropped_missed
    # Nothing missed: the next tick, whatever the policy; none yet: the first after now.
    for misfire in ("skip", "once", "all"):
        assert ticks_to_produce(spec, latest, NOW, misfire, 5).ticks == [latest + SECOND_MS]
        assert ticks_to_produce(spec, None, NOW, misfire, 5).ticks == [latest + SECOND_MS]


@pytest.mark.usefixtures("forward_walks_are_short")
def test_cron_catch_up_walks_back_from_now() -> None:
    """Every minute, thirty days down (43,200 missed ticks): the latest 100 minutes."""
    spec = ScheduleSpec.of(cron="* * * * *", every=None, tz="UTC")
    latest = NOW // 60_000 * 60_000
    plan = ticks_to_produce(spec, latest - 30 * DAY_MS, NOW, "all", 100)
    assert plan.ticks == [latest - n * 60_000 for n in range(99, -1, -1)]
    assert plan.dropped_missed
    assert ticks_to_produce(spec, latest - 30 * DAY_MS, NOW, "once", 100).ticks == [latest]


def test_cron_catch_up_across_dst_changes_gives_the_ticks_cron_runs() -> None:
    """Walking back gives the ticks walking forward gives, on both change days of
    Europe/Paris: 02:30 daily runs at 03:00 on the day 02:30 does not exist, once on the day
    it exists twice; half-hourly runs in both repeated hours."""
    zone = "Europe/Paris"

    def forward(spec: ScheduleSpec, last: int, until: int) -> list[int]:
        ticks: list[int] = []
        for tick in spec.ticks_after(last):
            if tick > until:
                return ticks
            ticks.append(tick)
        raise AssertionError("unreachable")

    for cron, last_day, now_day in (
        ("30 2 * * *", datetime(2026, 3, 26), datetime(2026, 4, 1)),
        ("30 2 * * *", datetime(2026, 10, 22), datetime(2026, 10, 28)),
        ("*/30 * * * *", datetime(2026, 10, 24, 22), datetime(2026, 10, 25, 6)),
        ("*/30 * * * *", datetime(2026, 3, 28, 22), datetime(2026, 3, 29, 6)),
    ):
        spec = ScheduleSpec.of(cron=cron, every=None, tz=zone)
        last = round(last_day.replace(tzinfo=timezone.utc).timestamp() * 1000)
        now = round(now_day.replace(tzinfo=timezone.utc).timestamp() * 1000)
        missed = forward(spec, last, now)
        plan = ticks_to_produce(spec, last, now, "all", 10_000)
        assert plan.ticks == missed, cron
        assert not plan.dropped_missed
        assert ticks_to_produce(spec, last, now, "all", 3).ticks == missed[-3:]
    spring = ScheduleSpec.of(cron="30 2 * * *", every=None, tz=zone)
    day = datetime(2026, 3, 29, 12, tzinfo=timezone.utc)
    [tick] = ticks_to_produce(
        spring, round((day - timedelta(days=2)).timestamp() * 1000),
        round(day.timestamp() * 1000), "once", 100,
    ).ticks  # fmt: skip
    assert spring.tick_time(tick).isoformat() == "2026-03-29T03:00:00+02:00"
