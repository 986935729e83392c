"""saq in the benchmark scenarios (see common.py).

Delayed jobs: `Queue.enqueue(name, scheduled=epoch_seconds, **kwargs)` stores the job under its
own key and adds it to the queue's `incomplete` sorted set scored by `scheduled`. The worker's
`schedule` timer (1 s by default; it must be a whole number >= 1, see PITFALLS.md) runs a Lua
script that moves every due job to the `queued` list, from which `concurrency` (10) process
tasks take jobs with BLMOVE. `scheduled` is documented as epoch seconds; a float is passed so
that the due time is not rounded to the second.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import version
from typing import Any

from common import CONCURRENCY, JsonDict, Producer, Recorder, redis_py_version, run_in_flight
from saq import Job, Queue, Status, Worker
from saq.utils import now
from scenarios import main

HANDLER_NAME = "handle"
# Loading a backlog: jobs per pipeline, and pipelines in flight.
BACKLOG_JOBS_PER_PIPELINE = 1000
BACKLOG_PIPELINES_IN_FLIGHT = 2


class SaqProducer:
    batch_size = 1

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    async def enqueue(self, indices: range, delay: float) -> None:
        for index in indices:
            # A due-now job goes through the same sorted set (scheduled=0 would skip it).
            await self._queue.enqueue(HANDLER_NAME, scheduled=time.time() + delay, index=index)


@asynccontextmanager
async def _connected_queue(url: str) -> AsyncIterator[Queue]:
    queue = Queue.from_url(url)
    await queue.connect()
    try:
        yield queue
    finally:
        await queue.disconnect()


class SaqSystem:
    name = "saq"
    # The schedule timer moves due jobs to the queued list, from which workers take them.
    has_dispatch_step = True

    def versions(self) -> dict[str, str]:
        return {"saq": version("saq"), "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return []

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url)

    @asynccontextmanager
    async def _producer(self, url: str) -> AsyncIterator[Producer]:
        async with _connected_queue(url) as queue:
            yield SaqProducer(queue)

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        async def handle(ctx: dict[str, Any], *, index: int) -> None:
            # job.scheduled is the due time the producer gave, on this machine's clock.
            recorder.saw(index)
            recorder.record(time.time() - ctx["job"].scheduled)

        started = asyncio.Event()

        async def startup(ctx: dict[str, Any]) -> None:
            started.set()

        async with _connected_queue(url) as queue:
            worker = Worker(
                queue,
                functions=[(HANDLER_NAME, handle)],
                concurrency=CONCURRENCY,
                startup=startup,
            )
            running = asyncio.ensure_future(worker.start())
            try:
                await asyncio.wait(
                    [asyncio.ensure_future(started.wait()), running],
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if running.done():
                    running.result()
                    raise RuntimeError("the saq worker stopped by itself")
                on_ready()
                await recorder.done.wait()
            finally:
                await worker.stop()
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """What Queue.enqueue writes (SET of the JSON job, ZADD to `incomplete`), pipelined
        instead of one enqueue script call per job."""
        async with _connected_queue(url) as queue:
            incomplete = queue.namespace("incomplete")
            scheduled = time.time() + delay

            async def write(indices: range) -> None:
                async with queue.redis.pipeline(transaction=False) as pipe:
                    scores = {}
                    for index in indices:
                        # The fields Queue.enqueue sets before it writes a job.
                        job = Job(
                            HANDLER_NAME,
                            kwargs={"index": index},
                            queue=queue,
                            scheduled=scheduled,  # type: ignore[arg-type]
                            queued=now(),
                            status=Status.QUEUED,
                        )
                        pipe.set(job.id, queue.serialize(job))
                        scores[job.id] = scheduled
                    pipe.zadd(incomplete, scores)
                    await pipe.execute()

            await run_in_flight(
                count, BACKLOG_JOBS_PER_PIPELINE, BACKLOG_PIPELINES_IN_FLIGHT, write
            )

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        """One run of the schedule script, which moves every due job to the queued list."""
        async with _connected_queue(url) as queue:
            # The script runs at most once per second (a lock key with a TTL); the worker of
            # the previous phase may have just taken it.
            await queue.redis.delete(queue.namespace("schedule"))
            started = time.perf_counter()
            moved = await queue.schedule()
            seconds = time.perf_counter() - started
        if len(moved) < events:
            raise RuntimeError(f"saq's schedule moved {len(moved)} of {events} due jobs")
        return {"events_per_s": len(moved) / seconds, "seconds": seconds, "calls": 1}


if __name__ == "__main__":
    main(SaqSystem(), sys.argv[0])
