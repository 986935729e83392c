"""`aioqueue stats` and aioqueue._admin.stats: each number matches the queue's real state."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import anyio
import orjson
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder, FixedDelays
from aioqueue._admin.stats import QueueStats, read_stats
from tests.support.common import queue_key, wait_until
from tests.support.ops import run_cli
from tests.support.script_calls import ScriptCall


@dataclass
class Reminder(Event):
    id: str


@dataclass
class Export(Event):
    id: str


@dataclass
class Doomed(Event):
    id: str


Builder = Callable[[], EventServiceBuilder]


def by_type(queues: list[QueueStats]) -> dict[str, QueueStats]:
    return {queue.event_type: queue for queue in queues}


async def test_each_number_counts_its_own_state(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    release = anyio.Event()

    async def export(event: Export) -> bool:
        await release.wait()
        return True

    async def fail(event: Doomed) -> bool:
        raise RuntimeError("always")

    service = service_builder().retry_attempts(1).handler_timeout(30).build()
    async with service:
        service.add_handler(Export, export, parallelism=1)
        service.add_handler(Doomed, fail)
        past = datetime.now(timezone.utc) - timedelta(seconds=5)
        for i in range(3):
            await service.enqueue(Reminder(id=f"later-{i}"), timedelta(hours=1))
        for i in range(2):
            await service.enqueue(Reminder(id=f"late-{i}"), at=past)
        for i in range(3):
            await service.enqueue(Export(id=f"e-{i}"), 0)
        for i in range(2):
            await service.enqueue(Doomed(id=f"d-{i}"), 0)

        async def settled() -> bool:
            queues = by_type((await read_stats(redis_client, "aioqueue")).queues)
            return queues["Export"].in_flight == 1 and queues["Doomed"].dead == 2

        await wait_until(settled)
        result = await run_cli("stats", "--url", redis_url, "--json")
        release.set()

    assert result.returncode == 0, result.stderr
    snapshot = result.json()
    queues = {entry["type"]: entry for entry in snapshot["types"]}
    overdue = {name: queues[name].pop("oldest_overdue") for name in queues}
    assert queues == {
        # No handler: two events are past due, three wait for their time.
        "Reminder": dict(type="Reminder", partitions=1, pending=5, due_now=2, ready=0,
                         in_flight=0, dead=0, paused=False, rate_limit=None, finished=0),
        # One handler slot: one event runs, the two others wait in the ready list.
        "Export": dict(type="Export", partitions=1, pending=3, due_now=0, ready=2,
                       in_flight=1, dead=0, paused=False, rate_limit=None, finished=0),
        # Dead is not finished: only successes count there.
        "Doomed": dict(type="Doomed", partitions=1, pending=0, due_now=0, ready=0,
                       in_flight=0, dead=2, paused=False, rate_limit=None, finished=0),
    }  # fmt: skip
    assert 5 <= overdue["Reminder"] < 60
    assert 0 < overdue["Export"] < 60  # the ready list's head is overdue too
    assert overdue["Doomed"] == 0
    now_ms = datetime.now(timezone.utc).timestamp() * 1000
    assert abs(snapshot["server_time_ms"] - now_ms) < 5000


async def test_an_event_waiting_for_its_retry_is_not_in_flight(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    attempts = 0

    async def flaky(event: Export) -> bool:
        nonlocal attempts
        attempts += 1
        return False

    service = service_builder().retry_policy(FixedDelays([30])).retry_attempts(3).build()
    async with service:
        service.add_handler(Export, flaky)
        await service.enqueue(Export(id="e-1"), 0)

        async def failed_once() -> bool:
            raw = await redis_client.hget(queue_key("Export", "events"), "e-1")
            return raw is not None and "error" in orjson.loads(raw)

        await wait_until(failed_once)
        [export] = (await read_stats(redis_client, "aioqueue", ["Export"])).queues
    assert attempts == 1
    assert (export.pending, export.due_now, export.ready, export.in_flight) == (1, 0, 0, 0)


async def test_stats_read_counters_not_envelopes_whatever_the_backlog(
    service_builder: Builder, redis_client: redis.Redis, script_calls: list[ScriptCall]
) -> None:
    """20,000 pending events and 3 running handlers: stats is one script call per type that
    runs no command whose cost grows with the backlog (no HSCAN, HVALS, HKEYS, no HGET per
    envelope), and still counts exactly."""
    release = anyio.Event()

    async def hold(event: Export) -> bool:
        await release.wait()
        return True

    service = service_builder().handler_timeout(30).build()
    async with service:
        await service.enqueue_many(
            [Reminder(id=f"r-{i}") for i in range(20_000)], timedelta(hours=1)
        )
        await service.enqueue_many([Export(id=f"e-{i}") for i in range(3)], 0)
        service.add_handler(Export, hold, parallelism=3)

        async def running() -> bool:
            queues = by_type((await read_stats(redis_client, "aioqueue")).queues)
            return queues["Export"].in_flight == 3

        await wait_until(running)
        await redis_client.config_resetstat()
        script_calls.clear()
        queues = by_type((await read_stats(redis_client, "aioqueue")).queues)
        commands = await redis_client.info("commandstats")
        stats_calls = [call for call in script_calls if call.script == "stats"]
        release.set()
    assert len(stats_calls) == 2  # one per type
    # Inside the scripts too: Redis counts the commands a script runs.
    assert not {"cmdstat_hscan", "cmdstat_hvals", "cmdstat_hkeys", "cmdstat_zscan"} & set(commands)
    assert commands.get("cmdstat_hget", {}).get("calls", 0) <= 10
    assert (queues["Reminder"].pending, queues["Reminder"].in_flight) == (20_000, 0)
    assert (queues["Export"].pending, queues["Export"].in_flight) == (3, 3)
    # The three handlers returned True when released: counted as finished, none in flight.
    [export] = (await read_stats(redis_client, "aioqueue", ["Export"])).queues
    assert (export.pending, export.in_flight, export.finished) == (0, 0, 3)


async def test_partitions_are_added_up(service_builder: Builder, redis_client: redis.Redis) -> None:
    service = service_builder().partitions(Reminder, 4).build()
    async with service:
        for i in range(10):
            await service.enqueue(Reminder(id=f"r-{i}"), timedelta(hours=1))
    [reminders] = (await read_stats(redis_client, "aioqueue")).queues
    assert (reminders.partitions, reminders.pending, reminders.due_now) == (4, 10, 0)


async def test_table_watch_and_environment_defaults(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    service = service_builder().prefix("shop").build()
    async with service:
        await service.enqueue(Reminder(id="r-1"), timedelta(hours=1))
    env = {"AIOQUEUE_URL": redis_url, "AIOQUEUE_PREFIX": "shop"}

    table = await run_cli("stats", env=env)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == [
        "TYPE", "PARTS", "PENDING", "DUE", "NOW", "READY", "IN", "FLIGHT", "DEAD", "OLDEST",
        "OVERDUE", "PAUSED", "RATE", "LIMIT",
    ]  # fmt: skip
    assert row.split()[:7] == ["Reminder", "1", "1", "0", "0", "0", "0"]
    assert row.split()[-2:] == ["-", "-"]  # not paused, no rate limit

    watched = await run_cli("stats", "--watch", "--count", "2", "--interval", "0.05", env=env)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.count("Reminder") == 2
    assert "(server clock)" in watched.stdout

    lines = await run_cli(
        "stats", "--json", "--watch", "--count", "2", "--interval", "0.05", env=env
    )
    snapshots = [orjson.loads(line) for line in lines.stdout.splitlines()]
    assert [s["types"][0]["pending"] for s in snapshots] == [1, 1]

    other = await run_cli("stats", "--url", redis_url, "--prefix", "nothing-here")
    assert "no event types registered under prefix 'nothing-here'" in other.stdout


async def test_unreachable_server_is_a_clear_error() -> None:
    result = await run_cli("stats", "--url", "redis://127.0.0.1:1")
    assert result.returncode == 1
    assert "cannot reach redis://127.0.0.1:1" in result.stderr
