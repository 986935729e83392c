"""aioqueue.spark.foreach_batch_writer: Structured Streaming micro-batches, replays included."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession

from aioqueue.spark import ForeachBatchWriter, ScheduleResult, foreach_batch_writer
from tests.support.common import PaymentCheck, queue_key
from tests.support.spark_fixtures import off_loop

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = pytest.mark.timeout(180)

EVENTS = queue_key("PaymentCheck", "events")
SCHEMA = "id string, order_id int, wait_s int, channel string"


def write_orders(path: Path, numbers: range) -> None:
    rows = [{"id": f"p-{n}", "order_id": n, "wait_s": 3600, "channel": "web"} for n in numbers]
    path.write_bytes(b"\n".join(orjson.dumps(row) for row in rows))


async def test_each_micro_batch_is_scheduled_and_a_replayed_batch_adds_nothing(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    source = tmp_path / "orders"
    source.mkdir()
    checkpoint = tmp_path / "checkpoint"

    def run_until_caught_up() -> ForeachBatchWriter:
        writer = foreach_batch_writer(
            PaymentCheck, url=redis_url, delay_col="wait_s", context_cols=["channel"]
        )
        query = (
            spark.readStream.schema(SCHEMA)
            .json(str(source))
            .writeStream.foreachBatch(writer)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return writer

    write_orders(source / "1.json", range(3))
    first = await off_loop(run_until_caught_up)
    assert first.total == ScheduleResult(scheduled=3, already_pending=0)

    write_orders(source / "2.json", range(3, 5))
    second = await off_loop(run_until_caught_up)
    assert second.total == ScheduleResult(scheduled=2, already_pending=0)
    stored = await redis_client.hgetall(EVENTS)
    assert len(stored) == 5

    # The job died after writing batch 1 but before Spark committed it: the restart replays
    # the batch from its logged offsets, and every id in it is already pending.
    for name in ("1", ".1.crc"):  # the commit and Hadoop's checksum of it
        (checkpoint / "commits" / name).unlink()
    replay = await off_loop(run_until_caught_up)
    assert replay.total == ScheduleResult(scheduled=0, already_pending=2)
    assert await redis_client.hgetall(EVENTS) == stored
    assert orjson.loads(stored[b"p-4"])["context"] == {"channel": "web"}


async def test_a_micro_batch_is_computed_once_though_it_is_checked_and_written(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    """Checking and writing are two Spark jobs; the writer caches the batch, so a costly
    source (here a UDF counting its calls) runs once per row, not twice."""
    from pyspark.sql import functions as F

    calls = spark.sparkContext.accumulator(0)

    def counted(n: int) -> str:
        calls.add(1)
        return f"p-{n}"

    # The id: both the check (ids must be non-empty) and the write need it.
    batch = spark.createDataFrame([(n, n) for n in range(4)], "n int, order_id int").select(
        F.udf(counted, "string", useArrow=False)(F.col("n")).alias("id"), "order_id"
    )
    writer = foreach_batch_writer(PaymentCheck, url=redis_url)
    await off_loop(writer, batch, 0)
    assert writer.total == ScheduleResult(scheduled=4)
    assert calls.value == 4
    assert await redis_client.hlen(queue_key("PaymentCheck", "events")) == 4
