"""schedule_dataframe checks payload columns against the type's published schema before it
writes anything, and a frame that fits arrives typed (timestamps, decimals, nested rows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal

import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession

from aioqueue import Event, EventServiceBuilder
from aioqueue.spark import InvalidDataFrameError, ScheduleResult, schedule_dataframe
from tests.support.common import Recorder, queue_key
from tests.support.spark_fixtures import off_loop

pytestmark = pytest.mark.timeout(180)

Builder = Callable[[], EventServiceBuilder]


@dataclass
class Line:
    sku: str
    qty: int


@dataclass
class Parcel(Event):
    id: str
    placed_at: datetime
    total: Decimal
    lines: list[Line]
    note: str = ""


PLACED = datetime(2026, 11, 24, 9, 30, tzinfo=timezone.utc)
SCHEMA = (
    "id string, placed_at timestamp, total decimal(10,2), lines array<struct<sku:string,qty:{qty}>>"
)


async def publish(service_builder: Builder) -> None:
    async with service_builder().build() as service:
        service.add_handler(Parcel, Recorder())
        # Publishing happens beside the consumer's start; an enqueue publishes before it writes.
        await service.enqueue(Parcel("seed", PLACED, Decimal(1), []), 3600)
        assert await service.cancel(Parcel, "seed")


async def test_a_column_that_does_not_fit_is_refused_before_anything_is_written(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, service_builder: Builder
) -> None:
    await publish(service_builder)
    wrong = spark.createDataFrame(
        [("p-1", PLACED, Decimal("10.50"), [("x", "two")])], SCHEMA.format(qty="string")
    )
    with pytest.raises(
        InvalidDataFrameError,
        match=r"column 'lines'.*lines\[\]\.qty is string, expected an integer",
    ):
        await off_loop(schedule_dataframe, wrong, Parcel, url=redis_url)
    missing = spark.createDataFrame([("p-1", PLACED)], "id string, placed_at timestamp")
    with pytest.raises(
        InvalidDataFrameError, match=r"requires the payload field\(s\) \['total', 'lines'\]"
    ):
        await off_loop(schedule_dataframe, missing, Parcel, url=redis_url)
    assert await redis_client.hlen(queue_key("Parcel", "events")) == 0


async def test_a_frame_that_fits_arrives_typed(
    spark: SparkSession, redis_url: str, service_builder: Builder
) -> None:
    await publish(service_builder)
    frame = spark.createDataFrame(
        [("p-1", PLACED, Decimal("10.50"), [("x", 2), ("y", 1)])], SCHEMA.format(qty="int")
    )
    result = await off_loop(schedule_dataframe, frame, Parcel, url=redis_url)
    assert result == ScheduleResult(scheduled=1)
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Parcel, handler)
        [delivery] = await handler.wait_for(1)
    assert delivery.event == Parcel("p-1", PLACED, Decimal("10.50"), [Line("x", 2), Line("y", 1)])
    assert isinstance(delivery.event, Parcel)
    assert str(delivery.event.total) == "10.50"


@dataclass
class Refund(Event):
    id: str
    order_id: int
    reason: str | None


async def test_a_null_in_a_field_that_is_not_optional_is_refused_before_anything_is_written(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, service_builder: Builder
) -> None:
    """`order_id: int` takes no null, which enqueue and SyncProducer refuse at the call: the
    frame is refused, naming the column and how many rows, and nothing is written; nulls
    in the Optional `reason` are fine."""
    async with service_builder().build() as service:
        service.add_handler(Refund, Recorder())
        await service.enqueue(Refund("seed", 1, None), 3600)
        assert await service.cancel(Refund, "seed")
    rows = [("r-1", 1, None), ("r-2", None, "late"), ("r-3", None, None)]
    frame = spark.createDataFrame(rows, "id string, order_id int, reason string")
    with pytest.raises(
        InvalidDataFrameError,
        match=r"nothing was scheduled: 2 rows have a null in payload column 'order_id', "
        r"whose field is not Optional",
    ):
        await off_loop(schedule_dataframe, frame, Refund, url=redis_url, delay_col=None)
    assert await redis_client.hlen(queue_key("Refund", "events")) == 0
    fine = spark.createDataFrame([("r-1", 1, None)], "id string, order_id int, reason string")
    assert await off_loop(schedule_dataframe, fine, Refund, url=redis_url) == ScheduleResult(1)
