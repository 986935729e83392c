"""aioqueue.spark.schedule_dataframe: rows become the events a service delivers, once."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

import orjson
import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession

from aioqueue import EventServiceBuilder
from aioqueue._wire.envelope import text
from aioqueue._wire.functions import LIBRARY
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.registry import registry_key
from aioqueue.spark import (
    InvalidDataFrameError,
    ScheduleResult,
    foreach_batch_writer,
    read_dead_letters,
    read_pending,
    schedule_dataframe,
)
from tests.support.common import PaymentCheck, Recorder, queue_key, wait_until
from tests.support.spark_fixtures import off_loop

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = pytest.mark.timeout(180)

EVENTS = queue_key("PaymentCheck", "events")
SCHEDULE = queue_key("PaymentCheck", "schedule")
DUE = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)
DUE_MS = round(DUE.timestamp() * 1000)


async def envelopes(client: redis.Redis, key: str = EVENTS) -> dict[str, dict[str, object]]:
    stored = await client.hgetall(key)
    return {text(name): orjson.loads(raw) for name, raw in stored.items()}


async def test_rows_are_delivered_to_the_handler_with_payload_and_context(
    spark: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    orders = spark.createDataFrame(
        [("p-1", 1, "t-1"), ("p-2", 2, "t-2"), ("p-3", 3, None)],
        "id string, order_id int, trace_id string",
    )
    result = await off_loop(
        schedule_dataframe, orders, PaymentCheck, url=redis_url, context_cols=["trace_id"]
    )
    assert result == ScheduleResult(scheduled=3, already_pending=0)
    assert await redis_client.hget(registry_key("aioqueue"), "PaymentCheck") == b"1"

    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler)
        deliveries = await handler.wait_for(3)
        await wait_until(lambda: _is_empty(redis_client))
    assert len(deliveries) == 3
    by_id = {delivery.event.id: delivery for delivery in deliveries}
    assert [by_id[i].event for i in sorted(by_id)] == [
        PaymentCheck(id="p-1", order_id=1),
        PaymentCheck(id="p-2", order_id=2),
        PaymentCheck(id="p-3", order_id=3),
    ]
    assert [by_id[i].context for i in sorted(by_id)] == [
        {"trace_id": "t-1"},
        {"trace_id": "t-2"},
        {},
    ]


async def _is_empty(client: redis.Redis) -> bool:
    return await client.hlen(EVENTS) == 0


async def test_a_second_run_schedules_nothing_new_and_keeps_the_events(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    orders = spark.createDataFrame(
        [(f"p-{n}", n, 3600) for n in range(50)], "id string, order_id int, delay_s int"
    ).repartition(3)
    options = {"url": redis_url, "delay_col": "delay_s", "batch_size": 7}
    # Without the function library on the server, the first call of a task loads it.
    await redis_client.function_flush()
    first = await off_loop(schedule_dataframe, orders, "PaymentCheck", **options)
    assert LIBRARY.name in str(await redis_client.function_list())
    stored = await envelopes(redis_client)
    second = await off_loop(schedule_dataframe, orders, "PaymentCheck", **options)
    assert first == ScheduleResult(scheduled=50, already_pending=0)
    assert second == ScheduleResult(scheduled=0, already_pending=50)
    assert await envelopes(redis_client) == stored


async def test_replace_overwrites_payload_context_and_due_time(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    schema = "id string, order_id int, due timestamp, source string"
    early = datetime(2029, 1, 1, tzinfo=timezone.utc)
    first = spark.createDataFrame([("p-1", 1, early, "a"), ("p-2", 2, early, "a")], schema)
    second = spark.createDataFrame([("p-1", 10, DUE, "b"), ("p-2", 20, DUE, "b")], schema)
    options = {"url": redis_url, "due_col": "due", "context_cols": ["source"]}
    await off_loop(schedule_dataframe, first, PaymentCheck, **options)
    kept = await off_loop(schedule_dataframe, second, PaymentCheck, **options)
    assert kept == ScheduleResult(scheduled=0, already_pending=2)
    assert (await envelopes(redis_client))["p-1"]["p"] == '{"order_id":1}'

    replaced = await off_loop(schedule_dataframe, second, PaymentCheck, replace=True, **options)
    assert replaced == ScheduleResult(scheduled=2, already_pending=0)
    stored = await envelopes(redis_client)
    assert stored["p-1"]["p"] == '{"order_id":10}'
    assert stored["p-2"]["context"] == {"source": "b"}
    assert stored["p-2"].get("attempt", 0) == 0
    assert await redis_client.zscore(SCHEDULE, "p-1") == DUE_MS


async def test_envelopes_match_what_the_service_writes(
    spark: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
) -> None:
    async with service_builder().enable_scheduling(False).build() as service:
        await service.enqueue(PaymentCheck(id="p-1", order_id=7), at=DUE, context={"k": "v"})
    orders = spark.createDataFrame(
        [("p-2", 7, DUE, "v")], "id string, order_id int, due timestamp, k string"
    )
    await off_loop(
        schedule_dataframe, orders, PaymentCheck, url=redis_url, due_col="due", context_cols=["k"]
    )
    stored = await envelopes(redis_client)
    ignored = ("id", "v", "enqueued_at")
    service_side = {k: v for k, v in stored["p-1"].items() if k not in ignored}
    spark_side = {k: v for k, v in stored["p-2"].items() if k not in ignored}
    assert spark_side == service_side
    assert await redis_client.zscore(SCHEDULE, "p-1") == await redis_client.zscore(SCHEDULE, "p-2")


async def test_payload_columns_become_one_json_object_with_nulls_kept(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    orders = spark.sql(
        "SELECT 'p-1' AS id, 5 AS order_id, array('a', 'b') AS tags, "
        "named_struct('city', 'Oslo', 'zip', CAST(NULL AS STRING)) AS address, "
        "TIMESTAMP '2024-01-01 00:00:00' AS placed, 12.50BD AS amount, 'ignored' AS other"
    )
    await off_loop(
        schedule_dataframe,
        orders,
        "PaymentCheck",
        url=redis_url,
        payload_cols=["order_id", "tags", "address", "placed", "amount"],
    )
    payload = (await envelopes(redis_client))["p-1"]["p"]
    assert payload == (
        '{"order_id":5,"tags":["a","b"],"address":{"city":"Oslo","zip":null},'
        '"placed":"2024-01-01T00:00:00.000Z","amount":12.50}'
    )


@pytest.mark.parametrize(
    ("delay", "expected_ms"),
    [("CAST(90 AS INT)", 90_000), ("CAST(1.5 AS DOUBLE)", 1_500), ("INTERVAL '2' MINUTE", 120_000)],
    ids=["int-seconds", "fractional-seconds", "interval"],
)
async def test_delays_count_from_the_server_clock(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, delay: str, expected_ms: int
) -> None:
    orders = spark.sql(f"SELECT 'p-1' AS id, 1 AS order_id, {delay} AS wait")
    await off_loop(schedule_dataframe, orders, PaymentCheck, url=redis_url, delay_col="wait")
    seconds, microseconds = await redis_client.time()
    now_ms = seconds * 1000 + microseconds // 1000
    score = await redis_client.zscore(SCHEDULE, "p-1")
    assert score is not None
    assert now_ms + expected_ms - 5_000 <= score <= now_ms + expected_ms


async def test_a_partitioned_type_is_written_to_each_ids_partition_keys(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    ids = [f"p-{n}" for n in range(40)]
    orders = spark.createDataFrame([(i, n) for n, i in enumerate(ids)], "id string, order_id int")
    result = await off_loop(
        schedule_dataframe, orders, PaymentCheck, url=redis_url, partitions=4, batch_size=3
    )
    assert result == ScheduleResult(scheduled=40, already_pending=0)
    layout = QueueLayout("aioqueue", "PaymentCheck", 4)
    for event_id in ids:
        keys = layout.keys_for(event_id)
        assert await redis_client.hexists(keys.events, event_id), event_id
        assert await redis_client.zscore(keys.schedule, event_id) is not None
    sizes = [await redis_client.hlen(keys.events) for keys in layout.all_keys]
    assert sum(sizes) == 40
    assert all(sizes), sizes  # 40 ids leave no partition empty
    assert not await redis_client.exists(EVENTS)
    assert await redis_client.hget(registry_key("aioqueue"), "PaymentCheck") == b"4"

    # A later run finds the partition count in the registry, and a contradicting one fails.
    again = await off_loop(schedule_dataframe, orders, PaymentCheck, url=redis_url)
    assert again == ScheduleResult(scheduled=0, already_pending=40)
    with pytest.raises(InvalidDataFrameError, match="registry"):
        await off_loop(schedule_dataframe, orders, PaymentCheck, url=redis_url, partitions=2)


async def test_an_empty_frame_schedules_nothing_and_records_the_type(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    orders = spark.createDataFrame([], "id string, order_id int")
    result = await off_loop(schedule_dataframe, orders, PaymentCheck, url=redis_url, prefix="p")
    assert result == ScheduleResult()
    assert await redis_client.hgetall(registry_key("p")) == {b"PaymentCheck": b"1"}


async def test_context_merges_string_and_map_columns_without_nulls(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    """A map column's entries join the context beside single values (a later column wins on
    a shared key); null values, and null maps, are left out."""
    orders = spark.sql(
        "SELECT * FROM VALUES "
        "('p-1', 1, 't-1', map('tenant', 'acme', 'trace', 'from-map', 'gone', NULL), 7), "
        "('p-2', 2, NULL, CAST(NULL AS MAP<STRING, STRING>), NULL) "
        "AS t(id, order_id, trace, tags, shard)"
    )
    await off_loop(
        schedule_dataframe,
        orders,
        PaymentCheck,
        url=redis_url,
        context_cols=["trace", "tags", "shard"],
    )
    stored = await envelopes(redis_client)
    assert stored["p-1"]["context"] == {"trace": "from-map", "tenant": "acme", "shard": "7"}
    assert stored["p-2"].get("context", {}) == {}


async def test_a_misspelt_option_is_refused_as_python_would_and_nothing_is_written(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis
) -> None:
    """The options are declared once (ScheduleOptions, ReadOptions) and taken as `**options`,
    which Python does not check by itself: each function refuses an unknown one up front."""
    orders = spark.createDataFrame([("o-1", 1)], "id string, order_id int")
    bad: dict[str, Any] = {"id_column": "id"}
    with pytest.raises(TypeError, match=r"^schedule_dataframe\(\) got an unexpected keyword"):
        schedule_dataframe(orders, PaymentCheck, url=redis_url, **bad)
    with pytest.raises(TypeError, match=r"^foreach_batch_writer\(\) got an unexpected keyword"):
        foreach_batch_writer(PaymentCheck, url=redis_url, **bad)
    with pytest.raises(TypeError, match=r"^read_pending\(\) got an unexpected keyword"):
        read_pending(spark, redis_url, PaymentCheck, **bad)
    with pytest.raises(TypeError, match=r"^read_dead_letters\(\) got an unexpected keyword"):
        read_dead_letters(spark, redis_url, PaymentCheck, **bad)
    assert await redis_client.keys("*") == []
