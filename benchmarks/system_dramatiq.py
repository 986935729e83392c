"""Dramatiq with its Redis broker in the benchmark scenarios (see common.py).

Delayed messages: `actor.send_with_options(args=..., delay=ms)` is a blocking call that runs
the broker's `dispatch` Lua script once: `HSET` of the encoded message (with an `eta` option,
the due time in ms on the producer's clock) into `dramatiq:default.DQ.msgs` and `RPUSH` of its
id onto the delay queue `dramatiq:default.DQ`, a plain list in arrival order. A delay of 0
takes the same path. A worker's consumer thread for the delay queue fetches up to
`worker_threads` x 1,000 messages (a script call that LPOPs ids, adds them to the worker's
acks set and HMGETs their data), holds them in memory in a priority queue by eta, and between
fetches moves each whose eta has passed to the normal queue (`dispatch` "enqueue" without a
delay, then "ack" on the delay queue). When a fetch brings nothing it sleeps, 5 ms doubling
up to `worker_timeout` (1 s), with jitter. The normal queue's consumer fetches up to
`worker_threads` x 2 messages the same way for `worker_threads` threads running the actor.

The calls are blocking (redis-py's synchronous client), so the producer drives them from
IN_FLIGHT threads (peer_threads.ThreadedProducer), and the worker's threads report each
delivery through a DeliveryChannel. The handler cannot see the due time (the eta option is
removed when the message moves to the normal queue), so for the lateness run the producer
passes it as a second argument.

Variants: the documented defaults (`worker_timeout` 1,000 ms), and WORKER_TIMEOUT_10MS, the
fastest sensible setting: the longest back-off between fetches of an idle queue 10 ms.
Everything else at its defaults but `worker_threads`, set to CONCURRENCY as everywhere.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from importlib.metadata import version

import dramatiq
from common import (
    CONCURRENCY,
    JsonDict,
    Producer,
    Recorder,
    redis_py_version,
    run_in_flight,
)
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis, dq_name
from peer_threads import DeliveryChannel, ThreadedProducer, report
from scenarios import main

WORKER_TIMEOUT_10MS = "worker_timeout=10"
FAST_WORKER_TIMEOUT_MS = 10
ACTOR_NAME = "handle"
QUEUE_NAME = "default"
# Loading a backlog: messages per pipeline, and pipelines in flight.
BACKLOG_MESSAGES_PER_PIPELINE = 1000
BACKLOG_PIPELINES_IN_FLIGHT = 2
# How long a stopping worker may take to finish (ms), as Worker.stop takes it.
STOP_TIMEOUT_MS = 10_000

# Where the handler reports deliveries (a DeliveryChannel's address), set by work().
_channel_address = ""


def _handle(index: int, due: float | None = None) -> None:
    # due is the producer's time.time() + delay, on this machine's clock (README, "Clocks").
    report(_channel_address, index, 0.0 if due is None else time.time() - due)


def _broker(url: str) -> tuple[RedisBroker, dramatiq.Actor]:  # type: ignore[type-arg]
    broker = RedisBroker(url=url)
    actor = dramatiq.actor(_handle, actor_name=ACTOR_NAME, queue_name=QUEUE_NAME, broker=broker)
    return broker, actor


class DramatiqSystem:
    name = "dramatiq"
    # The worker's delay-queue consumer moves due messages to the normal queue.
    has_dispatch_step = False

    def versions(self) -> dict[str, str]:
        return {"dramatiq": version("dramatiq"), "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return [WORKER_TIMEOUT_10MS]

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url, tag_due_times)

    @asynccontextmanager
    async def _producer(self, url: str, tag_due_times: bool) -> AsyncIterator[Producer]:
        broker, actor = _broker(url)

        def send(index: int, delay: float) -> None:
            arguments = (index, time.time() + delay) if tag_due_times else (index,)
            actor.send_with_options(args=arguments, delay=round(delay * 1000))

        producer = ThreadedProducer(send)
        try:
            yield producer
        finally:
            producer.close()
            broker.close()

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        global _channel_address
        broker, _ = _broker(url)
        timeout = FAST_WORKER_TIMEOUT_MS if variant == WORKER_TIMEOUT_10MS else None
        async with DeliveryChannel(recorder) as channel:
            _channel_address = channel.address
            worker = dramatiq.Worker(
                broker,
                worker_threads=CONCURRENCY,
                **({"worker_timeout": timeout} if timeout is not None else {}),
            )
            # Starts the consumer and worker threads and returns.
            worker.start()
            try:
                on_ready()
                await recorder.done.wait()
            finally:
                await asyncio.to_thread(worker.stop, STOP_TIMEOUT_MS)
                broker.close()

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """What RedisBroker.enqueue writes for a delayed message (HSET of the encoded message
        with its eta, RPUSH of its id onto the delay queue), pipelined, without the dispatch
        script's heartbeat ZADD."""
        broker, actor = _broker(url)
        delayed_queue = dq_name(QUEUE_NAME)
        eta = current_millis() + round(delay * 1000)

        async def write(indices: range) -> None:
            await asyncio.to_thread(write_batch, indices)

        def write_batch(indices: range) -> None:
            pipe = broker.client.pipeline(transaction=False)
            for index in indices:
                message_id = str(uuid.uuid4())
                message = actor.message(index).copy(
                    queue_name=delayed_queue,
                    options={"redis_message_id": message_id, "eta": eta},
                )
                pipe.hset(f"{queue_key}.msgs", message_id, message.encode())
                pipe.rpush(queue_key, message_id)
            pipe.execute()

        queue_key = f"{broker.namespace}:{delayed_queue}"
        try:
            before = broker.client.llen(queue_key)
            await run_in_flight(
                count, BACKLOG_MESSAGES_PER_PIPELINE, BACKLOG_PIPELINES_IN_FLIGHT, write
            )
            loaded = broker.client.llen(queue_key) - before
            if loaded != count:
                raise RuntimeError(f"loaded {loaded} backlog messages instead of {count}")
        finally:
            broker.close()

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        raise NotImplementedError("dramatiq moves due messages inside its worker")


if __name__ == "__main__":
    main(DramatiqSystem(), sys.argv[0])
