"""BullMQ's Python port (PyPI `bullmq`) in the benchmark scenarios (see common.py).

Delayed jobs: `Queue.add(name, data, {"delay": ms})` runs `addDelayedJob`, a Lua script that
writes the job hash (`bull:<queue>:<id>`, the id from INCR), adds the id to the `delayed`
sorted set scored by due time x 4096 (+ a counter), appends a `delayed` entry to the events
stream and moves the queue's `marker` to the earliest due time. A delay of 0 would skip all
that and push the job onto the wait list, so due-now jobs are given a delay of 1 ms: they take
the delayed path, as in every other system. The worker's `moveToActive` script first promotes
due delayed jobs (up to 1,000 per call) to the wait list, then takes one job; when there is
none it blocks in BZPOPMIN on the marker until the next due time. Unlike BullMQ on Node, the
port fetches the next job with a separate `moveToActive` call after `moveToFinished`.

Settings, from the installed source (bullmq 3.4, `worker.py`, `redis_connection.py`):

- `concurrency: 10` (the default is 1);
- jobs are added with `removeOnComplete: True` (the queue's `defaultJobOptions`), so that a
  finished job is deleted instead of kept in the `completed` set: the benchmark reads no
  results, and aioqueue keeps none;
- both sides use a redis-py client with a connection pool (`connection=` accepts a client).
  Given a URL or options, the port makes clients with `single_connection_client=True`,
  whose one connection takes one command at a time: 32 enqueues in flight, or 10 handler
  slots finishing jobs, would wait for each other's round trips;
- the worker is made with `autorun: False` and started only after both of its connections
  asked the server its version: until then the port assumes a server that cannot block for a
  fraction of a second and rounds every blocking wait up to whole seconds (PITFALLS.md).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import version
from typing import Any

import redis.asyncio
from bullmq import Job, Queue, Worker
from common import CONCURRENCY, JsonDict, Producer, Recorder, redis_py_version, run_in_flight
from scenarios import main

QUEUE_NAME = "bench"
JOB_NAME = "handle"
JOB_OPTIONS = {"removeOnComplete": True}
# Loading a backlog: jobs per addBulk call (one MULTI of addJob scripts), and calls in flight.
BACKLOG_JOBS_PER_CALL = 1000
BACKLOG_CALLS_IN_FLIGHT = 2
# How long a stopping worker may take to finish the jobs it has taken (seconds).
CLOSE_TIMEOUT = 10.0


def delay_ms(delay: float) -> int:
    """BullMQ's delay for one due `delay` s from now: at least 1 ms, or it is not delayed."""
    return max(1, round(delay * 1000))


def _client(url: str) -> redis.asyncio.Redis:
    # The port decodes replies itself only when the client does (it sets decode_responses on
    # the clients it makes).
    return redis.asyncio.Redis.from_url(url, decode_responses=True)


@asynccontextmanager
async def _queue(url: str) -> AsyncIterator[Queue]:
    queue = Queue(QUEUE_NAME, {"connection": _client(url), "defaultJobOptions": JOB_OPTIONS})
    try:
        yield queue
    finally:
        # Closes the client it was given.
        await queue.close()


class BullmqProducer:
    batch_size = 1

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    async def enqueue(self, indices: range, delay: float) -> None:
        for index in indices:
            await self._queue.add(JOB_NAME, {"index": index}, {"delay": delay_ms(delay)})


class BullmqSystem:
    name = "bullmq"
    # Due jobs are promoted inside moveToActive, the call that takes a job: no step apart.
    has_dispatch_step = False

    def versions(self) -> dict[str, str]:
        return {"bullmq": version("bullmq"), "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return []

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url)

    @asynccontextmanager
    async def _producer(self, url: str) -> AsyncIterator[Producer]:
        async with _queue(url) as queue:
            yield BullmqProducer(queue)

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        async def process(job: Job, token: str) -> None:
            recorder.saw(job.data["index"])
            # timestamp + opts["delay"] is the due time the producer computed, in ms on this
            # machine's clock (see README, "Clocks"); job.delay will not do, as promoting a
            # due job sets it to 0.
            recorder.record(time.time() - (job.timestamp + job.opts["delay"]) / 1000)

        options: Any = {"connection": _client(url), "concurrency": CONCURRENCY, "autorun": False}
        worker = Worker(QUEUE_NAME, process, options)
        # The version probe that lets the worker block for fractions of a second.
        assert worker.redisConnection is not None
        assert worker.blockingRedisConnection is not None
        await worker.redisConnection.getRedisVersion()
        await worker.blockingRedisConnection.getRedisVersion()
        running = asyncio.ensure_future(worker.run())
        try:
            await asyncio.sleep(0)
            if running.done():
                running.result()
                raise RuntimeError("the bullmq worker stopped by itself")
            on_ready()
            waiter = asyncio.ensure_future(recorder.done.wait())
            await asyncio.wait([waiter, running], return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                waiter.cancel()
                running.result()
                raise RuntimeError("the bullmq worker stopped by itself")
        finally:
            # Not asyncio.wait_for: the port's close() shields its teardown and ignores
            # cancellation until the teardown is over, which waits for the worker's blocking
            # fetch, so a timeout that cancels it never returns (the idle scenario, 100,000
            # jobs hours ahead, timed out in every run). A close that is not over in time is
            # forced, which cancels the fetch and so ends the first close too.
            closing = asyncio.ensure_future(worker.close())
            await asyncio.wait([closing], timeout=CLOSE_TIMEOUT)
            if not closing.done():
                await worker.close(force=True)
            await asyncio.gather(closing, running, return_exceptions=True)

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """The port's own batch call, addBulk: one MULTI of addJob script calls."""
        async with _queue(url) as queue:
            before = await queue.getJobCountByTypes("delayed")

            async def write(indices: range) -> None:
                opts = {"delay": delay_ms(delay)}
                await queue.addBulk(
                    [
                        {"name": JOB_NAME, "data": {"index": index}, "opts": opts}
                        for index in indices
                    ]
                )

            await run_in_flight(count, BACKLOG_JOBS_PER_CALL, BACKLOG_CALLS_IN_FLIGHT, write)
            loaded = await queue.getJobCountByTypes("delayed") - before
        if loaded != count:
            raise RuntimeError(f"loaded {loaded} backlog jobs instead of {count}")

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        raise NotImplementedError("bullmq has no dispatch step")


if __name__ == "__main__":
    main(BullmqSystem(), sys.argv[0])
