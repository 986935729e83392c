"""aioqueue in the benchmark scenarios, through its public API only (see common.py)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from datetime import timedelta

import anyio
import redis.asyncio
from bench_events import (
    REALISTIC,
    SERIAL_KEYS,
    BenchEvent,
    event_class,
    index_of,
    make_event,
)
from common import (
    CONCURRENCY,
    IN_FLIGHT,
    UVLOOP,
    JsonDict,
    Producer,
    Recorder,
    command_stats,
    redis_py_version,
    run_in_flight,
    stats_delta,
)
from replicated_server import replicated_server
from scenarios import main

import aioqueue
from aioqueue import (
    Event,
    EventService,
    EventServiceBuilder,
    JsonSerializer,
    NoMetrics,
    Outcome,
    event_context,
    event_type_name,
)

# Not public API: the backlog scenario writes through the enqueue script the way
# docs/wire-format.md tells other producers to, and times the dispatch script on its own.
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import script_source
from aioqueue._wire.store import QueueStore

ENQUEUE_MANY = "enqueue_many"
# The enqueue scenario through aioqueue.SyncProducer from threads, as a threaded WSGI server
# or a script calls it: one enqueue per call, or enqueue_many; and one thread at a time.
SYNC = "sync"
SYNC_ENQUEUE_MANY = "sync_enqueue_many"
SYNC_ONE_THREAD = "sync_one_thread"
SYNC_VARIANTS = (SYNC, SYNC_ENQUEUE_MANY, SYNC_ONE_THREAD)
# Events each sync lane enqueues per hop to its thread, one enqueue call each, so that the hop
# (a few tens of microseconds) weighs little beside the calls measured.
SYNC_EVENTS_PER_HOP = 100
# The drain with a plain `def` handler, which the service runs in worker threads.
SYNC_HANDLER = "sync_handler"
# The drain through a batch handler (`add_batch_handler`, issue 43): async and plain `def`,
# BATCH_SIZE events a call at most, a call at most BATCH_WAIT after its first event.
BATCH = "batch"
SYNC_BATCH = "sync_batch"
BATCH_SIZE = 500
BATCH_WAIT = 0.01
# The drain of a rate-limited type, the limit far above the drain rate: what enforcing it
# (reading it and keeping its window inside every claim and dispatch) costs.
RATE_LIMITED = "rate_limited"
FAR_ABOVE_THE_DRAIN = 1_000_000
# The drain of a serial-key type whose events spread over DISTINCT_KEYS key values
# (SERIAL_KEYS): what holding, parking and freeing keys costs beside an unkeyed drain. The
# enqueue and the drain of an event written as applications write theirs (REALISTIC): what
# encoding and decoding their fields cost beside BenchEvent's two (bench_events.py).
# Events per enqueue_many call in the enqueue_many variant.
MANY_BATCH = 100
DUE_KEY = "bench_due"
# Durable enqueue: `.durability(replicas=1, ...)` (issue 28), measured where the builder has
# it, beside the same enqueue on the same kind of server without it. These producers run on a
# primary with one replica started for the run, not on the driver's server: a replica attached
# there would leave a replication backlog behind, which later memory readings would count.
REPLICA_ATTACHED = "replica_attached"
REPLICA_ATTACHED_MANY = "replica_attached_many"
DURABLE = "durable"
DURABLE_MANY = "durable_many"
REPLICATED = (REPLICA_ATTACHED, REPLICA_ATTACHED_MANY, DURABLE, DURABLE_MANY)
DURABILITY_METHOD = "durability"
# Generous, so that a loaded machine shows up as a slower rate, not as failed enqueues.
DURABILITY_TIMEOUT = timedelta(seconds=5)
# Loading a backlog: events per enqueue script call (as enqueue_many chunks them), script calls
# per pipeline, and pipelines in flight. Faster here than enqueue_many itself, which also
# validates and encodes each event through the service.
BACKLOG_EVENTS_PER_CALL = 500
BACKLOG_CALLS_PER_PIPELINE = 8
BACKLOG_PIPELINES_IN_FLIGHT = 2


class AioqueueProducer:
    def __init__(
        self, service: EventService, *, many: bool, tag_due_times: bool, variant: str
    ) -> None:
        self._service = service
        self._many = many
        self._variant = variant
        self._tag_due_times = tag_due_times
        self.batch_size = MANY_BATCH if many else 1
        self.server_urls: list[str] = []
        """The servers written to, where they are not the scenario's (scenarios.servers_of)."""

    async def enqueue(self, indices: range, delay: float) -> None:
        context = {DUE_KEY: repr(time.time() + delay)} if self._tag_due_times else None
        events = [make_event(index, self._variant) for index in indices]
        if self._many:
            # Looked up at run time: enqueue_many is newer than this harness may be.
            enqueue_many = getattr(self._service, ENQUEUE_MANY)
            await enqueue_many(events, delay, context=context)
        else:
            for event in events:
                await self._service.enqueue(event, delay, context=context)


class SyncAioqueueProducer:
    """The scenario's lanes (IN_FLIGHT at once) each run their batch on a thread of their own,
    where the batch's events go through one shared SyncProducer; with `one_thread` the
    batches take turns, as in a single-threaded script."""

    def __init__(self, producer: aioqueue.SyncProducer, *, many: bool, one_thread: bool) -> None:
        self._producer = producer
        self._many = many
        self.batch_size = MANY_BATCH if many else SYNC_EVENTS_PER_HOP
        self._limiter = anyio.CapacityLimiter(1 if one_thread else IN_FLIGHT)

    async def enqueue(self, indices: range, delay: float) -> None:
        events = [make_event(index, "") for index in indices]
        await anyio.to_thread.run_sync(self._write, events, delay, limiter=self._limiter)

    def _write(self, events: list[Event], delay: float) -> None:
        if self._many:
            self._producer.enqueue_many(events, delay)
        else:
            for event in events:
                self._producer.enqueue(event, delay)


class RecorderMetrics(NoMetrics):
    """The Metrics protocol, passing each successful delivery's lateness to the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        if outcome == "ok":
            self._recorder.record(lateness)


class AioqueueSystem:
    name = "aioqueue"
    has_dispatch_step = True

    def versions(self) -> dict[str, str]:
        return {"aioqueue": aioqueue.__version__, "redis-py": redis_py_version()}

    def variants(self) -> Sequence[str]:
        return [
            *([ENQUEUE_MANY] if hasattr(EventService, ENQUEUE_MANY) else []),
            *(SYNC_VARIANTS if hasattr(aioqueue, "SyncProducer") else []),
            *([SYNC_HANDLER] if hasattr(EventServiceBuilder, "handler_threads") else []),
            *([RATE_LIMITED] if hasattr(EventServiceBuilder, "rate_limit") else []),
            *([BATCH, SYNC_BATCH] if hasattr(EventService, "add_batch_handler") else []),
            SERIAL_KEYS,
            REALISTIC,
            # The baselines of the durable rows need nothing new, so they can be run by hand.
            REPLICA_ATTACHED,
            REPLICA_ATTACHED_MANY,
            *([DURABLE, DURABLE_MANY] if has_durability() else []),
            *([UVLOOP] if importlib.util.find_spec("uvloop") is not None else []),
        ]

    def producer(
        self, url: str, variant: str, *, tag_due_times: bool = False
    ) -> AbstractAsyncContextManager[Producer]:
        return self._producer(url, variant, tag_due_times)

    @asynccontextmanager
    async def _producer(
        self, url: str, variant: str, tag_due_times: bool
    ) -> AsyncIterator[Producer]:
        if variant in SYNC_VARIANTS:
            # Looked up at run time: SyncProducer is newer than this harness may be.
            with aioqueue.SyncProducer(url) as sync_producer:
                yield SyncAioqueueProducer(
                    sync_producer,
                    many=variant == SYNC_ENQUEUE_MANY,
                    one_thread=variant == SYNC_ONE_THREAD,
                )
            return
        async with AsyncExitStack() as stack:
            servers: list[str] = []
            if variant in REPLICATED:
                servers = await stack.enter_async_context(replicated_server())
                url = servers[0]
            # Dispatching is the worker's job: a producer-only service, as in a real deployment.
            builder = EventService.builder().url(url).enable_scheduling(False)
            if variant in (DURABLE, DURABLE_MANY):
                # Looked up at run time: durability is newer than this harness may be.
                durability = getattr(builder, DURABILITY_METHOD)
                builder = durability(replicas=1, timeout=DURABILITY_TIMEOUT)
            service = builder.build()
            async with service:
                producer = AioqueueProducer(
                    service,
                    many=variant in (ENQUEUE_MANY, REPLICA_ATTACHED_MANY, DURABLE_MANY),
                    tag_due_times=tag_due_times,
                    variant=variant,
                )
                # The scenario reads the CPU of the primary and its replica together.
                producer.server_urls = servers
                yield producer

    async def work(
        self, url: str, variant: str, recorder: Recorder, on_ready: Callable[[], None]
    ) -> None:
        async def handle(event: Event) -> bool:
            recorder.saw(index_of(event))
            due = event_context.get().get(DUE_KEY)
            if due is not None:
                recorder.cross_check_lateness.append(time.time() - float(due))
            return True

        def handle_in_thread(event: BenchEvent) -> bool:
            # A set's add is atomic under the GIL, so worker threads may share it.
            recorder.saw(event.index)
            return True

        async def handle_batch(batch: list[Event]) -> bool:
            for event in batch:
                recorder.saw(index_of(event))
            if recorder.cross_checks:
                # A batch's contexts are its deliveries' (event_context is one event's).
                for delivery in aioqueue.current_deliveries():
                    due = delivery.context.get(DUE_KEY)
                    if due is not None:
                        recorder.cross_check_lateness.append(time.time() - float(due))
            return True

        def handle_batch_in_thread(batch: list[BenchEvent]) -> bool:
            for event in batch:
                recorder.saw(event.index)
            return True

        # Defaults everywhere but parallelism, which matches the peers' default concurrency.
        builder = EventService.builder().url(url).metrics(RecorderMetrics(recorder))
        if variant == RATE_LIMITED:
            builder = builder.rate_limit(BenchEvent, FAR_ABOVE_THE_DRAIN, per=1)
        service = builder.build()
        async with service:
            if variant == SYNC_HANDLER:
                service.add_handler(BenchEvent, handle_in_thread, parallelism=CONCURRENCY)
            elif variant in (BATCH, SYNC_BATCH):
                # Looked up at run time: batch handlers are newer than this harness may be.
                add_batch_handler = getattr(service, "add_batch_handler")  # noqa: B009
                batch_handler = handle_batch if variant == BATCH else handle_batch_in_thread
                add_batch_handler(
                    BenchEvent, batch_handler, max_size=BATCH_SIZE, max_wait=BATCH_WAIT
                )
            else:
                service.add_handler(event_class(variant), handle, parallelism=CONCURRENCY)
            on_ready()
            await recorder.done.wait()

    async def load_backlog(self, url: str, count: int, delay: float) -> None:
        """Pipelined enqueue script calls, each with the payloads the service would write."""
        client = redis.asyncio.Redis.from_url(url)
        try:
            keys = _queue_keys(client)
            key_list = [keys.schedule, keys.events, keys.sequence, keys.wake]
            sha = await client.script_load(script_source("enqueue"))
            pending_before = await client.hlen(keys.events)
            serializer = JsonSerializer()
            event_type = event_type_name(BenchEvent)
            delay_ms = round(delay * 1000)
            per_pipeline = BACKLOG_EVENTS_PER_CALL * BACKLOG_CALLS_PER_PIPELINE

            async def write(indices: range) -> None:
                async with client.pipeline(transaction=False) as pipe:
                    for start in range(indices.start, indices.stop, BACKLOG_EVENTS_PER_CALL):
                        args: list[str | int] = ["0", event_type]
                        for index in range(start, min(start + BACKLOG_EVENTS_PER_CALL, count)):
                            event = BenchEvent(id=f"backlog-{index}", index=index)
                            args += [event.id, serializer.encode(event), "{}", "delay", delay_ms]
                        pipe.evalsha(sha, len(key_list), *key_list, *args)
                    await pipe.execute()

            await run_in_flight(count, per_pipeline, BACKLOG_PIPELINES_IN_FLIGHT, write)
            # The script's arguments are a contract the benchmark only follows: prove they held.
            loaded = await client.hlen(keys.events) - pending_before
            if loaded != count:
                raise RuntimeError(f"loaded {loaded} backlog events instead of {count}")
        finally:
            await client.aclose()

    async def dispatch_only(self, url: str, events: int) -> JsonDict:
        """The dispatch script in a loop, with the worker's default settings, until `events`
        events are on the ready list (left unbounded: nothing consumes it).

        The rate is a full batch over the median call's time: on a shared 2-core machine a few
        calls are stretched by other processes, and the median leaves them out. The plain
        events / elapsed rate is kept as `overall_events_per_s`.
        """
        client = redis.asyncio.Redis.from_url(url)
        try:
            config = EventService.builder().client(client).build().config
            event_type = event_type_name(BenchEvent)
            store = QueueStore(client, _queue_keys(client), event_type)
            before = await command_stats(client)
            moved = 0
            call_seconds: list[float] = []
            started = time.perf_counter()
            while moved < events:
                call_started = time.perf_counter()
                result = await store.dispatch(
                    batch_size=config.scheduling_batch_size,
                    lease_ms=config.lease_ms,
                    max_attempts=config.retry_attempts,
                    ready_capacity=events + config.scheduling_batch_size,
                )
                call_seconds.append(time.perf_counter() - call_started)
                if not result.dispatched:
                    raise RuntimeError(f"dispatched {moved} of {events} events, then none")
                moved += result.dispatched
            seconds = time.perf_counter() - started
            scripts = stats_delta(before, await command_stats(client))
        finally:
            await client.aclose()
        # Services call the scripts as functions (FCALL); the backlog loader by SHA, and the
        # first call may be an EVAL (the script cache was flushed).
        names = ("fcall", "eval", "evalsha")
        script_calls = sum(scripts.get(name, (0, 0))[0] for name in names)
        script_usec = sum(scripts.get(name, (0, 0))[1] for name in names)
        median_call = statistics.median(call_seconds)
        return {
            "events_per_s": config.scheduling_batch_size / median_call,
            "overall_events_per_s": moved / seconds,
            "seconds": seconds,
            "calls": len(call_seconds),
            "median_call_ms": median_call * 1000,
            "server_us_per_call": script_usec / max(1, script_calls),
            "server_busy_fraction": script_usec / 1e6 / seconds,
        }


def has_durability() -> bool:
    return hasattr(EventServiceBuilder, DURABILITY_METHOD)


def _queue_keys(client: redis.asyncio.Redis) -> QueueKeys:
    """BenchEvent's keys under the prefix a default service uses."""
    prefix = EventService.builder().client(client).build().config.prefix
    return QueueKeys.for_type(prefix, event_type_name(BenchEvent))


if __name__ == "__main__":
    main(AioqueueSystem(), sys.argv[0])
