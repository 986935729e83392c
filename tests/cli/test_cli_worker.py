"""`aioqueue worker module:factory`: runs the user's service, stops gracefully on signals."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import anyio
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from aioqueue._admin.stats import read_stats
from aioqueue.testing import free_port
from tests.support.common import wait_until
from tests.support.ops import ROOT, run_cli
from tests.support.workers.slow_worker import Export

Builder = Callable[[], EventServiceBuilder]


def start_worker(
    redis_url: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aioqueue",
            "worker",
            "tests.support.workers.slow_worker:create_service",
            "--url",
            redis_url,
            "--prefix",
            "jobs",
            *extra,
        ],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_until(worker: subprocess.Popen[str], text: str) -> str:
    """Reads the worker's stderr up to the line that contains `text`; returns what it read."""
    assert worker.stderr is not None
    seen = ""
    while text not in seen:
        line = worker.stderr.readline()
        if not line:
            raise AssertionError(f"the worker exited before logging {text!r}: {seen}")
        seen += line
    return seen


async def wait_in_flight(client: redis.Redis, count: int) -> None:
    async def running() -> bool:
        queues = (await read_stats(client, "jobs", ["Export"])).queues
        return queues[0].in_flight == count

    await wait_until(running, within=20)


async def test_sigterm_lets_the_running_handler_finish(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    worker = start_worker(redis_url)
    try:
        producer = service_builder().prefix("jobs").enable_scheduling(False).build()
        async with producer:
            await producer.enqueue(Export(id="e-1"), 0)
        await wait_in_flight(redis_client, 1)
        worker.send_signal(signal.SIGTERM)
        stdout, stderr = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=20))
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert stdout.splitlines() == ["started e-1", "finished e-1"]
    assert "SIGTERM: stopping; running handlers get up to 5 s" in stderr
    assert "worker stopped" in stderr
    # Finished and acknowledged before the process left: nothing pending, nothing in flight.
    [exports] = (await read_stats(redis_client, "jobs", ["Export"])).queues
    assert (exports.pending, exports.in_flight, exports.dead) == (0, 0, 0)


async def test_a_second_signal_forces_the_stop(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    worker = start_worker(redis_url, env={"HANDLER_SECONDS": "60"})
    try:
        producer = service_builder().prefix("jobs").enable_scheduling(False).build()
        async with producer:
            await producer.enqueue(Export(id="e-2"), 0)
        await wait_in_flight(redis_client, 1)
        worker.send_signal(signal.SIGINT)
        with anyio.fail_after(10):
            first = await anyio.to_thread.run_sync(read_until, worker, "stopping")
        worker.send_signal(signal.SIGINT)
        stdout, rest = await anyio.to_thread.run_sync(lambda: worker.communicate(timeout=20))
        stderr = first + rest
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, stderr
    assert stdout.splitlines() == ["started e-2"]
    assert "SIGINT again: cancelling running handlers now" in stderr
    assert "worker stopped (forced)" in stderr
    # Not acknowledged: the event stays pending and is delivered again after its lease.
    [exports] = (await read_stats(redis_client, "jobs", ["Export"])).queues
    assert exports.pending == 1


async def test_a_factory_that_names_nothing_is_a_usage_error(
    redis_url: str, tmp_path: Path
) -> None:
    """Exit 2, as docs/operating/cli.md promises for bad usage: the command line names a
    module or callable that is not there, which no retry or restart can fix."""
    (tmp_path / "jobs.py").write_text("RETRIES = 3\n")
    app_dir = ("--app-dir", str(tmp_path))
    cases = {
        "no_colon": "FACTORY must look like module:callable, got 'no_colon'",
        "tests.nowhere:create": "cannot import 'tests.nowhere': No module named 'tests.nowhere'",
        "nowhere.jobs:create": "cannot import 'nowhere.jobs': No module named 'nowhere'",
        "jobs:create_service": "'jobs' has no attribute 'create_service'",
        "jobs:RETRIES": "jobs:RETRIES is not callable",
    }
    for factory, message in cases.items():
        result = await run_cli("worker", factory, *app_dir, "--url", redis_url)
        assert result.returncode == 2, (factory, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith(f"aioqueue worker: {message}"), line


async def test_a_factory_that_fails_is_a_failure(redis_url: str, tmp_path: Path) -> None:
    """Exit 1: the module is there but its own import fails, or the factory returns
    something else than a service; the application is broken, not the command line."""
    (tmp_path / "broken.py").write_text("import a_dependency_nobody_installed\n")
    broken = await run_cli("worker", "broken:create", "--app-dir", str(tmp_path))
    assert broken.returncode == 1, broken.stderr
    assert broken.stderr == (
        "aioqueue worker: cannot import 'broken': No module named 'a_dependency_nobody_installed'\n"
    )
    wrong = await run_cli(
        "worker", "tests.support.workers.slow_worker:not_a_service", "--url", redis_url
    )
    assert wrong.returncode == 1, wrong.stderr
    assert "the factory returned str, not an EventService" in wrong.stderr


async def test_an_unreachable_url_fails_at_start_in_one_line() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    # Before the check, the worker started anyway and retried that server for ever.
    with anyio.fail_after(30):
        result = await run_cli(
            "worker", "tests.support.workers.slow_worker:create_service", "--url", url
        )
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    assert line.startswith(f"aioqueue worker: cannot reach {url}: ")


async def test_the_worker_runs_on_the_event_loop_it_is_asked_for(redis_url: str) -> None:
    """--loop auto takes uvloop where it is installed (the test extra installs it), --loop
    asyncio asyncio's own loop; either way the worker handles and stops as usual."""
    for asked, expected in (("auto", "uvloop"), ("asyncio", "asyncio"), ("uvloop", "uvloop")):
        worker = start_worker(redis_url, "--loop", asked)
        try:
            started = await anyio.to_thread.run_sync(read_until, worker, "worker started")
            worker.send_signal(signal.SIGTERM)
            _, stderr = await anyio.to_thread.run_sync(
                functools.partial(worker.communicate, timeout=20)
            )
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
        assert f"event loop {expected}, shutdown grace 5 s)" in started, (asked, started)
        assert worker.returncode == 0, stderr
