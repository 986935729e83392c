"""arq in the benchmark scenarios (see common.py).

Delayed jobs: `ArqRedis.enqueue_job(name, *args, _defer_by=seconds)` puts the job id in the
queue's sorted set scored by its due time in ms (the producer's clock), next to a pickled job
key. The worker polls that sorted set every `poll_delay` (0.5 s by default) and starts at most
`max_jobs` (10) jobs at once; `poll_delay=0` is the variant PITFALLS.md recommends measuring.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import version
from typing import Any

from arq import Worker, create_pool, func
from arq.connections import ArqRedis, RedisSettings
from arq.constants import default_queue_name, expires_extra_ms, job_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms
from common import CONCURRENCY, JsonDict, Producer, Recorder, redis_py_version, run_in_flight
from scenarios import main

POLL_DELAY_0 = "poll_delay=0"
HANDLER_NAME = "handle"
# Loading a backlog: jobs per pipeline, and pipelines in flight.
BACKLOG_JOBS_PER_PIPELINE = 1000
BACKLOG_PIPELINES_IN_FLIGHT = 2


class ArqProducer:
    batch_size = 1

    def __init__(self, pool: ArqRedis) -> None:
        self._pool = pool

    async def enqueue(self, indices: range, delay: float) -> None:
        for index in indices:
            # No _defer_by for a due-now job: arq then scores it with the enqueue time.
            await self._pool.enqueue_job(HANDLER_NAME, index, _defer_by=delay or None)


class ArqSystem:
    name = "arq"
    # The poller claims due jobs straight from the sorted set.
    has_dispatch_step = False

    def versions(self) -> dict[str, str]:
        return {"arq": version("arq"), "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return [POLL_DELAY_0]

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url)

    @asynccontextmanager
    async def _producer(self, url: str) -> AsyncIterator[Producer]:
        pool = await create_pool(RedisSettings.from_dsn(url))
        try:
            yield ArqProducer(pool)
        finally:
            await pool.aclose()

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        async def handle(ctx: dict[str, Any], index: int) -> None:
            # ctx["score"] is the job's due time in ms on the producer's clock, the same
            # machine's clock as ours (see README, "Clocks").
            recorder.saw(index)
            recorder.record(time.time() - ctx["score"] / 1000)

        started = asyncio.Event()

        async def on_startup(ctx: dict[str, Any]) -> None:
            started.set()

        pool = await create_pool(RedisSettings.from_dsn(url))
        worker = Worker(
            functions=[func(handle, name=HANDLER_NAME)],
            redis_pool=pool,
            handle_signals=False,
            max_jobs=CONCURRENCY,
            on_startup=on_startup,
            **({"poll_delay": 0} if variant == POLL_DELAY_0 else {}),
        )
        running = asyncio.ensure_future(worker.async_run())
        try:
            await _first_of(started.wait(), running)
            on_ready()
            await _first_of(recorder.done.wait(), running)
        finally:
            # Stop polling, let the last jobs record their results, then close: close() alone
            # cancels running jobs and re-raises their CancelledError.
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await asyncio.gather(*worker.tasks.values(), return_exceptions=True)
            await worker.close()

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """What enqueue_job writes (PSETEX of the pickled job, ZADD of its id), pipelined and
        without its per-job WATCH/EXISTS uniqueness check (the ids are fresh uuids)."""
        pool = await create_pool(RedisSettings.from_dsn(url))
        enqueue_ms = timestamp_ms()
        score = enqueue_ms + round(delay * 1000)
        expires_ms = score - enqueue_ms + expires_extra_ms

        async def write(indices: range) -> None:
            async with pool.pipeline(transaction=False) as pipe:
                scores = {}
                for index in indices:
                    job_id = uuid.uuid4().hex
                    job = serialize_job(HANDLER_NAME, (index,), {}, None, enqueue_ms)
                    pipe.psetex(job_key_prefix + job_id, expires_ms, job)
                    scores[job_id] = score
                pipe.zadd(default_queue_name, scores)
                await pipe.execute()

        try:
            await run_in_flight(
                count, BACKLOG_JOBS_PER_PIPELINE, BACKLOG_PIPELINES_IN_FLIGHT, write
            )
        finally:
            await pool.aclose()

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        raise NotImplementedError("arq has no dispatch step")


async def _first_of(wanted: Any, running: asyncio.Future[None]) -> None:
    """Awaits `wanted`, or raises if the worker stops first."""
    waiter = asyncio.ensure_future(wanted)
    try:
        await asyncio.wait([waiter, running], return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            running.result()
            raise RuntimeError("the arq worker stopped by itself")
    finally:
        waiter.cancel()


if __name__ == "__main__":
    main(ArqSystem(), sys.argv[0])
