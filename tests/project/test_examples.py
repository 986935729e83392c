"""Every program in examples/ runs and does what it says."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import anyio
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from tests.support.common import PaymentCheck

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def test_quickstart_handles_its_payment_check(
    redis_url: str, redis_client: redis.Redis, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    # A check left pending three hours ahead, as by an interrupted earlier run: the example
    # replaces it rather than waiting for it.
    leftover = service_builder().prefix("quickstart-example").enable_scheduling(False).build()
    async with leftover:
        await leftover.enqueue(PaymentCheck(id="p-1", order_id=41), timedelta(hours=3))
    result = await anyio.run_process(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        env={**os.environ, "AIOQUEUE_URL": redis_url},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines() == ["checking order 42 (trace abc)", "done"]
    # It used the server AIOQUEUE_URL names (the one the CLI reads), not one of its own.
    assert await redis_client.hget("quickstart-example:types", "PaymentCheck") is not None


def test_every_example_program_is_run_by_a_test() -> None:
    # Each program is run by its own test: this one here, the operating ones in
    # test_examples_ops.py, the Spark job in spark/test_spark_example.py.
    tests = "\n".join(path.read_text() for path in Path(__file__).parents[1].rglob("test_*.py"))
    programs = sorted(EXAMPLES.glob("*.py"))
    assert programs
    assert [
        p.name for p in programs if f"{p.stem}.py" not in tests and f"{p.stem}:" not in tests
    ] == []
