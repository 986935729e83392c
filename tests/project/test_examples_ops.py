"""The operating examples run and do what they say: FastAPI app, worker module, retries."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import anyio
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder
from aioqueue._admin.stats import read_stats
from aioqueue.testing import free_port
from tests.support.common import wait_until
from tests.support.ops import ROOT, api_client, wait_for_http

EXAMPLES = ROOT / "examples"
Builder = Callable[[], EventServiceBuilder]


def start(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen[str]:
    """`python ARGS` from the repository root, with stdout and stderr captured as text."""
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def test_fastapi_app_schedules_from_its_endpoint(
    redis_url: str, redis_client: redis.Redis
) -> None:
    port = free_port()
    app = start(
        "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(EXAMPLES), "--port", str(port),
        "--log-level", "warning", env={"AIOQUEUE_URL": redis_url},
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        await anyio.to_thread.run_sync(wait_for_http, f"{base}/reminders/sent", app)
        async with api_client(base) as http:
            scheduled = await http.post("/orders/o-1/reminder", params={"delay": 0.2})
            assert scheduled.status_code == 202
            assert scheduled.json() == {"order_id": "o-1", "scheduled": True}
            assert (await http.post("/orders/o-1/reminder")).json()["scheduled"] is False

            async def sent() -> bool:
                return bool((await http.get("/reminders/sent")).json() == ["o-1"])

            await wait_until(sent)
    finally:
        app.terminate()
        _, output = await anyio.to_thread.run_sync(lambda: app.communicate(timeout=20))
    # uvicorn re-raises the SIGTERM it handled once the lifespan has shut the service down.
    assert app.returncode in (0, -signal.SIGTERM), output
    assert "Traceback" not in output


@dataclass
class Reminder(Event):
    """The same wire name and fields as examples/worker.py's class: a producer elsewhere."""

    id: str
    user: str
    text: str


async def test_worker_module_runs_under_aioqueue_worker(
    redis_url: str, redis_client: redis.Redis, service_builder: Builder
) -> None:
    worker = start(
        "-m", "aioqueue", "worker", "worker:create_service", "--app-dir", str(EXAMPLES),
        "--url", redis_url,
    )  # fmt: skip
    try:
        producer = service_builder().enable_scheduling(False).build()
        async with producer:
            await producer.enqueue(Reminder(id="r-1", user="ada", text="renew"), 0.1)

        async def handled() -> bool:
            [reminders] = (await read_stats(redis_client, "aioqueue", ["Reminder"])).queues
            return reminders.pending == 0

        await wait_until(handled, within=20)
        worker.send_signal(signal.SIGTERM)
        stdout, stderr = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=20))
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert stdout.splitlines() == ["reminder r-1 for ada: renew"]
    assert "worker stopped" in stderr


async def test_flaky_handler_retries_with_backoff(
    redis_url: str, redis_client: redis.Redis
) -> None:
    result = await anyio.run_process(
        [sys.executable, str(EXAMPLES / "flaky_retries.py")],
        env={**os.environ, "AIOQUEUE_URL": redis_url},
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    order_1 = [line.split(" at ")[0] for line in lines if line.startswith("order 1")]
    assert order_1 == [
        "order 1: attempt 1 failed",
        "order 1: attempt 2 failed",
        "order 1: charged on attempt 3",
    ]
    assert [line.split(" at ")[0] for line in lines if line.startswith("order 2")] == [
        f"order 2: attempt {n} failed" for n in range(1, 5)
    ]
    assert lines[-1] == (
        "dead letter charge-2 after 4 attempts: "
        "attempt 4 raised PaymentProviderDown: provider unavailable for order 2"
    )
    # On the server AIOQUEUE_URL names, not on an embedded one of its own.
    assert await redis_client.hexists("flaky-example:{Charge}:dead_letters", "charge-2")
    # The backoff doubled: attempts of order 2 at about 0, 0.2, 0.6 and 1.4 s.
    times = [
        float(line.rsplit(" at ", 1)[1].rstrip(" s"))
        for line in lines
        if line.startswith("order 2")
    ]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert gaps[0] < gaps[1] < gaps[2]
