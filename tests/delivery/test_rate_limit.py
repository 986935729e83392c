"""Rate limits on a real server, standalone and cluster: summed over every service of the
prefix, no window of `per` holds more than `limit` handler starts, and everything is still
delivered; the limit recorded in Redis holds for a service configured otherwise."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

import pytest

from aioqueue import ConfigurationError, EventService, EventServiceBuilder, NoMetrics, Outcome
from aioqueue._model.rate_limit import RateLimit
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.rate_limits import read_rate_limit
from tests.support.common import EVERY_TOPOLOGY, PaymentCheck, Recorder, wait_until
from tests.support.ops import declare, run_cli

Builder = Callable[[], EventServiceBuilder]
LAYOUT = QueueLayout("aioqueue", "PaymentCheck")
LIMIT = 50
EVENTS = 300  # the size: six windows of the limit
WINDOW_MS = 1000


class ClaimTimes(NoMetrics):
    """Each handled event's lateness: the server's time of its claim (what the limit counts,
    in ms, the clock claim.lua notes hand-outs with) minus its due time."""

    def __init__(self) -> None:
        self.lateness_ms: list[int] = []

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        self.lateness_ms.append(round(lateness * 1000))


def most_in_a_window(times_ms: list[int], window_ms: int) -> int:
    """The most times within less than `window_ms` of each other: the hand-outs the limit
    sees in one window (rate_room counts those after now - per_ms)."""
    times_ms = sorted(times_ms)
    most, first = 0, 0
    for last, time_ms in enumerate(times_ms):
        while time_ms - times_ms[first] >= window_ms:
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.backends("standalone", "cluster")
async def test_two_services_never_start_more_than_the_limit_in_any_window(
    service_builder: Builder,
) -> None:
    """Measured on the server's clock, not by when handlers happened to run: every event is
    due at the same moment (one enqueue_many call), so its lateness is its claim's time."""
    recorder = Recorder()
    claims = ClaimTimes()

    def limited() -> EventServiceBuilder:
        return (
            service_builder()
            .rate_limit(PaymentCheck, LIMIT, per=timedelta(milliseconds=WINDOW_MS))
            .metrics(claims)
        )

    async with limited().build() as one, limited().build() as other:
        one.add_handler(PaymentCheck, recorder, parallelism=16)
        other.add_handler(PaymentCheck, recorder, parallelism=16)
        await one.enqueue_many([PaymentCheck(id=f"p-{n}", order_id=n) for n in range(EVENTS)], 0)
        await recorder.wait_for(EVENTS, within=EVENTS / LIMIT + 10)
    assert sorted(recorder.ids) == sorted(f"p-{n}" for n in range(EVENTS))
    assert len(claims.lateness_ms) == EVENTS  # every success reported once the services closed
    assert most_in_a_window(claims.lateness_ms, WINDOW_MS) <= LIMIT
    # The limit was the bottleneck: the first and last claim are at least 5 windows apart.
    assert max(claims.lateness_ms) - min(claims.lateness_ms) >= (EVENTS // LIMIT - 1) * WINDOW_MS


@EVERY_TOPOLOGY
async def test_the_recorded_limit_holds_for_a_service_configured_otherwise(
    service_builder: Builder, caplog: pytest.LogCaptureFixture, redis_client: RedisClient
) -> None:
    caplog.set_level(logging.WARNING, logger="aioqueue")
    first = service_builder().rate_limit(PaymentCheck, 5, per=timedelta(seconds=2)).build()
    async with first:
        first.add_handler(PaymentCheck, Recorder())

        async def recorded() -> bool:
            return await read_rate_limit(redis_client, LAYOUT) is not None

        await wait_until(recorded)
    second = service_builder().rate_limit(PaymentCheck, 1000, per=1).build()
    async with second:
        second.add_handler(PaymentCheck, Recorder())

        async def warned() -> bool:
            return any("is recorded in Redis" in r.getMessage() for r in caplog.records)

        await wait_until(warned)
    assert await read_rate_limit(redis_client, LAYOUT) == RateLimit(5, 2000)


def test_a_partitioned_type_or_a_bad_limit_is_refused_at_build() -> None:
    builder = EventService.builder().url("redis://localhost:1")
    with pytest.raises(ConfigurationError, match="partitioned type cannot be rate limited"):
        builder.partitions(PaymentCheck, 4).rate_limit(PaymentCheck, 5, per=1).build()
    builder = EventService.builder().url("redis://localhost:1")
    with pytest.raises(ConfigurationError, match="limit must be an integer from 1"):
        builder.rate_limit(PaymentCheck, 0, per=1).build()


async def test_the_cli_shows_sets_and_clears_a_limit_and_stats_show_it(
    redis_url: str, redis_client: RedisClient
) -> None:
    env = {"AIOQUEUE_URL": redis_url}
    await declare(redis_client, "PaymentCheck")
    assert (await run_cli("rate-limit", "PaymentCheck", env=env)).stdout.strip() == (
        "PaymentCheck: no rate limit"
    )
    set_ = await run_cli("rate-limit", "PaymentCheck", "100", "--per", "2", env=env)
    assert set_.stdout.strip() == "PaymentCheck: 100/2s"
    # A type no service declared yet takes a limit only when told to, and is recorded then.
    assert (await run_cli("rate-limit", "Other", "7", env=env)).returncode == 1
    other = await run_cli("rate-limit", "Other", "7", "--allow-undeclared", env=env)
    assert other.stdout.strip() == "Other: 7/1s", other.stderr
    listed = await run_cli("stats", "--json", env=env)
    assert {t["type"]: t["rate_limit"] for t in listed.json()["types"]} == {
        "Other": {"limit": 7, "per": 1.0},
        "PaymentCheck": {"limit": 100, "per": 2.0},
    }
    stats = await run_cli("stats", "--json", "PaymentCheck", env=env)
    assert stats.json()["types"][0]["rate_limit"] == {"limit": 100, "per": 2.0}
    cleared = await run_cli("rate-limit", "PaymentCheck", "--clear", "--json", env=env)
    assert cleared.json() == {"type": "PaymentCheck", "rate_limit": None}
