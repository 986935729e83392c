"""schedule_dataframe on a Spark standalone cluster (executors in their own JVMs and Python
workers), with one task's Python workers killed midway through its rows: the retry writes
nothing twice, a re-run is idempotent, the reader reads everything back, and with a
consumer handling events as they come due no event is delivered twice."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import redis as sync_redis
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from tests.support.common import PaymentCheck, Recorder, queue_key, wait_until
from tests.support.spark_standalone import SparkStandalone, kill_executor_python_workers

# Starting the cluster and two drivers takes most of it.
pytestmark = pytest.mark.timeout(300)

Builder = Callable[[], EventServiceBuilder]
JOB = Path(__file__).resolve().parents[1] / "support" / "workers" / "spark_job.py"
# 4 tasks run one at a time, each writing a quarter of the rows: a kill at an eighth lands
# inside a task (the first, unless the kill is slow to land); the job reports the failure.
ROWS = 40_000
SEQUENCE = queue_key("PaymentCheck", "sequence")


async def run_job(
    cluster: SparkStandalone, redis_url: str, scenario: str
) -> tuple[dict[str, object], int]:
    """Runs the job; once an eighth of the rows are written, kills the executor's Python
    workers, failing the first task midway. Returns the job's report and how many events
    were written when the kill was done."""
    written_at_kill = -1
    job_ended = threading.Event()

    def kill_midway() -> None:
        """Watches and kills from a thread with a client of its own: the event loop may be
        busy with the consumer's handlers, and a kill it delayed could land after the task.
        Gives up when the job has ended, so that a job that failed shows its own error."""
        nonlocal written_at_kill
        watcher = sync_redis.Redis.from_url(redis_url)
        try:
            deadline = time.monotonic() + 180
            while int(watcher.get(SEQUENCE) or 0) < ROWS // 8:
                if job_ended.is_set():
                    return
                assert time.monotonic() < deadline, "the job wrote nothing for three minutes"
                time.sleep(0.002)
            kill_executor_python_workers()
            written_at_kill = int(watcher.get(SEQUENCE) or 0)
        finally:
            watcher.close()

    async with anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, kill_midway)
        try:
            result = await anyio.run_process(
                [sys.executable, str(JOB), cluster.master_url, redis_url, scenario, str(ROWS)],
                env=cluster.environment,
                check=False,
            )
        finally:
            job_ended.set()
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    report = json.loads(result.stdout.decode().strip().splitlines()[-1])
    assert isinstance(report, dict)
    return report, written_at_kill


def assert_killed_midway(report: dict[str, object], written_at_kill: int) -> None:
    """The kill came after the job had written events and before it had written them all,
    and it failed a task (not only an idle worker between two tasks)."""
    assert ROWS // 8 <= written_at_kill < ROWS
    failed_tasks = report["failed_tasks"]
    assert isinstance(failed_tasks, int)
    assert failed_tasks >= 1


async def test_a_retried_task_and_a_rerun_write_each_event_once(
    spark_standalone: SparkStandalone, redis_url: str, redis_client: redis.Redis
) -> None:
    report, written_at_kill = await run_job(spark_standalone, redis_url, "pending")
    # A task failed after events were written: what its retry must not write again.
    assert_killed_midway(report, written_at_kill)
    expected = [f"p-{n:05d}" for n in range(ROWS)]
    # The failed attempt's rows count once, as scheduled: the retry found them in the run's
    # record. The second run finds every id pending.
    assert report["first"] == [ROWS, 0]
    assert report["again"] == [0, ROWS]
    assert report["read"] == expected
    # A successful run forgets its record of what it wrote.
    assert [key async for key in redis_client.scan_iter(match="*:runs:*")] == []
    stored = await redis_client.hkeys(queue_key("PaymentCheck", "events"))
    assert sorted(key.decode() for key in stored if isinstance(key, bytes)) == expected


async def test_a_retried_task_never_redelivers_what_a_handler_finished(
    spark_standalone: SparkStandalone,
    redis_url: str,
    redis_client: redis.Redis,
    service_builder: Builder,
) -> None:
    handler = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, handler, parallelism=32)
        report, written_at_kill = await run_job(spark_standalone, redis_url, "due-now")

        async def drained() -> bool:
            return await redis_client.hlen(queue_key("PaymentCheck", "events")) == 0

        await wait_until(drained, within=90)
        await handler.wait_for(ROWS, within=90)
    assert report["first"] == [ROWS, 0]
    assert_killed_midway(report, written_at_kill)
    twice = [event_id for event_id, count in Counter(handler.ids).items() if count > 1]
    assert twice == []
    assert sorted(handler.ids) == [f"p-{n:05d}" for n in range(ROWS)]
