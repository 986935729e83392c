"""aioqueue.spark through a Spark Connect client (a server started from the PySpark wheel, see
spark_connect.py): the same code as on the classic session, on DataFrame APIs only. Frames
here are built in SQL text: pyspark.sql.functions would build classic columns in this
process, which also holds the classic session."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import orjson
import pytest
import redis as sync_redis
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from aioqueue._wire.envelope import text
from aioqueue.spark import (
    InvalidDataFrameError,
    ScheduleResult,
    foreach_batch_writer,
    read_dead_letters,
    read_pending,
    schedule_dataframe,
)
from tests.support.common import PaymentCheck, Recorder, queue_key, wait_until
from tests.support.spark_connect import ConnectServer
from tests.support.spark_fixtures import off_loop

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.connect.session import SparkSession

# The first Connect test of a session also starts the server and its Python workers.
pytestmark = pytest.mark.timeout(180)

Builder = Callable[[], EventServiceBuilder]
EVENTS = queue_key("PaymentCheck", "events")
SEQUENCE = queue_key("PaymentCheck", "sequence")
DEAD_LETTERS = queue_key("PaymentCheck", "dead_letters")


def orders(spark: SparkSession, rows: int, *, delay_s: str = "3600", tasks: int = 4) -> DataFrame:
    """Rows p-00000, p-00001, ... with an order_id and a delay in seconds (SQL)."""
    return spark.range(0, rows, 1, tasks).selectExpr(
        "format_string('p-%05d', id) AS id", "CAST(id AS INT) AS order_id", f"{delay_s} AS delay_s"
    )


async def test_a_batch_is_scheduled_once_and_a_second_run_finds_it_pending(
    spark_connect: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    rows = 20_000
    frame = orders(spark_connect, rows)
    first = await off_loop(
        schedule_dataframe, frame, PaymentCheck, url=redis_url, delay_col="delay_s"
    )
    again = await off_loop(
        schedule_dataframe, frame, PaymentCheck, url=redis_url, delay_col="delay_s"
    )
    assert first == ScheduleResult(scheduled=rows, already_pending=0)
    assert again == ScheduleResult(scheduled=0, already_pending=rows)
    assert await redis_client.hlen(EVENTS) == rows
    assert int(await redis_client.get(SEQUENCE) or 0) == rows  # each event written once
    envelope = orjson.loads(await redis_client.hget(EVENTS, "p-00042") or b"")
    assert envelope["p"] == '{"order_id":42}'
    # Both runs succeeded, so both forgot their records of what they wrote.
    assert [key async for key in redis_client.scan_iter(match="*:runs:*")] == []


async def test_pending_events_and_dead_letters_read_back_in_full(
    spark_connect: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Builder,
) -> None:
    """2,700 events due in an hour and 300 due now, which die at their first failure."""
    frame = orders(spark_connect, 3000, delay_s="IF(id < 300, 0, 3600)")
    await off_loop(schedule_dataframe, frame, PaymentCheck, url=redis_url, delay_col="delay_s")

    async def all_dead() -> bool:
        return await redis_client.hlen(DEAD_LETTERS) == 300

    def decline(event: object) -> bool:
        raise RuntimeError("card declined")

    async with service_builder().retry_attempts(1).build() as service:
        service.add_handler(PaymentCheck, Recorder(outcome=decline), parallelism=8)
        await wait_until(all_dead, within=30)

    def summaries() -> tuple[list[object], list[object]]:
        summary = (
            "count(*) AS rows",
            "count(DISTINCT id) AS ids",
            "min(id) AS first",
            "max(id) AS last",
            "max(attempt) AS attempts",
            "count_if(error LIKE '%card declined%') AS declined",
        )
        # Small slices: several tasks per sorted set, read in parallel.
        pending = read_pending(spark_connect, redis_url, PaymentCheck, rows_per_task=700)
        dead = read_dead_letters(spark_connect, redis_url, PaymentCheck, rows_per_task=70)
        assert [name for name, _ in pending.dtypes] == [
            "id", "event_type", "due_at", "attempt", "payload", "context", "error"
        ]  # fmt: skip
        assert dict(dead.dtypes)["died_at"] == "timestamp"
        return list(pending.selectExpr(*summary).first() or ()), list(
            dead.selectExpr(*summary).first() or ()
        )

    pending, dead = await off_loop(summaries)
    assert pending == [2700, 2700, "p-00300", "p-02999", 0, 0]
    assert dead == [300, 300, "p-00000", "p-00299", 1, 300]


async def test_the_schema_and_data_checks_refuse_a_frame_before_anything_is_written(
    spark_connect: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Builder,
) -> None:
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, Recorder())
        # An enqueue publishes the type's schema before it writes.
        await service.enqueue(PaymentCheck(id="seed", order_id=1), 3600)
        assert await service.cancel(PaymentCheck, "seed")
    text_ids = spark_connect.sql("SELECT 'p-1' AS id, 'one' AS order_id")
    with pytest.raises(InvalidDataFrameError, match=r"column 'order_id'.*expected an integer"):
        await off_loop(schedule_dataframe, text_ids, PaymentCheck, url=redis_url)
    null_ids = spark_connect.sql("SELECT * FROM VALUES ('p-1', 1), (NULL, 2) AS t(id, order_id)")
    with pytest.raises(InvalidDataFrameError, match=r"1 rows have null ids"):
        await off_loop(schedule_dataframe, null_ids, PaymentCheck, url=redis_url)
    assert await redis_client.hlen(EVENTS) == 0


async def test_a_retried_task_writes_nothing_twice(
    spark_connect: SparkSession,
    connect_server: ConnectServer,
    redis_url: str,
    redis_client: redis.Redis,
) -> None:
    """The server's Python workers are killed once an eighth of the rows are written: 4
    tasks of a quarter each run two at a time, so the kill lands inside the first two."""
    rows = 40_000
    frame = orders(spark_connect, rows)
    written_at_kill = -1

    def kill_midway() -> None:
        """Watches and kills from a thread with a client of its own, as the standalone
        test does."""
        nonlocal written_at_kill
        watcher = sync_redis.Redis.from_url(redis_url)
        try:
            deadline = time.monotonic() + 120
            while int(watcher.get(SEQUENCE) or 0) < rows // 8:
                assert time.monotonic() < deadline, "the job wrote nothing for two minutes"
                time.sleep(0.002)
            assert connect_server.kill_python_workers() > 0
            written_at_kill = int(watcher.get(SEQUENCE) or 0)
        finally:
            watcher.close()

    async with anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, kill_midway)
        result = await off_loop(
            schedule_dataframe, frame, PaymentCheck, url=redis_url, delay_col="delay_s",
            batch_size=25,
        )  # fmt: skip
    # Neither of the first two tasks had written its quarter: both were killed midway.
    assert rows // 8 <= written_at_kill < rows // 2
    # The killed attempts' rows count once, as scheduled (the retries found them in the run's
    # record), and no event was written twice.
    assert result == ScheduleResult(scheduled=rows, already_pending=0)
    assert int(await redis_client.get(SEQUENCE) or 0) == rows
    stored = await redis_client.hkeys(EVENTS)
    assert sorted(text(key) for key in stored) == [f"p-{n:05d}" for n in range(rows)]


async def test_a_streaming_query_delivers_every_row_once(
    spark_connect: SparkSession, redis_url: str, tmp_path: Path, service_builder: Builder
) -> None:
    """Two micro-batches, each scheduled by the writer where Connect runs it: in a Python
    process of the server."""
    source = tmp_path / "orders"
    source.mkdir()
    for part in range(2):
        lines = (
            orjson.dumps({"id": f"p-{n}", "order_id": n, "wait_s": 0, "channel": "web"})
            for n in range(part * 500, part * 500 + 500)
        )
        (source / f"{part}.json").write_bytes(b"\n".join(lines))
    writer = foreach_batch_writer(
        PaymentCheck, url=redis_url, delay_col="wait_s", context_cols=["channel"]
    )

    def run_until_caught_up() -> int:
        from pyspark.errors.exceptions.connect import SparkException

        stream = (
            spark_connect.readStream.schema("id string, order_id int, wait_s int, channel string")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .writeStream.foreachBatch(writer)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
        )
        try:
            query = stream.start()
        except SparkException as error:
            # The server gives the Python process that will run foreachBatch a fixed 10 s to
            # connect back (PythonWorkerFactory; no setting changes it), which a loaded
            # machine's interpreter start-up can exceed. The query has then run no batch, so
            # it starts once more; the writer is not what failed.
            if "failed to connect back" not in str(error):
                raise
            query = stream.start()
        query.awaitTermination()
        return len([p for p in query.recentProgress if p.numInputRows])

    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=16)
        batches = await off_loop(run_until_caught_up)
        await handler.wait_for(1000, within=60)
    assert batches == 2
    assert Counter(handler.ids) == Counter(f"p-{n}" for n in range(1000))
    assert {tuple(delivery.context.items()) for delivery in handler.deliveries} == {
        (("channel", "web"),)
    }


async def test_a_null_in_a_field_that_is_not_optional_is_refused_over_connect(
    spark_connect: SparkSession, redis_url: str, redis_client: redis.Redis, service_builder: Builder
) -> None:
    """The Connect client refuses what the classic session refuses (see
    test_spark_schema_check.py): a null order_id, before anything is written."""
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, Recorder())
        await service.enqueue(PaymentCheck(id="seed", order_id=1), 3600)
        assert await service.cancel(PaymentCheck, "seed")
    frame = spark_connect.range(0, 10, 1, 2).selectExpr(
        "format_string('p-%d', id) AS id", "IF(id % 5 = 0, NULL, CAST(id AS INT)) AS order_id"
    )
    with pytest.raises(
        InvalidDataFrameError, match=r"2 rows have a null in payload column 'order_id'"
    ):
        await off_loop(schedule_dataframe, frame, PaymentCheck, url=redis_url)
    assert await redis_client.hlen(EVENTS) == 0
