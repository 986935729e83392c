"""Producing: validating events and writing them through the enqueue script."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import anyio
import orjson

from aioqueue._model.config import ServiceConfig
from aioqueue._model.durations import Duration, to_seconds
from aioqueue._model.errors import InvalidEnqueueError, PayloadTooLargeError
from aioqueue._model.event import Event, event_type_name

from .coalescer import Coalescer
from .queues import QueueDirectory
from .store import EnqueueItem, QueueStore

__all__ = ["MAX_DELAY", "DueTime", "Producer", "context_json", "max_wait_ms"]

MAX_DELAY = timedelta(days=36525)
"""The furthest ahead an event may be due: 100 years. A later due time is far more likely a
unit mistake (milliseconds given as seconds) than a plan, and an event never due would sit in
Redis forever; refusing it also keeps every score an exact integer of milliseconds."""

# Events per enqueue script call: large enough to amortise the round trip, small enough that
# one call never blocks the server for more than about a millisecond.
CHUNK_SIZE = 500
# Script calls in flight at once during enqueue_many, each on its own pooled connection.
CONCURRENT_CHUNKS = 4


@dataclass(frozen=True, slots=True)
class DueTime:
    """When an event is due: a delay on the server's clock, or an absolute time."""

    milliseconds: int
    absolute: bool
    due_in: float
    """Roughly how many seconds from now (a local hint for waking the dispatcher)."""

    @classmethod
    def of(cls, delay: Duration | None, at: datetime | None) -> DueTime:
        if (delay is None) == (at is None):
            raise InvalidEnqueueError("give exactly one of delay and at=")
        if at is not None:
            if not isinstance(at, datetime) or at.utcoffset() is None:
                raise InvalidEnqueueError(f"at= must be a timezone-aware datetime, got {at!r}")
            ahead = at - datetime.now(timezone.utc)
            if ahead > MAX_DELAY:
                raise InvalidEnqueueError(
                    f"at= must be at most 100 years ahead ({MAX_DELAY.days} days), got {at}"
                )
            return cls(round(at.timestamp() * 1000), absolute=True, due_in=ahead.total_seconds())
        assert delay is not None
        try:
            seconds = to_seconds(delay, "delay")
        except (TypeError, ValueError) as exc:
            raise InvalidEnqueueError(str(exc)) from exc
        if seconds < 0:
            raise InvalidEnqueueError(f"delay must be >= 0, got {delay!r}; use at= for a past time")
        if seconds > MAX_DELAY.total_seconds():
            raise InvalidEnqueueError(
                f"delay must be at most 100 years ({MAX_DELAY.total_seconds():.0f} s), "
                f"got {delay!r}"
            )
        return cls(round(seconds * 1000), absolute=False, due_in=seconds)


def max_wait_ms(max_wait: Duration | None, *, replace: bool) -> int | None:
    """The debounce bound in ms; max_wait only means something for a replacing enqueue."""
    if max_wait is None:
        return None
    if not replace:
        raise InvalidEnqueueError(
            "max_wait bounds a debounce: it needs replace=True (each enqueue replaces the "
            "pending version, and none pushes it past the first enqueue plus max_wait)"
        )
    try:
        seconds = to_seconds(max_wait, "max_wait")
    except (TypeError, ValueError) as exc:
        raise InvalidEnqueueError(str(exc)) from exc
    if not 0 <= seconds <= MAX_DELAY.total_seconds():
        raise InvalidEnqueueError(f"max_wait must be between 0 and 100 years, got {max_wait!r}")
    return round(seconds * 1000)


def context_json(context: Mapping[str, str] | None) -> str:
    """The context as the JSON object the envelope stores; it must map strings to strings."""
    if not context:
        return "{}"
    if not isinstance(context, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in context.items()
    ):
        raise InvalidEnqueueError(f"context must map strings to strings, got {context!r}")
    return orjson.dumps(dict(context)).decode()


class Producer:
    """Validates events and schedules them, grouped per partition and chunked."""

    __slots__ = ("_coalescers", "_config", "_queues")

    def __init__(self, queues: QueueDirectory, config: ServiceConfig) -> None:
        self._queues = queues
        self._config = config
        # Calls that share a queue and a write mode share script calls.
        self._coalescers: dict[
            tuple[QueueStore, bool, int | None], Coalescer[EnqueueItem, bool]
        ] = {}

    async def enqueue(
        self,
        event: Event,
        due: DueTime,
        context: str,
        *,
        replace: bool,
        max_wait_ms: int | None = None,
    ) -> bool:
        """Schedules one event. Concurrent calls for the same queue share script calls."""
        queue = await self._queues.recorded(event_type_name(type(event)), type(event))
        item = self._item(event, due, context)
        store = queue.store_for(item.id)
        mode = (store, replace, max_wait_ms)
        coalescer = self._coalescers.get(mode)
        if coalescer is None:
            coalescer = self._coalescers[mode] = Coalescer(
                functools.partial(store.enqueue, replace=replace, max_wait_ms=max_wait_ms),
                CHUNK_SIZE,
            )
        return await coalescer.submit(item)

    async def enqueue_many(
        self,
        events: Iterable[Event],
        due: DueTime,
        context: str,
        *,
        replace: bool,
        max_wait_ms: int | None = None,
    ) -> list[tuple[str, bool]]:
        """Schedules `events`; returns (event type, scheduled) per event, in order.

        Every event is validated and encoded before anything is written.
        """
        batches: dict[QueueStore, list[tuple[int, EnqueueItem]]] = {}
        types: list[str] = []
        for index, event in enumerate(events):
            event_type = event_type_name(type(event))
            item = self._item(event, due, context)
            store = (await self._queues.recorded(event_type, type(event))).store_for(item.id)
            batches.setdefault(store, []).append((index, item))
            types.append(event_type)
        results = [False] * len(types)
        chunks = [
            (store, entries[start : start + CHUNK_SIZE])
            for store, entries in batches.items()
            for start in range(0, len(entries), CHUNK_SIZE)
        ]
        limiter = anyio.CapacityLimiter(CONCURRENT_CHUNKS)

        async def write(store: QueueStore, chunk: list[tuple[int, EnqueueItem]]) -> None:
            async with limiter:
                scheduled = await store.enqueue(
                    [item for _, item in chunk], replace=replace, max_wait_ms=max_wait_ms
                )
            for (index, _), was_scheduled in zip(chunk, scheduled, strict=True):
                results[index] = was_scheduled

        if len(chunks) == 1:
            await write(*chunks[0])
        else:
            async with anyio.create_task_group() as writers:
                for store, chunk in chunks:
                    writers.start_soon(write, store, chunk)
        return list(zip(types, results, strict=True))

    def prepare(self, event: Event, due: DueTime, context: str = "{}") -> EnqueueItem:
        """Validates and encodes one event for a script that writes it (a schedule's tick)."""
        return self._item(event, due, context)

    def _item(self, event: Event, due: DueTime, context: str) -> EnqueueItem:
        event_id = getattr(event, "id", None)
        if not isinstance(event_id, str) or not event_id:
            raise InvalidEnqueueError(
                f"{type(event).__qualname__}.id must be a non-empty string, got {event_id!r}"
            )
        payload = self._config.serializer.encode(event)
        size = len(payload.encode()) + len(context.encode())
        if size > self._config.max_payload_bytes:
            raise PayloadTooLargeError(
                f"{type(event).__qualname__} {event_id!r} is {size} bytes of payload and "
                f"context, more than max_payload_bytes={self._config.max_payload_bytes}"
            )
        return EnqueueItem(
            id=event_id,
            payload=payload,
            context_json=context,
            due_ms=due.milliseconds,
            absolute=due.absolute,
        )
