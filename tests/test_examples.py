"""Every program in examples/ runs and does what it says."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import redis.asyncio as redis

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


async def test_quickstart_handles_its_payment_check(
    redis_url: str, redis_client: redis.Redis
) -> None:
    result = await anyio.run_process(
        [sys.executable, str(EXAMPLES / "quickstart.py")],
        env={**os.environ, "AIOQUEUE_URL": redis_url},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines() == ["checking order 42 (trace abc)", "done"]
    # It used the server AIOQUEUE_URL names (the one the CLI reads), not one of its own.
    assert await redis_client.hget("aioqueue:types", "PaymentCheck") is not None
