"""streaq in the benchmark scenarios (see common.py).

Delayed tasks: `task.enqueue(*args).start(delay=timedelta)` runs streaq's `publish_task`
Function (one FCALL), which SETs the pickled task under its own key and ZADDs its id to the
priority's delayed sorted set, scored by the due time in ms on the producer's clock. Every
0.5 s (a constant in the worker's source, not a setting) the worker runs
`publish_delayed_tasks`, which moves every due id to the priority's Redis stream with the due
time as the message's `enqueue_time`; the worker reads the stream through a consumer group into
a buffer of `prefetch` (defaults to `concurrency`) + `concurrency` messages, and `concurrency`
consumers run the tasks. A delay of 0 still goes through the delayed sorted set (only a task
with no delay at all is added to the stream at once), so due-now tasks take the delayed path
as in every other system.

Settings: `concurrency=10` (streaq's default is 16) as everywhere, and `ttl=0` on the task, so
that no result is stored: the benchmark reads none, and aioqueue keeps none. Everything else
at its defaults.
"""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from contextvars import ContextVar
from datetime import timedelta
from importlib.metadata import version
from typing import Any

import anyio
from common import CONCURRENCY, JsonDict, Producer, Recorder, run_in_flight
from scenarios import main
from streaq import Worker
from streaq.types import StreamMessage, Streaq
from streaq.utils import now_ms

HANDLER_NAME = "handle"
# Loading a backlog: tasks per pipeline, and pipelines in flight.
BACKLOG_TASKS_PER_PIPELINE = 1000
BACKLOG_PIPELINES_IN_FLIGHT = 2
# streaq's one priority when none are configured.
PRIORITY = "normal"
# How long a stopping worker may take to settle the tasks it has taken (seconds).
SETTLE_TIMEOUT = 10.0

# The stream message's enqueue_time, which for a delayed task is its due time in ms (the score
# publish_delayed_tasks moved it with). The handler cannot see the message, so the worker below
# hands it over in a context variable: run_task runs the handler in the task that set it.
_due_ms: ContextVar[int] = ContextVar("_due_ms")


class DueTimeWorker(Worker[Any]):
    """A streaq Worker that lets its handler read the due time of the task it runs."""

    async def run_task(self, msg: StreamMessage) -> None:
        token = _due_ms.set(msg.enqueue_time)
        try:
            await super().run_task(msg)
        finally:
            _due_ms.reset(token)


def _worker(url: str, recorder: Recorder | None) -> DueTimeWorker:
    """A worker with the benchmark's task; producers use one as their client, unstarted."""
    worker = DueTimeWorker(redis_url=url, concurrency=CONCURRENCY, handle_signals=False)

    @worker.task(name=HANDLER_NAME, ttl=0)
    async def handle(index: int) -> None:
        if recorder is not None:
            recorder.saw(index)
            # Due time and time.time() are both this machine's clock (see README, "Clocks").
            recorder.record(time.time() - _due_ms.get() / 1000)

    return worker


class StreaqProducer:
    batch_size = 1

    def __init__(self, worker: DueTimeWorker) -> None:
        self._task = worker.registry[HANDLER_NAME]

    async def enqueue(self, indices: range, delay: float) -> None:
        for index in indices:
            await self._task.enqueue(index).start(delay=timedelta(seconds=delay))


class StreaqSystem:
    name = "streaq"
    # publish_delayed_tasks moves due tasks to the stream, from which workers read them.
    has_dispatch_step = True

    def versions(self) -> dict[str, str]:
        return {"streaq": version("streaq"), "coredis": version("coredis")}

    def variants(self) -> Sequence[str]:
        return []

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url)

    @asynccontextmanager
    async def _producer(self, url: str) -> AsyncIterator[Producer]:
        worker = _worker(url, None)
        async with worker:
            yield StreaqProducer(worker)

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        worker = _worker(url, recorder)
        async with anyio.create_task_group() as group:
            # run_async reports started once its scheduler, reader and consumers run.
            await group.start(worker.run_async)
            on_ready()
            await recorder.done.wait()
            # Stopping is a cancellation (streaq's own signal handler does the same), and one
            # that lands while a task's bookkeeping pipeline waits for its reply makes coredis
            # drop the connection under the others ("Connection lost!"). So wait until every
            # taken message is settled: `_count` is the worker's own tally of them, and
            # streaq offers no event to wait on instead of polling it.
            with anyio.move_on_after(SETTLE_TIMEOUT):
                while worker._count > 0:  # noqa: ASYNC110
                    await anyio.sleep(0.001)
            group.cancel_scope.cancel()

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """What publish_task writes for a delayed task (SET of the pickled task, ZADD of its id
        scored by due ms), pipelined 1,000 tasks at a time, with the data from streaq's own
        Task.serialize. Three times faster here than its enqueue_many, a pipeline of
        publish_task calls, which would take minutes for the large backlog."""
        worker = _worker(url, None)
        task = worker.registry[HANDLER_NAME]
        enqueue_time = now_ms()
        score = enqueue_time + round(delay * 1000)

        async def write(indices: range) -> None:
            tasks = [task.enqueue(index) for index in indices]
            payloads = [await each.serialize(enqueue_time) for each in tasks]
            async with worker.redis.pipeline(transaction=False) as pipe:
                for each, payload in zip(tasks, payloads, strict=True):
                    pipe.set(worker.task_key + each.id, payload)
                pipe.zadd(worker.queue_key + PRIORITY, {each.id: score for each in tasks})

        async with worker:
            queue = worker.queue_key + PRIORITY
            before = await worker.redis.zcard(queue)
            await run_in_flight(
                count, BACKLOG_TASKS_PER_PIPELINE, BACKLOG_PIPELINES_IN_FLIGHT, write
            )
            # The keys are written the way the Function writes them: prove they all landed.
            loaded = await worker.redis.zcard(queue) - before
        if loaded != count:
            raise RuntimeError(f"loaded {loaded} backlog tasks instead of {count}")

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        """One call of publish_delayed_tasks, which moves every due task to the stream."""
        worker = _worker(url, None)
        async with worker:
            redis = worker.redis
            stream = worker.stream_key + PRIORITY
            before = await redis.xlen(stream)
            started = time.perf_counter()
            await Streaq(redis).publish_delayed_tasks(worker.queue_key + PRIORITY, stream, now_ms())
            seconds = time.perf_counter() - started
            moved = await redis.xlen(stream) - before
        if moved < events:
            raise RuntimeError(f"streaq's publish_delayed_tasks moved {moved} of {events} tasks")
        return {"events_per_s": moved / seconds, "seconds": seconds, "calls": 1}


if __name__ == "__main__":
    main(StreaqSystem(), sys.argv[0])
