"""examples/spark_reconcile.py does what it says, on the test session's Spark and server, and
as a program that is a client of the session's Spark Connect server."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession

from aioqueue.spark import ScheduleResult
from tests.support.common import queue_key
from tests.support.spark_connect import ConnectServer
from tests.support.spark_fixtures import off_loop

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = pytest.mark.timeout(180)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_reconcile.py"
CHECKS = [f"payment-check-{1000 + n}".encode() for n in (1, 2, 4, 5, 7, 8)]


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
    assert sorted(events) == CHECKS


# Alone the program takes about 20 s. In the full suite it once ran past the module's 180 s,
# beside other test processes' Spark JVMs on two cores, and the timeout showed nothing of
# it: now it has a deadline of its own, which stops it and shows its output.
PROGRAM_DEADLINE = 300


@pytest.mark.timeout(PROGRAM_DEADLINE + 120)  # the Connect server's start comes first
async def test_the_program_runs_as_a_spark_connect_client(
    connect_server: ConnectServer, redis_url: str, redis_client: redis.Redis
) -> None:
    """With SPARK_REMOTE, PySpark's own builder makes the whole program a Connect client
    (its pyspark.sql.functions included), as in a notebook on a managed platform."""

    def run_program() -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, str(EXAMPLE)],
            env={**os.environ, "SPARK_REMOTE": connect_server.url, "AIOQUEUE_URL": redis_url},
            capture_output=True,
            timeout=PROGRAM_DEADLINE,
            check=False,
        )

    try:
        result = await anyio.to_thread.run_sync(run_program)
    except subprocess.TimeoutExpired as expired:
        output = (expired.stdout or b"").decode() + (expired.stderr or b"").decode()
        pytest.fail(f"the program ran past {PROGRAM_DEADLINE} s; its output:\n{output[-3000:]}")
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert result.stdout.decode().splitlines() == [
        "first run: 6 scheduled, 0 already pending",
        "second run: 0 scheduled, 6 already pending",
    ]
    events = await redis_client.hgetall(queue_key("PaymentCheck", "events"))
    assert sorted(events) == CHECKS
