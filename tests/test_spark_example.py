"""examples/spark_reconcile.py does what it says, on the test session's Spark and server."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession

from aioqueue.spark import ScheduleResult
from tests.spark_fixtures import off_loop
from tests.support import queue_key

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = pytest.mark.timeout(180)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "spark_reconcile.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_reconcile", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_reconciliation_job_schedules_each_unpaid_order_once(
    spark: SparkSession, redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    example = load_example()
    first, second = await off_loop(example.run, spark, redis_url, tmp_path)
    assert first == ScheduleResult(scheduled=6, already_pending=0)
    assert second == ScheduleResult(scheduled=0, already_pending=6)
    events = await redis_client.hgetall(queue_key("PaymentCheck", "events"))
    assert sorted(events) == [f"payment-check-{1000 + n}".encode() for n in (1, 2, 4, 5, 7, 8)]
