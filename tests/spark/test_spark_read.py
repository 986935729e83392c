"""aioqueue.spark.read_pending / read_dead_letters: typed DataFrames read by the executors."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

import orjson
import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aioqueue import Event, EventServiceBuilder, FixedDelays
from aioqueue.spark import read_dead_letters, read_pending, schedule_dataframe
from tests.support.common import PaymentCheck, Recorder, queue_key, wait_until
from tests.support.spark_fixtures import off_loop

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = pytest.mark.timeout(180)

DUE = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
DUE_MS = round(DUE.timestamp() * 1000)

PENDING_COLUMNS = [
    ("id", "string"),
    ("event_type", "string"),
    ("due_at", "timestamp"),
    ("attempt", "int"),
    ("payload", "string"),
    ("context", "map<string,string>"),
    ("error", "string"),
]
DEAD_LETTER_COLUMNS = [*PENDING_COLUMNS, ("died_at", "timestamp")]


def decline(event: Event) -> bool:
    raise RuntimeError(f"card declined for {event.id}")


async def test_pending_events_come_back_as_typed_rows(
    spark: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    orders = spark.createDataFrame(
        [("p-1", 1, DUE, "t-1"), ("p-2", 2, DUE, None)],
        "id string, order_id int, due timestamp, trace_id string",
    )
    await off_loop(
        schedule_dataframe,
        orders,
        PaymentCheck,
        url=redis_url,
        due_col="due",
        context_cols=["trace_id"],
    )

    # p-3 failed once and waits an hour for its retry, with the failure recorded.
    async def failure_recorded() -> bool:
        raw = await redis_client.hget(queue_key("PaymentCheck", "events"), "p-3")
        return raw is not None and "error" in orjson.loads(raw)

    handler = Recorder(outcome=decline)
    builder = service_builder().retry_policy(FixedDelays([3600]))
    async with builder.build() as service:
        service.add_handler(PaymentCheck, handler)
        await service.enqueue(PaymentCheck(id="p-3", order_id=3), 0)
        await handler.wait_for(1)
        await wait_until(failure_recorded)

    # p-4 as aioqueue 0.1 stored it, with the long keys payload and version.
    legacy = {"payload": '{"order_id":4}', "context": {"trace_id": "t-4"}, "version": 3}
    await redis_client.hset(queue_key("PaymentCheck", "events"), "p-4", orjson.dumps(legacy))
    await redis_client.zadd(queue_key("PaymentCheck", "schedule"), {"p-4": DUE_MS})

    pending = await off_loop(read_pending, spark, redis_url, PaymentCheck)
    assert pending.dtypes == PENDING_COLUMNS
    rows = (
        pending.select(
            "id", "event_type", F.unix_millis("due_at"), "attempt", "payload", "context", "error"
        )
        .orderBy("id")
        .collect()
    )
    assert [tuple(row) for row in rows[:2]] == [
        ("p-1", "PaymentCheck", DUE_MS, 0, '{"order_id":1}', {"trace_id": "t-1"}, None),
        ("p-2", "PaymentCheck", DUE_MS, 0, '{"order_id":2}', {}, None),
    ]
    retry = rows[2]
    assert (retry.id, retry.attempt, retry.payload) == ("p-3", 1, '{"order_id":3}')
    assert "card declined for p-3" in retry.error
    assert retry[2] > time.time() * 1000 + 3_000_000  # due in about an hour
    assert tuple(rows[3]) == (
        "p-4", "PaymentCheck", DUE_MS, 0, '{"order_id":4}', {"trace_id": "t-4"}, None
    )  # fmt: skip


@pytest.mark.parametrize(
    ("partitions", "ties"),
    [(1, 3), (2, 2500)],
    ids=["3-per-millisecond", "all-in-one-millisecond"],
)
async def test_many_events_are_read_in_parallel_slices_without_loss_or_repeats(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, partitions: int, ties: int
) -> None:
    count = 2500
    orders = (
        spark.range(count)
        .select(
            F.concat(F.lit("p-"), F.col("id").cast("string")).alias("id"),
            F.col("id").cast("int").alias("order_id"),
            F.timestamp_millis(F.lit(DUE_MS) + F.floor(F.col("id") / ties)).alias("due"),
        )
        .repartition(2)
    )
    await off_loop(
        schedule_dataframe,
        orders,
        PaymentCheck,
        url=redis_url,
        due_col="due",
        partitions=partitions,
    )
    pending = await off_loop(read_pending, spark, redis_url, PaymentCheck, rows_per_task=700)
    assert pending.rdd.getNumPartitions() >= 4
    summary = pending.agg(
        F.count("*").alias("rows"),
        F.count_distinct("id").alias("ids"),
        F.min(F.unix_millis("due_at")).alias("first"),
        F.max(F.unix_millis("due_at")).alias("last"),
    ).first()
    assert summary is not None
    assert (summary.rows, summary.ids) == (count, count)
    assert (summary.first, summary.last) == (DUE_MS, DUE_MS + (count - 1) // ties)


async def test_dead_letters_come_back_with_error_and_time_of_death(
    spark: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    orders = spark.createDataFrame(
        [("p-1", 1, "t-1"), ("p-2", 2, "t-2")], "id string, order_id int, trace_id string"
    )
    started = datetime.now(timezone.utc)
    await off_loop(
        schedule_dataframe, orders, PaymentCheck, url=redis_url, context_cols=["trace_id"]
    )
    dead_letters_key = queue_key("PaymentCheck", "dead_letters")

    async def both_dead() -> bool:
        return await redis_client.hlen(dead_letters_key) == 2

    handler = Recorder(outcome=decline)
    async with service_builder().retry_attempts(1).build() as service:
        service.add_handler(PaymentCheck, handler)
        await wait_until(both_dead)
    # An envelope that could not be read is kept as {"id", "raw", "error", "died_at"}.
    died_ms = round(time.time() * 1000)
    unreadable = {"id": "p-x", "raw": "not json", "error": "not JSON", "died_at": died_ms}
    await redis_client.hset(dead_letters_key, "p-x", orjson.dumps(unreadable))
    await redis_client.zadd(queue_key("PaymentCheck", "dead_letter_times"), {"p-x": died_ms})

    dead = await off_loop(read_dead_letters, spark, redis_url, "PaymentCheck")
    assert dead.dtypes == DEAD_LETTER_COLUMNS
    rows = dead.orderBy("id").collect()
    assert [row.id for row in rows] == ["p-1", "p-2", "p-x"]
    for row, order_id, trace in zip(rows[:2], [1, 2], ["t-1", "t-2"], strict=True):
        assert row.event_type == "PaymentCheck"
        assert row.attempt == 1
        assert row.payload == f'{{"order_id":{order_id}}}'
        assert row.context == {"trace_id": trace}
        assert f"card declined for {row.id}" in row.error
        assert row.due_at is not None
    ended = datetime.now(timezone.utc)
    times = dead.select(F.unix_millis("died_at").alias("ms")).orderBy("ms").collect()
    for (died,) in times:
        assert started.timestamp() * 1000 - 1 <= died <= ended.timestamp() * 1000 + 1
    broken = rows[2]
    assert (broken.payload, broken.attempt, broken.context) == (None, None, {})
    assert broken.error == "not JSON"


async def test_an_unknown_type_reads_as_an_empty_frame(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    pending = await off_loop(read_pending, spark, redis_url, "Nothing", prefix="other")
    dead = await off_loop(read_dead_letters, spark, redis_url, "Nothing", prefix="other")
    assert pending.count() == 0
    assert dead.count() == 0
    assert dead.dtypes == DEAD_LETTER_COLUMNS


@pytest.mark.parametrize("protocol", [2, 3])
async def test_the_readers_read_either_protocols_replies(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, protocol: int
) -> None:
    """The tasks read ZRANGE's raw reply, whose shape RESP2 and RESP3 tell apart."""
    for n, due in enumerate([DUE_MS, DUE_MS + 1, DUE_MS + 1]):
        await redis_client.hset(queue_key("PaymentCheck", "events"), f"p-{n}", f'{{"p":"{n}"}}')
        await redis_client.zadd(queue_key("PaymentCheck", "schedule"), {f"p-{n}": due})
    url = f"{redis_url}?protocol={protocol}"
    pending = await off_loop(read_pending, spark, url, PaymentCheck)
    rows = pending.select("id", F.unix_millis("due_at"), "payload").orderBy("id").collect()
    assert [tuple(row) for row in rows] == [
        ("p-0", DUE_MS, "0"), ("p-1", DUE_MS + 1, "1"), ("p-2", DUE_MS + 1, "2")
    ]  # fmt: skip
