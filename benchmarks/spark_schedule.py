"""Rows per second scheduled and read back from Spark, beside the fastest single-process path.

    python benchmarks/spark_schedule.py --rows 1000000 --repeats 3 [--sessions classic,connect]
                                        [--url redis://...]

Every path schedules the same events (id `b-<n>`, payload `{"order_id": n}`, due in an hour)
of one type into the same server, which is flushed between runs:

- schedule, classic: `aioqueue.spark.schedule_dataframe` over `spark.range(rows)` in a
  local[2] session, timed from the call to its return (the check job, the write job,
  generating the rows).
- schedule, connect: the same through a Spark Connect client of a local[2] server started
  from the PySpark wheel (`sbin/start-connect-server.sh`).
- read, classic / connect: `read_pending(...).count()` over the rows just scheduled.
- enqueue_many: one process, one event loop, `EventService.enqueue_many` in calls of 10,000
  events (the library writes those in chunks of 500 per script call, a few in flight); only
  the calls are timed, not building the event objects.

Each session first schedules and reads 10,000 rows to warm the JVM and the Python workers
up. Repeats are interleaved (every path once, then the next repeat), and the table shows the
min / median / max rows/s of each path. Without --url it starts an embedded server
(`pip install -e '.[demo,spark]'`). Needs 2 free cores to mean anything: Spark's two tasks,
the server and the driver share them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis
import redis.asyncio
from pyspark.sql import DataFrame, SparkSession
from spark_sessions import connect_spark, local_spark

from aioqueue import Event, EventService
from aioqueue.spark import read_pending, schedule_dataframe
from aioqueue.testing import EmbeddedServer

EVENT_TYPE = "BenchEvent"
DELAY_S = 3600
WARM_UP_ROWS = 10_000
MANY_CALL = 10_000


@dataclass
class BenchEvent(Event):
    id: str
    order_id: int


def rows_frame(spark: SparkSession, rows: int) -> DataFrame:
    # SQL text rather than pyspark.sql.functions: the same expression on either session kind.
    return spark.range(rows).selectExpr(
        "concat('b-', CAST(id AS STRING)) AS id", "id AS order_id", f"{DELAY_S} AS delay_s"
    )


def pending(url: str) -> int:
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        return int(client.hlen(f"aioqueue:{{{EVENT_TYPE}}}:events"))


def flush(url: str) -> None:
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        client.flushall()


def measure_schedule(spark: SparkSession, url: str, rows: int) -> float:
    flush(url)
    started = time.perf_counter()
    result = schedule_dataframe(rows_frame(spark, rows), EVENT_TYPE, url=url, delay_col="delay_s")
    elapsed = time.perf_counter() - started
    assert result.scheduled == rows, result
    assert pending(url) == rows
    return elapsed


def measure_read(spark: SparkSession, url: str, rows: int) -> float:
    """Reads back what measure_schedule left."""
    started = time.perf_counter()
    counted = read_pending(spark, url, EVENT_TYPE).count()
    elapsed = time.perf_counter() - started
    assert counted == rows, counted
    return elapsed


async def enqueue_many(url: str, rows: int) -> float:
    client = redis.asyncio.Redis.from_url(url)
    service = EventService.builder().client(client).enable_scheduling(False).build()
    elapsed = 0.0
    async with service:
        for first in range(0, rows, MANY_CALL):
            events = [BenchEvent(id=f"b-{n}", order_id=n) for n in range(first, first + MANY_CALL)]
            events = events[: rows - first]
            started = time.perf_counter()
            await service.enqueue_many(events, DELAY_S)
            elapsed += time.perf_counter() - started
    await client.aclose()
    assert pending(url) == rows
    return elapsed


def measure_enqueue_many(url: str, rows: int) -> float:
    flush(url)
    return asyncio.run(enqueue_many(url, rows))


@contextlib.contextmanager
def server_url(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


@contextlib.contextmanager
def sessions(kinds: list[str]) -> Iterator[dict[str, SparkSession]]:
    with contextlib.ExitStack() as stack:
        opened: dict[str, SparkSession] = {}
        if "classic" in kinds:
            opened["classic"] = local_spark("aioqueue-spark-benchmark")
            stack.callback(opened["classic"].stop)
        if "connect" in kinds:
            opened["connect"] = stack.enter_context(connect_spark("aioqueue-spark-benchmark"))
        yield opened


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sessions", default="classic,connect", help="classic, connect or both")
    parser.add_argument("--url", help="a server to use (it is flushed!); default: embedded")
    args = parser.parse_args()
    kinds = [kind for kind in args.sessions.split(",") if kind]
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {}
    with server_url(args.url) as url, sessions(kinds) as opened:
        for spark in opened.values():
            measure_schedule(spark, url, WARM_UP_ROWS)
            measure_read(spark, url, WARM_UP_ROWS)
        for _ in range(args.repeats):
            paths: dict[str, Callable[[], float]] = {}
            for kind, spark in opened.items():
                paths[f"schedule, {kind}"] = functools.partial(
                    measure_schedule, spark, url, args.rows
                )
                paths[f"read_pending, {kind}"] = functools.partial(
                    measure_read, spark, url, args.rows
                )
            paths["enqueue_many (1 process)"] = lambda: measure_enqueue_many(url, args.rows)
            for path, measure in paths.items():
                seconds.setdefault(path, []).append(measure())
        flush(url)
    rates = {path: sorted(args.rows / s for s in runs) for path, runs in seconds.items()}
    print(f"{'path':<28}{'rows':>10}{'min/s':>10}{'median/s':>10}{'max/s':>10}")
    for path, rate in rates.items():
        print(
            f"{path:<28}{args.rows:>10}{rate[0]:>10.0f}"
            f"{statistics.median(rate):>10.0f}{rate[-1]:>10.0f}"
        )
    results = {
        "rows": args.rows,
        "repeats": args.repeats,
        "load_before": [round(load, 2) for load in load_before],
        "load_after": [round(load, 2) for load in os.getloadavg()],
        "rows_per_s": {path: [round(r) for r in rate] for path, rate in rates.items()},
        "median_rows_per_s": {path: round(statistics.median(r)) for path, r in rates.items()},
    }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
