"""taskiq with taskiq-redis in the benchmark scenarios (see common.py).

Delayed tasks: taskiq-redis's brokers have no delay of their own; its documentation's path to
run a task later is a schedule source and taskiq's scheduler ("Dynamic scheduling"), with
`ListRedisScheduleSource`, which taskiq-redis recommends over its deprecated
`RedisScheduleSource`, and `RedisStreamBroker`, its broker with acknowledgements.
`task.schedule_by_time(source, when, *args)` makes two round trips: `SET schedule:data:<id>`
of the pickled schedule (task name, args, labels, `when`), then `RPUSH` of the id onto a list
per minute of due time, `schedule:time:<YYYY-MM-DDTHH:MM>`. The scheduler reloads its
schedules every `update_interval` (60 s): it SCANs the whole keyspace for `schedule:time:*`
keys, reads the lists of past minutes and of the current one (LRANGE) and their data (MGET,
50 at a time), and keeps them in memory; every `loop_interval` (1 s, on the second) it sends
each schedule whose time has passed, one task apiece: an `XADD` to the `taskiq` stream, then
`GETDEL` of its data and `LREM` of its id from the minute's list. A worker reads the stream
(`XREADGROUP COUNT 100 BLOCK 2000`, then `XAUTOCLAIM` of idle messages under a lock) and runs
`max_async_tasks` tasks at a time, each acknowledged with an `XACK` when done. A schedule added
after the scheduler's last reload is not seen before the next one.

Here the scheduler loop and the receiver (taskiq's `run_receiver_task` / `SchedulerLoop`, what
`taskiq scheduler` and `taskiq worker` run) share the worker's process and event loop, so the
worker's CPU time includes the scheduler's, as aioqueue's includes its dispatcher's. The
handler cannot see the schedule's time, so for the lateness run the producer passes the due
time as an argument.

Variants, with `max_async_tasks` 10 in both: the documented scheduler settings (the `taskiq
scheduler` command's defaults: reload every 60 s, loop every 1 s), and UPDATE_1S, the fastest
sensible ones: a reload every second. Both are whole seconds on the command line; shorter
intervals given in code make the loop spin (it sleeps until `now + loop_interval` rounded down
to the second, a negative time for most of each second).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from typing import Any

from common import CONCURRENCY, JsonDict, Producer, Recorder, redis_py_version, run_in_flight
from redis.asyncio import Redis
from scenarios import main
from taskiq import ScheduledTask, TaskiqScheduler
from taskiq.cli.scheduler.run import SchedulerLoop, get_all_schedules
from taskiq.receiver import Receiver
from taskiq_redis import ListRedisScheduleSource, RedisStreamBroker

UPDATE_1S = "update_interval=1"
DOCUMENTED_UPDATE = timedelta(minutes=1)
FASTEST_UPDATE = timedelta(seconds=1)
LOOP_INTERVAL = timedelta(seconds=1)
TASK_NAME = "handle"
# Loading a backlog: schedules per pipeline, and pipelines in flight.
BACKLOG_SCHEDULES_PER_PIPELINE = 1000
BACKLOG_PIPELINES_IN_FLIGHT = 2
# How long a stopping receiver is given before its connections are closed (seconds).
STOP_TIMEOUT = 3.0
# The broker's and the source's connection pools (taskiq-redis passes these on to redis-py's
# BlockingConnectionPool), in both variants: the scheduler sends every due schedule in an
# asyncio task of its own, and with the pools' default, unbounded, 20,000 schedules due at once
# opened connections until they timed out connecting (redis-py 8 gives 5 s; Valkey would refuse
# past its 10,000 clients anyway). So at most MAX_CONNECTIONS each, waited for without a
# limit, and no connect or read timeout (redis-py had none by default before 8): behind a
# server busy with those schedules (each LREM scans its minute's list) a blocking stream read
# timed out, which stopped the receiver and left what the read had taken pending for the 10 min
# idle timeout, and a send whose connection timed out connecting was never sent again (the
# scheduler marks a schedule as run before it sends it).
MAX_CONNECTIONS = 50
CONNECTIONS: dict[str, Any] = {
    "max_connection_pool_size": MAX_CONNECTIONS,
    "timeout": None,
    "socket_timeout": None,
    "socket_connect_timeout": None,
}

# The recorder of the running worker, if any: the task below reports to it.
_recorder: Recorder | None = None


async def _handle(index: int, due: float | None = None) -> None:
    # due is the producer's time.time() + delay, on this machine's clock (README, "Clocks").
    if _recorder is not None:
        _recorder.saw(index)
        _recorder.record(0.0 if due is None else time.time() - due)


def _parts(url: str) -> tuple[RedisStreamBroker, ListRedisScheduleSource, Any]:
    broker = RedisStreamBroker(url=url, **CONNECTIONS)
    source = ListRedisScheduleSource(url, **CONNECTIONS)
    task = broker.task(task_name=TASK_NAME)(_handle)
    return broker, source, task


def _when(delay: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=delay)


class TaskiqProducer:
    batch_size = 1

    def __init__(self, source: ListRedisScheduleSource, task: Any, tag_due_times: bool) -> None:
        self._source = source
        self._task = task
        self._tag_due_times = tag_due_times

    async def enqueue(self, indices: range, delay: float) -> None:
        for index in indices:
            when = _when(delay)
            due = (when.timestamp(),) if self._tag_due_times else ()
            await self._task.schedule_by_time(self._source, when, index, *due)


class TaskiqSystem:
    name = "taskiq"
    # The scheduler sends due schedules to the stream, from which workers read them.
    has_dispatch_step = True

    def versions(self) -> dict[str, str]:
        return {
            "taskiq": version("taskiq"),
            "taskiq-redis": version("taskiq-redis"),
            "redis-py": redis_py_version(),
        }

    def variants(self) -> Sequence[str]:
        return [UPDATE_1S]

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url, tag_due_times)

    @asynccontextmanager
    async def _producer(self, url: str, tag_due_times: bool) -> AsyncIterator[Producer]:
        _, source, task = _parts(url)
        await source.startup()
        try:
            yield TaskiqProducer(source, task, tag_due_times)
        finally:
            await source.shutdown()

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        global _recorder
        _recorder = recorder
        broker, source, _ = _parts(url)
        broker.is_worker_process = True
        # The stream's consumer group starts at the stream's end ("$"): made before the
        # scheduler sends anything.
        await broker.startup()
        await source.startup()
        update = FASTEST_UPDATE if variant == UPDATE_1S else DOCUMENTED_UPDATE
        scheduler = SchedulerLoop(TaskiqScheduler(broker, [source]))
        receiver = Receiver(broker, max_async_tasks=CONCURRENCY, run_startup=False)
        finish = asyncio.Event()
        scheduling = asyncio.ensure_future(
            scheduler.run(update_interval=update, loop_interval=LOOP_INTERVAL)
        )
        receiving = asyncio.ensure_future(receiver.listen(finish))
        try:
            await asyncio.sleep(0)
            on_ready()
            waiter = asyncio.ensure_future(recorder.done.wait())
            await asyncio.wait([waiter, scheduling, receiving], return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():
                waiter.cancel()
                for part in (scheduling, receiving):
                    if part.done():
                        part.result()
                raise RuntimeError("the taskiq scheduler or receiver stopped by itself")
        finally:
            # The receiver finishes the tasks it has started; the scheduler has no stop but
            # cancellation (taskiq's own command stops it the same way).
            finish.set()
            scheduling.cancel()
            await asyncio.wait([receiving], timeout=STOP_TIMEOUT)
            # The receiver's stop cancels its pending stream read; here that cancellation now
            # and then did not end the read (it went on reading, 2 s at a time, for good):
            # closing the broker's connections under it does.
            await broker.shutdown()
            await asyncio.gather(scheduling, receiving, return_exceptions=True)
            await source.shutdown()

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """What ListRedisScheduleSource.add_schedule writes (SET of the serialized schedule,
        RPUSH of its id onto its minute's list), pipelined."""
        _, source, task = _parts(url)
        when = _when(delay)
        time_key = source._get_time_key(when)
        client = Redis.from_url(url)

        async def write(indices: range) -> None:
            async with client.pipeline(transaction=False) as pipe:
                ids = []
                for index in indices:
                    schedule_id = uuid.uuid4().hex
                    message = task.kicker()._prepare_message(index)
                    schedule = ScheduledTask(
                        schedule_id=schedule_id,
                        task_name=message.task_name,
                        labels=message.labels,
                        args=message.args,
                        kwargs=message.kwargs,
                        time=when,
                    )
                    data = source._serializer.dumpb(schedule.model_dump(mode="json"))
                    pipe.set(source._get_data_key(schedule_id), data)
                    ids.append(schedule_id)
                pipe.rpush(time_key, *ids)
                await pipe.execute()

        try:
            before = await client.llen(time_key)
            await run_in_flight(
                count, BACKLOG_SCHEDULES_PER_PIPELINE, BACKLOG_PIPELINES_IN_FLIGHT, write
            )
            loaded = await client.llen(time_key) - before
        finally:
            await client.aclose()
            await source.shutdown()
        if loaded != count:
            raise RuntimeError(f"loaded {loaded} backlog schedules instead of {count}")

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        """One pass of the scheduler: a reload of the schedules, then every due one sent to
        the stream (and deleted from the source), one task apiece as the loop sends them."""
        broker, source, _ = _parts(url)
        await broker.startup()
        await source.startup()
        scheduler = TaskiqScheduler(broker, [source])
        try:
            started = time.perf_counter()
            now = datetime.now(timezone.utc)
            sends = [
                scheduler.on_ready(schedule_source, schedule)
                for schedule_source, schedules in await get_all_schedules(scheduler)
                for schedule in schedules
                if schedule.time is not None and schedule.time <= now
            ]
            await asyncio.gather(*sends)
            seconds = time.perf_counter() - started
        finally:
            await broker.shutdown()
            await source.shutdown()
        if len(sends) < events:
            raise RuntimeError(f"taskiq's scheduler sent {len(sends)} of {events} schedules")
        return {"events_per_s": len(sends) / seconds, "seconds": seconds, "calls": 1}


if __name__ == "__main__":
    main(TaskiqSystem(), sys.argv[0])
