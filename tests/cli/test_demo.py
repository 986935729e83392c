"""`python -m aioqueue demo`, the quick start's first command, runs end to end and exits 0;
on a server of the user's it leaves nothing behind."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import anyio
import pytest
import redis.asyncio as redis

from tests.support.common import wait_until


@pytest.mark.timeout(120)
def test_demo_delivers_everything_and_reports_lateness() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aioqueue", "demo", "--events", "400", "--spread", "1"],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # 400 events: ids 7 (mod 400) always fail -> 1 dead letter, the rest delivered.
    assert "delivered 399 ok" in result.stdout
    assert "1 dead letters" in result.stdout
    assert "payment provider rejected order 7" in result.stdout
    assert re.search(r"lateness \(server clock\): p50 [\d.]+ ms, p99 [\d.]+ ms, max", result.stdout)
    assert "handled 400/400" in result.stdout


async def test_demo_on_a_given_server_uses_a_prefix_of_its_own_and_removes_it(
    redis_url: str, redis_client: redis.Redis
) -> None:
    await redis_client.set("aioqueue:users-own-key", "kept")
    result = await anyio.run_process(
        [sys.executable, "-m", "aioqueue", "demo", "--url", redis_url,
         "--events", "200", "--spread", "0.5"],
        check=False,
    )  # fmt: skip
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    match = re.search(r"prefix (aioqueue-demo-[0-9a-f]{8}) \(deleted when the demo ends\)", out)
    assert match is not None, out
    assert "handled 200/200" in out
    assert re.search(rf"removed the demo's [1-9]\d* keys under {match[1]}", out), out
    # Nothing of the demo is left, and nothing else was touched.
    assert await redis_client.keys("*") == [b"aioqueue:users-own-key"]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
async def test_an_interrupted_demo_removes_its_keys_too(
    redis_url: str, redis_client: redis.Redis, stop: signal.Signals
) -> None:
    demo = await anyio.open_process(
        [sys.executable, "-m", "aioqueue", "demo", "--url", redis_url,
         "--events", "3000", "--spread", "60"],
    )  # fmt: skip
    async with demo:
        assert demo.stdout is not None
        assert demo.stderr is not None
        seen = b""
        with anyio.fail_after(30):
            async for chunk in demo.stdout:
                seen += chunk
                if b"payment checks over" in seen:  # printed as it starts to schedule
                    break

        async def scheduling() -> bool:
            return bool(await redis_client.dbsize())

        await wait_until(scheduling)
        demo.send_signal(stop)
        with anyio.move_on_after(30) as waiting:
            async for chunk in demo.stdout:
                seen += chunk
            await demo.wait()
        if waiting.cancelled_caught:
            demo.kill()
            errors = b"".join([chunk async for chunk in demo.stderr])
            pytest.fail(f"the demo still ran 30 s after {stop.name}: {seen!r} {errors!r}")
    assert demo.returncode == 128 + stop, seen
    assert b"removed the demo's" in seen, seen
    assert await redis_client.dbsize() == 0
