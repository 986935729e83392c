"""Spark against a Redis Cluster URL, with a partitioned type: written, read and delivered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from pyspark.sql import SparkSession

from aioqueue import EventServiceBuilder
from aioqueue.spark import ScheduleResult, read_pending, schedule_dataframe
from tests.support.common import PaymentCheck, Recorder
from tests.support.spark_fixtures import off_loop

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = [pytest.mark.timeout(180), pytest.mark.backends("cluster")]


async def test_a_partitioned_type_round_trips_through_a_cluster(
    spark: SparkSession, redis_url: str, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """Rows land in all 8 partitions' slots, read back whole, and are delivered once each."""
    assert redis_url.startswith("redis+cluster://")
    orders = spark.createDataFrame(
        [(f"p-{n}", n, 0) for n in range(300)], "id string, order_id int, delay_s int"
    )
    options = {"url": redis_url, "delay_col": "delay_s", "partitions": 8}
    first = await off_loop(schedule_dataframe, orders, PaymentCheck, **options)
    again = await off_loop(schedule_dataframe, orders, PaymentCheck, **options)
    assert first == ScheduleResult(scheduled=300, already_pending=0)
    assert again == ScheduleResult(scheduled=0, already_pending=300)

    pending = await off_loop(lambda: read_pending(spark, redis_url, "PaymentCheck").collect())
    assert sorted(row["id"] for row in pending) == sorted(f"p-{n}" for n in range(300))

    handler = Recorder()
    async with service_builder().partitions(PaymentCheck, 8).build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=16)
        await handler.wait_for(300)
    assert Counter(handler.ids) == Counter(f"p-{n}" for n in range(300))
