"""`aioqueue worker FACTORY --processes N`: N services in N processes under one command,
stopped together, and none left behind when the command dies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from aioqueue._admin.stats import read_stats
from tests.cli.test_cli_worker import read_until, start_worker, wait_in_flight
from tests.support.common import wait_until
from tests.support.ops import run_cli
from tests.support.workers.slow_worker import Export

Builder = Callable[[], EventServiceBuilder]


@contextmanager
def worker_processes(
    redis_url: str, count: int, handler_seconds: float
) -> Iterator[subprocess.Popen[str]]:
    command = start_worker(
        redis_url, "--processes", str(count), env={"HANDLER_SECONDS": str(handler_seconds)}
    )
    try:
        yield command
    finally:
        if command.poll() is None:
            command.kill()
        command.communicate()


def child_pids(log: str) -> list[int]:
    """The pids of the children whose services started, from the log they share."""
    return [int(pid) for pid in re.findall(r"worker started: .* \(pid (\d+),", log)]


def has_exited(pid: int) -> bool:
    """Whether process `pid` has ended (a zombie waiting for its reaper has)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


async def enqueue(service_builder: Builder, *ids: str) -> None:
    producer = service_builder().prefix("jobs").enable_scheduling(False).build()
    async with producer:
        for event_id in ids:
            await producer.enqueue(Export(id=event_id), 0)


async def test_the_processes_share_the_queue_and_stop_together(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    """Each process's service handles one event at a time (parallelism 1), so two events
    in flight at once are two services; SIGTERM to the command lets both finish."""
    with worker_processes(redis_url, 2, handler_seconds=2) as command:
        log = await anyio.to_thread.run_sync(read_until, command, "started 2 worker processes")
        while len(child_pids(log)) < 2:
            log += await anyio.to_thread.run_sync(read_until, command, "worker started")
        await enqueue(service_builder, "e-1", "e-2")
        await wait_in_flight(redis_client, 2)
        command.send_signal(signal.SIGTERM)
        stdout, rest = await anyio.to_thread.run_sync(lambda: command.communicate(timeout=30))
    log += rest
    assert command.returncode == 0, log
    assert sorted(stdout.splitlines()) == [
        "finished e-1", "finished e-2", "started e-1", "started e-2",
    ]  # fmt: skip
    assert len(set(child_pids(log))) == 2
    # Each child stopped once, gracefully: the signal reached it once, through the parent.
    assert log.count("stop request from the parent: stopping") == 2
    assert "cancelling running handlers" not in log
    assert log.count("worker stopped\n") == 2
    assert "all worker processes stopped" in log
    [exports] = (await read_stats(redis_client, "jobs", ["Export"])).queues
    assert (exports.pending, exports.in_flight, exports.dead) == (0, 0, 0)


async def test_a_process_that_dies_stops_the_others_and_fails_the_command(
    redis_url: str,
) -> None:
    with worker_processes(redis_url, 3, handler_seconds=1) as command:
        log = ""
        while len(child_pids(log)) < 3:
            log += await anyio.to_thread.run_sync(read_until, command, "worker started")
        first, *others = child_pids(log)
        os.kill(first, signal.SIGKILL)
        _, rest = await anyio.to_thread.run_sync(lambda: command.communicate(timeout=30))
    log += rest
    assert command.returncode == 128 + signal.SIGKILL, log
    assert f"worker process {first} exited (code -9) while the others ran: stopping them" in log
    assert log.count("worker stopped\n") == 2
    assert all(has_exited(pid) for pid in others)


async def test_no_process_outlives_a_killed_command(redis_url: str) -> None:
    """Killed, the command cannot pass anything on: its children see their stop pipe close,
    and stop as on a first signal."""
    with worker_processes(redis_url, 2, handler_seconds=1) as command:
        log = ""
        while len(child_pids(log)) < 2:
            log += await anyio.to_thread.run_sync(read_until, command, "worker started")
        command.kill()

        async def children_exited() -> bool:
            return all(has_exited(pid) for pid in child_pids(log))

        await wait_until(children_exited, within=20)


async def test_a_process_count_below_one_is_refused(redis_url: str) -> None:
    result = await run_cli(
        "worker", "tests.support.workers.slow_worker:create_service", "--url", redis_url,
        "--processes", "0",
    )  # fmt: skip
    assert result.returncode == 2
    assert "--processes: must be a whole number >= 1, got '0'" in result.stderr
