"""Rows per second scheduled from Spark `local[2]`, beside the fastest single-process path.

    python benchmarks/spark_schedule.py --rows 1000000 [--url redis://...]

Both paths schedule the same events (id `b-<n>`, payload `{"order_id": n}`, due in an hour)
of one type into the same server, which is flushed between them:

- spark: `aioqueue.spark.schedule_dataframe` over `spark.range(rows)`, timed from the call to
  its return (the check job, the write job, generating the rows). A 10,000-row run first
  warms the JVM and the Python workers up.
- enqueue_many: one process, one event loop, `EventService.enqueue_many` in calls of 10,000
  events (the library writes those in chunks of 500 per script call, a few in flight); only
  the calls are timed, not building the event objects.

Without --url it starts an embedded server (`pip install -e '.[demo,spark]'`). Needs 2 free
cores to mean anything: Spark's two tasks, the server and the driver share them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import redis
import redis.asyncio
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aioqueue import Event, EventService
from aioqueue.spark import schedule_dataframe
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
    return spark.range(rows).select(
        F.concat(F.lit("b-"), F.col("id").cast("string")).alias("id"),
        F.col("id").alias("order_id"),
        F.lit(DELAY_S).alias("delay_s"),
    )


def pending(url: str) -> int:
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        return int(client.hlen(f"aioqueue:{{{EVENT_TYPE}}}:events"))


def flush(url: str) -> None:
    with contextlib.closing(redis.Redis.from_url(url)) as client:
        client.flushall()


def measure_spark(spark: SparkSession, url: str, rows: int) -> float:
    schedule_dataframe(rows_frame(spark, WARM_UP_ROWS), EVENT_TYPE, url=url, delay_col="delay_s")
    flush(url)
    started = time.perf_counter()
    result = schedule_dataframe(rows_frame(spark, rows), EVENT_TYPE, url=url, delay_col="delay_s")
    elapsed = time.perf_counter() - started
    assert result.scheduled == rows, result
    assert pending(url) == rows
    return elapsed


async def measure_enqueue_many(url: str, rows: int) -> float:
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


@contextlib.contextmanager
def server_url(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


def local_spark(app_name: str) -> SparkSession:
    """A local[2] session whose workers run this interpreter (the one with aioqueue), on the
    loopback interface, quiet."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--url", help="a server to use (it is flushed!); default: embedded")
    args = parser.parse_args()
    spark = local_spark("aioqueue-spark-benchmark")
    try:
        with server_url(args.url) as url:
            flush(url)
            spark_s = measure_spark(spark, url, args.rows)
            flush(url)
            many_s = asyncio.run(measure_enqueue_many(url, args.rows))
            flush(url)
    finally:
        spark.stop()
    results = {
        "rows": args.rows,
        "spark_local2_s": round(spark_s, 3),
        "spark_local2_rows_per_s": round(args.rows / spark_s),
        "enqueue_many_s": round(many_s, 3),
        "enqueue_many_rows_per_s": round(args.rows / many_s),
    }
    print(f"{'path':<28}{'rows':>10}{'seconds':>10}{'rows/s':>10}")
    for path, seconds in [("spark local[2]", spark_s), ("enqueue_many (1 process)", many_s)]:
        print(f"{path:<28}{args.rows:>10}{seconds:>10.2f}{args.rows / seconds:>10.0f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
