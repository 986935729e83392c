"""Celery with the Redis broker in the benchmark scenarios (see common.py).

Delayed tasks: `task.apply_async(args, countdown=seconds)` (or `eta=`) is a blocking call
that turns the countdown into an `eta` header (ISO 8601, the producer's clock) and publishes
the message like any other: one `LPUSH` of the JSON message (the task's body base64-encoded
inside it) onto the queue's list, `celery`. Nothing in Redis orders messages by due time: a
worker takes them off the list as they come (`BRPOP`, through kombu's event loop), records
each in its `unacked` hash and `unacked_index` sorted set (the visibility timeout, 1 h), and
puts one with an eta in its own timer, in memory, raising its prefetch limit by one so that
held messages do not block the others (PITFALLS.md: an eta past the visibility timeout is
delivered again). When the eta comes the timer hands the task to the pool; with early
acknowledgement (the default) the message is acknowledged (`HDEL`, `ZREM`) as the task starts.
A countdown of 0 publishes a task without an eta, so due-now tasks get 1 ms.

apply_async is blocking (kombu's connections are synchronous), so the producer drives it from
IN_FLIGHT threads (peer_threads.ThreadedProducer). The worker is Celery's WorkController,
started in a thread of the scenario's process (as celery.contrib.testing does), with gossip,
mingle and heartbeats off: they are the workers' broadcast chatter, not part of delivering
tasks. Handlers report each delivery through a DeliveryChannel, from the pool's threads or
processes alike; the lateness run counts the prefork pool's processes' CPU time with the
worker's (process_cpu.py).

Variants, with concurrency 10 in both: Celery's documented defaults (the prefork pool,
`worker_prefetch_multiplier` 4), and THREADS, the fastest sensible settings found: the threads
pool (no hop to a pool process per task) with a prefetch multiplier of FAST_PREFETCH. In
alternating drains of 6,000 tasks here the threads pool was 1.02 to 1.2x as fast and spent
a quarter less CPU in the lateness run; multipliers of 4, 16 and 64 were within the noise of
each other. The producer is the same in both: a `broker_pool_limit` of 32 instead of 10 for
its 32 threads left its rate where it was (1,124 and 1,102 tasks/s), since it is bound by
apply_async's own CPU time.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime
from importlib.metadata import version
from typing import Any

from celery import Celery, Task
from celery.worker import WorkController, state
from common import CONCURRENCY, JsonDict, Producer, Recorder, redis_py_version
from peer_threads import DeliveryChannel, ThreadedProducer, report
from scenarios import main

THREADS = "threads"
FAST_PREFETCH = 16
TASK_NAME = "handle"
# A countdown of 0 would publish a task without an eta: due-now tasks are this far ahead.
DUE_NOW = 0.001
# How long a stopping worker may take to finish (seconds).
STOP_TIMEOUT = 30.0

# Where the handler reports deliveries (a DeliveryChannel's address), set by work() before
# the worker starts, so that forked pool processes have it too.
_channel_address = ""


def _handle(task: Task, index: int) -> None:  # type: ignore[type-arg]
    # request.eta is the due time the producer computed, on this machine's clock.
    due = datetime.fromisoformat(task.request.eta).timestamp()
    report(_channel_address, index, time.time() - due)


def _app(url: str, variant: str) -> tuple[Celery, Task]:  # type: ignore[type-arg]
    app = Celery("bench", broker=url, set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_concurrency=CONCURRENCY,
    )
    if variant == THREADS:
        app.conf.update(worker_prefetch_multiplier=FAST_PREFETCH)
    task = app.task(name=TASK_NAME, bind=True)(_handle)
    return app, task


class ReadyWorker(WorkController):
    """A WorkController that says when its consumer takes messages."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.consuming = threading.Event()
        super().__init__(*args, **kwargs)

    def on_consumer_ready(self, consumer: Any) -> None:
        self.consuming.set()


class CelerySystem:
    name = "celery"
    # The worker holds eta tasks in its own timer; nothing moves them inside Redis.
    has_dispatch_step = False

    def versions(self) -> dict[str, str]:
        return {
            "celery": version("celery"),
            "kombu": version("kombu"),
            "redis-py": redis_py_version(),
        }

    def variants(self) -> Sequence[str]:
        return [THREADS]

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url, variant)

    @asynccontextmanager
    async def _producer(self, url: str, variant: str) -> AsyncIterator[Producer]:
        app, task = _app(url, variant)

        def send(index: int, delay: float) -> None:
            task.apply_async(args=(index,), countdown=max(delay, DUE_NOW))

        producer = ThreadedProducer(send)
        try:
            yield producer
        finally:
            producer.close()
            app.close()

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        global _channel_address
        app, _ = _app(url, variant)
        async with DeliveryChannel(recorder) as channel:
            _channel_address = channel.address
            worker = ReadyWorker(
                app=app,
                pool="threads" if variant == THREADS else "prefork",
                concurrency=CONCURRENCY,
                hostname=f"bench-{variant or 'defaults'}@localhost",
                without_heartbeat=True,
                without_mingle=True,
                without_gossip=True,
                loglevel="WARNING",
            )
            thread = threading.Thread(target=worker.start, name="celery-worker", daemon=True)
            thread.start()
            try:
                while not worker.consuming.is_set():
                    if not thread.is_alive():
                        raise RuntimeError("the celery worker stopped by itself")
                    await asyncio.sleep(0.005)
                on_ready()
                await recorder.done.wait()
            finally:
                # A warm shutdown, as the worker's own SIGTERM handler makes it: the loop sees
                # the flag, stops consuming, lets running tasks finish and closes the pool.
                state.should_stop = 0
                await asyncio.to_thread(thread.join, STOP_TIMEOUT)
                state.should_stop = None
                app.close()
                if thread.is_alive():
                    raise RuntimeError(f"the celery worker did not stop in {STOP_TIMEOUT:g} s")

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        raise NotImplementedError(
            "celery keeps no backlog in Redis: its workers take every eta task into memory"
        )

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        raise NotImplementedError("celery has no dispatch step")


if __name__ == "__main__":
    main(CelerySystem(), sys.argv[0])
