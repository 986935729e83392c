"""Ten million pending: what a backlog of 10^7 events hours ahead costs, on one server.

    python benchmarks/ten_million.py                 # 10,000,000 pending, 20,000 due
    python benchmarks/ten_million.py --spark         # and read_pending over it in Spark
    python benchmarks/ten_million.py --pending 1000000 --json result.json

Starts its own embedded server (no persistence, no memory limit), then:

1. Scenario 6 of common.py at this size: on an emptied server, 1,000 events pending 30 days
   ahead, then `--pending`; each time the drain rate of `--due` due events (a worker started
   on them) and the dispatch step's rate alone, and the memory per pending event
   (INFO used_memory growth / events; payload `{"index": n}`, ids `backlog-n`).
2. With the large backlog in place: `stats` of the type (read_stats: what `aioqueue stats`,
   `GET /stats` and the Prometheus gauges call), `events list` (pending_page: the first page
   of 50, and a page of 50 from the middle of the schedule by due time), each timed 30 times,
   and the commands one stats call runs on the server (INFO commandstats). Both read the
   ready list whole, which a service keeps at two dispatch batches (200 deliveries by
   default); the dispatch-only step of 1. leaves all its deliveries there (`--due` of them),
   so the list is first trimmed to those 200, as a running service would hold it.
3. With `--spark`: `read_pending(...).count()` in a local[2] SparkSession, its time and the
   peak resident memory of the JVM and of the Python workers.
4. Scenario 4 of common.py (memory) at `--pending`, on a server of its own: the memory per
   event the comparison table reports, measured the same way (enqueue_many, ids `e-n`, an
   hour ahead), so it reads beside that table's figure at 100,000. It differs from 1.'s by
   the ids: an event's id and envelope share one allocation, which grows in 16-byte steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis.asyncio
from bench_events import BenchEvent
from common import (
    JsonDict,
    Options,
    command_stats,
    stats_delta,
)
from scenarios import scenario_backlog, scenario_memory
from system_aioqueue import ENQUEUE_MANY, AioqueueSystem

from aioqueue import event_type_name
from aioqueue._admin.stats import read_stats
from aioqueue._wire.browse import pending_page
from aioqueue._wire.keys import QueueLayout
from aioqueue.testing import EmbeddedServer

TIMINGS = 30
# The most deliveries a default service keeps in a ready list (ServiceConfig.ready_capacity).
SERVICE_READY_CAPACITY = 200


async def timed(call: Callable[[], Awaitable[Any]]) -> JsonDict:
    """Milliseconds per call over TIMINGS calls (after one warm-up)."""
    await call()
    times = []
    for _ in range(TIMINGS):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[int(0.9 * len(ordered))], 2),
        "max_ms": round(ordered[-1], 2),
    }


async def operator_reads(url: str, pending: int) -> JsonDict:
    client = redis.asyncio.Redis.from_url(url)
    layout = QueueLayout("aioqueue", event_type_name(BenchEvent))
    try:
        keys = layout.all_keys[0]
        await client.ltrim(keys.ready, 0, SERVICE_READY_CAPACITY - 1)
        counted = (await read_stats(client, "aioqueue", [layout.event_type])).queues[0]
        if counted.pending < pending:
            raise RuntimeError(f"stats counted {counted.pending} pending, expected {pending}+")
        before = await command_stats(client)
        await read_stats(client, "aioqueue", [layout.event_type])
        after = await command_stats(client)
        commands = {name: calls for name, (calls, _) in stats_delta(before, after).items()}
        commands["info"] = commands.get("info", 0) - 1  # the second snapshot's own INFO
        middle_entry = await client.zrange(
            keys.schedule, pending // 2, pending // 2, withscores=True
        )
        middle_score = float(middle_entry[0][1])
        middle = datetime.fromtimestamp(middle_score / 1000, tz=timezone.utc)
        return {
            "stats": await timed(lambda: read_stats(client, "aioqueue", [layout.event_type])),
            "stats_commands": {name: calls for name, calls in commands.items() if calls > 0},
            "list_first_page": await timed(lambda: pending_page(client, layout, limit=50)),
            "list_middle_page": await timed(
                lambda: pending_page(client, layout, limit=50, due_after=middle)
            ),
        }
    finally:
        await client.aclose()


def spark_read(url: str) -> JsonDict:
    """read_pending(...).count() in a child process, so its memory is its own to measure."""
    script = Path(__file__).with_name("spark_read_pending.py")
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(script), url, event_type_name(BenchEvent)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the Spark read failed:\n{done.stderr[-3000:]}")
    result: JsonDict = json.loads(done.stdout.strip().splitlines()[-1])
    result["seconds_with_session_start"] = round(time.perf_counter() - started, 1)
    return result


async def run(args: argparse.Namespace, url: str) -> JsonDict:
    options = Options(
        scenario="backlog",
        url=url,
        events=args.due,
        spread=0.0,
        variant="",
        seed=1,
        timeout=600.0,
        backlog=args.pending,
        backlog_small=1000,
        window=0.0,
    )
    result: JsonDict = {"pending": args.pending, "due": args.due}
    result["backlog"] = await scenario_backlog(AioqueueSystem(), options)
    result["operator"] = await operator_reads(url, args.pending)
    return result


async def memory_as_the_table_measures_it(url: str, pending: int) -> JsonDict:
    """Step 4: scenario 4 at `pending` events."""
    options = Options(
        scenario="memory",
        url=url,
        events=pending,
        spread=0.0,
        variant=ENQUEUE_MANY,
        seed=1,
        timeout=600.0,
        backlog=0,
        backlog_small=0,
        window=0.0,
    )
    return await scenario_memory(AioqueueSystem(), options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pending", type=int, default=10_000_000)
    parser.add_argument("--due", type=int, default=20_000)
    parser.add_argument("--spark", action="store_true", help="also time read_pending in Spark")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    server = EmbeddedServer()
    server.start()
    try:
        result = asyncio.run(run(args, server.url))
        if args.spark:
            result["spark_read_pending"] = spark_read(server.url)
    finally:
        server.stop()
    # A new server rather than a FLUSHALL of ten million keys, which outlasts a read timeout.
    with EmbeddedServer() as fresh:
        result["memory"] = asyncio.run(memory_as_the_table_measures_it(fresh.url, args.pending))
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
