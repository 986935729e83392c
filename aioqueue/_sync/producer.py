"""SyncProducer: schedules, cancels and reschedules events from code without an event loop
(Django and Flask views, scripts, Celery tasks), on a blocking redis-py client.

It writes exactly what an EventService writes: every argument is checked and every script
call built by _producing/writes.py, each event class resolved once by _wire/event_types.py
(registry, published schema, serial key), and every conversation with Redis run as steps
(_transport/steps.py) by `run_steps_sync`. Only the driver differs; nothing here encodes,
validates or builds a script argument of its own.

Threads and processes:
- One producer serves every thread of a process: redis-py's connection pool hands each
  call a connection of its own, under a lock. Enqueues of one class and write mode from
  several threads at once share script calls (_transport/thread_coalescer.py): a thread
  alone writes its event at once, and threads arriving while a call is under way go
  together in the next. The producer's other state is its settings and the records of the
  classes it resolved; two threads resolving one class at once both run the (idempotent)
  resolution and store equal records, so no lock is needed there. The coalescer's lock is
  never held across a call, and a forked child starts with a fresh one.
- A producer made before `fork` (gunicorn --preload, Celery's prefork pool) works in the
  children: each redis-py pool notices the new pid on its next use and starts over with new
  connections, and a child closing an inherited connection only closes its own copy of the
  socket (shutdown is left to the process that opened it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from aioqueue._model.checks import checked, int_in_range, refuse_partitioned_serial_key
from aioqueue._model.config import Durability, ProducerConfig
from aioqueue._model.durations import Duration
from aioqueue._model.errors import ConfigurationError, ServiceStateError
from aioqueue._model.event import Event, event_type_name
from aioqueue._model.instrumentation import Instrumentation
from aioqueue._model.metrics import Metrics
from aioqueue._model.serializer import Serializer
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.enqueue_options import EnqueueOptions, EnqueueRequest
from aioqueue._producing.settings import (
    INSTRUMENTATION,
    MAX_PAYLOAD_BYTES,
    METRICS,
    PREFIX,
    SERIALIZER,
)
from aioqueue._producing.writes import (
    CHUNK_SIZE,
    DueTime,
    cancel_steps,
    context_json,
    enqueue_many_steps,
    event_item,
    queue_enqueue_steps,
    reschedule_steps,
)
from aioqueue._transport.client import SyncRedisClient, producer_client_from_url
from aioqueue._transport.reaching import display_url, unavailable_as_one_error
from aioqueue._transport.recovery import logger
from aioqueue._transport.steps import Steps, run_steps_sync
from aioqueue._transport.thread_coalescer import ThreadCoalescer
from aioqueue._wire.event_types import EventTypeRecord, EventTypes
from aioqueue._wire.keys import MAX_PARTITIONS, QueueLayout

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11 (3.10 is supported)

__all__ = ["SyncProducer"]

R = TypeVar("R")


class SyncProducer:
    """Schedules events from blocking code, the way `EventService.enqueue` does.

        producer = SyncProducer("redis://localhost:6379")
        producer.enqueue(PaymentCheck(id="p-1", order_id=42), timedelta(hours=3))

    Give a `url` (the producer connects, and closes the client in `close()`) or a redis-py
    `client` you own (never closed here): `redis.Redis` or `redis.cluster.RedisCluster`.
    A client made from a URL waits at most 5 s to connect and for each reply (plus twice the
    durability timeout, when set), unless the URL sets `socket_timeout` /
    `socket_connect_timeout`. The other settings mean what they mean on
    `EventService.builder()`: `partitions` maps event classes to their partition count (any
    other class is written with the count the prefix's registry records);
    `durability=Durability(replicas=1, timeout=0.5)` makes `enqueue` and `enqueue_many`
    return only once replicas confirmed the write, else raise DurabilityError (enqueueing
    again is safe). A client you pass needs a socket timeout above the durability timeout.

    Thread-safe and fork-safe (see the module's docstring); it never starts an event loop.
    Redis errors (`redis.exceptions.ConnectionError`, `TimeoutError`) reach the caller; the
    first call of an event class that cannot reach Redis raises RedisUnavailableError (a
    ConnectionError), whose message names the server and the cause.
    """

    __slots__ = (
        "_address",
        "_client",
        "_closed",
        "_config",
        "_enqueues",
        "_owns_client",
        "_types",
    )

    def __init__(
        self,
        url: str | None = None,
        *,
        client: SyncRedisClient | None = None,
        prefix: str = PREFIX.default,
        partitions: Mapping[type[Event], int] | None = None,
        max_payload_bytes: int = MAX_PAYLOAD_BYTES.default,
        serializer: Serializer | None = None,
        instrumentation: Instrumentation | None = None,
        metrics: Metrics | None = None,
        durability: Durability | None = None,
    ) -> None:
        if (url is None) == (client is None):
            raise ConfigurationError("give SyncProducer a Redis url or a client (one of them)")
        self._config = ProducerConfig(
            prefix=PREFIX.of(prefix),
            serializer=SERIALIZER.of(SERIALIZER.default if serializer is None else serializer),
            metrics=METRICS.of(METRICS.default if metrics is None else metrics),
            instrumentation=INSTRUMENTATION.of(
                INSTRUMENTATION.default if instrumentation is None else instrumentation
            ),
            max_payload_bytes=MAX_PAYLOAD_BYTES.of(max_payload_bytes),
            partitions=MappingProxyType(_partition_counts(partitions or {})),
            durability=Durability.checked(durability),
        )
        # Names the server when it cannot be reached: the URL without its password, else
        # the client's own host and port.
        self._address = None if url is None else display_url(url)
        # Settings first: a producer refused for its settings has opened no connection.
        if client is None:
            assert url is not None
            # A reply may wait for the replicas (WAIT), then for the AOF (WAITAOF).
            durable = self._config.durability
            waits = 0.0 if durable is None else 2 * durable.timeout
            self._client = checked(
                lambda url: producer_client_from_url(url, waits=waits), url, "url"
            )
            self._owns_client = True
        elif isinstance(client, (AsyncRedis, AsyncRedisCluster)):
            raise ConfigurationError(
                "SyncProducer needs a blocking client (redis.Redis or "
                "redis.cluster.RedisCluster); an asyncio client belongs to "
                "EventService.builder().client(...)"
            )
        else:
            self._client, self._owns_client = client, False
        self._types = EventTypes(
            self._config.prefix,
            self._config.serializer,
            self._config.partitions,
            default_partitions=None,
        )
        # Per queue and write mode, as the service's producer coalesces (producer.py).
        self._enqueues: ThreadCoalescer[tuple[QueueLayout, WriteMode], EnqueueItem, bool] = (
            ThreadCoalescer(self._send_enqueues, CHUNK_SIZE)
        )
        self._closed = False

    @property
    def config(self) -> ProducerConfig:
        """The producer's settings, checked and frozen."""
        return self._config

    def enqueue(
        self, event: Event, delay: Duration | None = None, **options: Unpack[EnqueueOptions]
    ) -> bool:
        """Schedules `event` after `delay` (timedelta or seconds) or at `at` (aware datetime).

        True when scheduled, False when an event of that type and id was pending and was
        kept; `replace=True` overwrites it, and with `max_wait` too it is a bounded debounce
        (exactly as `EventService.enqueue`). Bad input raises InvalidEnqueueError (or its
        InvalidEventError, PayloadTooLargeError) before anything is written.
        """
        return self._prepared(event, EnqueueRequest.of("enqueue", delay, options))()

    def prepare(
        self, event: Event, delay: Duration | None = None, **options: Unpack[EnqueueOptions]
    ) -> Callable[[], bool]:
        """Checks and encodes an enqueue now; the function it returns writes it when called,
        and returns what `enqueue` would.

        For writing after something else succeeded, such as a database commit
        (`transaction.on_commit(producer.prepare(...))`, see aioqueue.django): bad input
        fails here, where the event is decided, and not at the commit. A `delay` counts from
        the call of the returned function, on the server's clock.
        """
        return self._prepared(event, EnqueueRequest.of("prepare", delay, options))

    def _prepared(self, event: Event, request: EnqueueRequest) -> Callable[[], bool]:
        self._ensure_open()
        item = self._item(event, request.due, self._context(request.context))
        event_class = type(event)

        def write() -> bool:
            return self._enqueue_item(event_class, item, request.mode)

        # The name callers log it by (Django's robust on_commit names the failed function).
        write.__qualname__ = f"enqueue of {event_class.__qualname__} {item.id!r}"
        return write

    def enqueue_many(
        self,
        events: Iterable[Event],
        delay: Duration | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> list[bool]:
        """Schedules many events with one due time and context, in a few pipelined script
        calls; returns, per event in order, what `enqueue` would have. Every event is checked
        before anything is written."""
        request = EnqueueRequest.of("enqueue_many", delay, options)
        self._ensure_open()
        due, mode = request.due, request.mode
        context_text = self._context(request.context)
        items = [(type(event), self._item(event, due, context_text)) for event in events]
        writes = []
        for event_class, item in items:
            record = self._record(event_class)
            writes.append((record.layout.keys_for(item.id), record.event_type, item))
        scheduled = self._write(
            enqueue_many_steps(self._client, writes, mode=mode, durability=self._config.durability)
        )
        for (_, event_type, _), was_scheduled in zip(writes, scheduled, strict=True):
            self._config.metrics.event_enqueued(event_type, scheduled=was_scheduled)
        return scheduled

    def cancel(self, event_class: type[Event], event_id: str) -> bool:
        """Removes a pending event; once this returns, no handler will be handed it (one
        already running it is not interrupted). False if none with that id was pending."""
        self._ensure_open()
        keys = self._record(event_class).layout.keys_for(event_id)
        return self._write(cancel_steps(self._client, keys, event_id))

    def reschedule(
        self,
        event_class: type[Event],
        event_id: str,
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
    ) -> bool:
        """Moves a pending event to a new due time, `delay` from now or `at`, keeping its
        payload, context and attempt count, in one atomic step. False for an unknown id, a
        dead event, or one whose attempt is under way."""
        self._ensure_open()
        due = DueTime.of(delay, at)
        layout = self._record(event_class).layout
        result = self._write(reschedule_steps(self._client, layout, event_id, due))
        if result == "in_flight":
            logger.info(
                "not rescheduling %s %r: an attempt is under way",
                event_class.__qualname__,
                event_id,
            )
        return result == "moved"

    def close(self) -> None:
        """Closes the client if the producer made it (from a URL); later calls raise
        ServiceStateError. Closing twice is fine."""
        if self._closed:
            return
        self._closed = True
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> SyncProducer:
        self._ensure_open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<SyncProducer prefix={self._config.prefix!r} {state}>"

    def _enqueue_item(self, event_class: type[Event], item: EnqueueItem, mode: WriteMode) -> bool:
        self._ensure_open()
        record = self._record(event_class)
        scheduled = self._enqueues.submit((record.layout, mode), item)
        self._config.metrics.event_enqueued(record.event_type, scheduled=scheduled)
        return scheduled

    def _send_enqueues(
        self, queue: tuple[QueueLayout, WriteMode], items: list[EnqueueItem]
    ) -> list[bool]:
        """One shared call: the enqueues of several threads into one queue, one write mode."""
        layout, mode = queue
        durability = self._config.durability
        return self._write(
            queue_enqueue_steps(self._client, layout, items, mode=mode, durability=durability)
        )

    def _item(self, event: Event, due: DueTime, context: str) -> EnqueueItem:
        config = self._config
        return event_item(config.serializer, config.max_payload_bytes, event, due, context)

    def _context(self, context: Mapping[str, str] | None) -> str:
        return context_json(self._config.instrumentation.enqueue_context(context))

    def _record(self, event_class: type[Event]) -> EventTypeRecord:
        """The class as resolved on its first use (registry, schema, serial key)."""
        record = self._types.known(event_class)
        if record is None:
            # The first conversation with Redis: a server that cannot be reached is named.
            with unavailable_as_one_error(self._client, self._address):
                record = run_steps_sync(self._client, self._types.resolve(event_class))
        return record

    def _write(self, steps: Steps[R]) -> R:
        """Runs one write (enqueue, cancel, reschedule). With durability, an enqueue's steps
        send its script calls and their WAIT in one pipeline, on one connection (see
        _producing/durability.py)."""
        return run_steps_sync(self._client, steps)

    def _ensure_open(self) -> None:
        if self._closed:
            raise ServiceStateError("this SyncProducer is closed")


def _partition_counts(partitions: Mapping[type[Event], int]) -> dict[str, int]:
    """Partition counts by wire name, checked as the builder's `.partitions()` checks them."""
    counts = {}
    for event_class, count in partitions.items():
        event_type = event_type_name(event_class)
        refuse_partitioned_serial_key(event_class, count)
        counts[event_type] = int_in_range(f"partitions of {event_type}", count, 1, MAX_PARTITIONS)
    return counts
