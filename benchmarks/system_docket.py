"""docket (PyPI `pydocket`) in the benchmark scenarios (see common.py).

Delayed tasks: `docket.add(task, when=datetime)(*args)` runs docket's `schedule` Lua script
once: for a `when` in the future it `HSET`s the task's message (function name, cloudpickled
args and kwargs, `when`, attempt, generation) into a hash of its own (`docket:<key>`),
`ZADD`s the key to `docket:queue` scored by `when` (epoch seconds, producer's clock), writes
the task's run record (`docket:runs:<key>`: state, when, function, args) and PUBLISHes its
state; a `when` already past skips the sorted set and `XADD`s to the stream at once, so
due-now tasks here are given `when` = now + 1 ms to take the delayed path, as every other
system's do. A worker's scheduler loop runs `stream_due_tasks` every `scheduling_resolution`
(250 ms), which moves every due key from the sorted set to the `docket:stream` stream (HGETALL,
XADD, DEL, HSET of the run's state, a PUBLISH per task). Its poll loop reads the stream with
`XREADGROUP ... BLOCK minimum_check_interval COUNT <free slots>`, and while all
`concurrency` slots are busy it sleeps `minimum_check_interval` (PITFALLS.md); each task is
claimed (a script: supersession check, state running) and finished (a script: state
completed, XACK, XDEL, the run record kept `execution_ttl`, 15 min) in calls of their own.

Variants, with concurrency 10 in both: the documented worker settings (the `docket worker`
command's defaults: `minimum_check_interval` 100 ms, `scheduling_resolution` 250 ms), and
CHECK_1MS, the fastest sensible ones: both intervals 1 ms (the smallest that is not 0: a check
interval under 1 ms is a BLOCK of 0 ms, which waits forever, PITFALLS.md) and
`execution_ttl=0`, so that a finished task's run record is deleted rather than kept.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta, timezone
from importlib.metadata import version

from common import (
    CONCURRENCY,
    JsonDict,
    Producer,
    Recorder,
    redis_py_version,
    run_in_flight,
)
from docket import CurrentExecution, Docket, Execution, Worker
from docket.worker import _stream_due_tasks
from scenarios import main

CHECK_1MS = "check_interval=1ms"
DOCUMENTED_CHECK = timedelta(milliseconds=100)
DOCUMENTED_RESOLUTION = timedelta(milliseconds=250)
FASTEST = timedelta(milliseconds=1)
# A `when` at or before now skips the sorted set: due-now tasks are this far ahead.
DUE_NOW = timedelta(milliseconds=1)
# Loading a backlog: tasks per add_many call (its own pipelining chunk), and calls in flight.
BACKLOG_TASKS_PER_CALL = 1000
BACKLOG_CALLS_IN_FLIGHT = 2
# How often a starting worker is looked for among the docket's workers (seconds).
READY_POLL = 0.005

# The recorder of the running worker, if any: the task below reports to it.
_recorder: Recorder | None = None


async def handle(index: int, execution: Execution = CurrentExecution()) -> None:  # noqa: B008
    # execution.when is the due time the producer gave, on this machine's clock.
    if _recorder is not None:
        _recorder.saw(index)
        _recorder.record(time.time() - execution.when.timestamp())


def _docket(url: str, variant: str) -> Docket:
    if variant == CHECK_1MS:
        return Docket(url=url, execution_ttl=timedelta(0))
    return Docket(url=url)


def _when(delay: float) -> datetime:
    return datetime.now(timezone.utc) + max(timedelta(seconds=delay), DUE_NOW)


class DocketProducer:
    batch_size = 1

    def __init__(self, docket: Docket) -> None:
        self._docket = docket

    async def enqueue(self, indices: range, delay: float) -> None:
        for index in indices:
            await self._docket.add(handle, when=_when(delay))(index)


class DocketSystem:
    name = "docket"
    # The scheduler loop moves due tasks from the sorted set to the stream.
    has_dispatch_step = True

    def versions(self) -> dict[str, str]:
        return {"pydocket": version("pydocket"), "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return [CHECK_1MS]

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url, variant)

    @asynccontextmanager
    async def _producer(self, url: str, variant: str) -> AsyncIterator[Producer]:
        async with _docket(url, variant) as docket:
            yield DocketProducer(docket)

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        global _recorder
        _recorder = recorder
        fastest = variant == CHECK_1MS
        async with _docket(url, variant) as docket:
            docket.register(handle)
            worker = Worker(
                docket,
                concurrency=CONCURRENCY,
                minimum_check_interval=FASTEST if fastest else DOCUMENTED_CHECK,
                scheduling_resolution=FASTEST if fastest else DOCUMENTED_RESOLUTION,
            )
            async with worker:
                running = asyncio.ensure_future(worker.run_forever())
                try:
                    # A worker heartbeats as soon as its loops run: then it takes tasks.
                    while not any(each.name == worker.name for each in await docket.workers()):
                        if running.done():
                            running.result()
                            raise RuntimeError("the docket worker stopped by itself")
                        await asyncio.sleep(READY_POLL)
                    on_ready()
                    await recorder.done.wait()
                finally:
                    # What docket's own command does on SIGTERM: the loop finishes the tasks
                    # it has started, then returns.
                    running.cancel()
                    await asyncio.gather(running, return_exceptions=True)

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """docket's own batch call, add_many: the schedule script pipelined 1,000 at a time."""
        when = _when(delay)
        async with Docket(url=url) as docket:
            async with docket.redis() as redis:
                before = await redis.zcard(docket.queue_key)

            async def write(indices: range) -> None:
                await docket.add_many(docket.call(handle, when=when)(index) for index in indices)

            await run_in_flight(count, BACKLOG_TASKS_PER_CALL, BACKLOG_CALLS_IN_FLIGHT, write)
            async with docket.redis() as redis:
                loaded = await redis.zcard(docket.queue_key) - before
        if loaded != count:
            raise RuntimeError(f"loaded {loaded} backlog tasks instead of {count}")

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        """One call of stream_due_tasks, which moves every due task to the stream."""
        # The tasks just enqueued are due DUE_NOW after their enqueue: let the last come due.
        await asyncio.sleep(2 * DUE_NOW.total_seconds())
        async with Docket(url=url) as docket, docket.redis() as redis:
            before = await redis.xlen(docket.stream_key)
            started = time.perf_counter()
            await _stream_due_tasks(
                redis,
                queue_key=docket.queue_key,
                stream_key=docket.stream_key,
                now_timestamp=datetime.now(timezone.utc).timestamp(),
                docket_prefix=docket.prefix,
            )
            seconds = time.perf_counter() - started
            after = await redis.xlen(docket.stream_key)
        # A task whose `when` had passed by the time its schedule script ran (a loaded
        # machine, 32 calls in flight) went to the stream at once: all must be there now.
        if after < events:
            raise RuntimeError(f"{after} of {events} due docket tasks reached the stream")
        moved = after - before
        return {"events_per_s": moved / seconds, "seconds": seconds, "calls": 1, "moved": moved}


if __name__ == "__main__":
    main(DocketSystem(), sys.argv[0])
