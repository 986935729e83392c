"""Producing: validating events and writing them through the enqueue script."""

from __future__ import annotations

import functools
from collections.abc import Iterable

import anyio

from aioqueue._model.config import ServiceConfig
from aioqueue._model.event import Event

from .coalescer import Coalescer
from .queues import QueueDirectory
from .store import QueueStore
from .writes import CHUNK_SIZE, DueTime, EnqueueItem, event_item

__all__ = ["Producer"]

# Script calls in flight at once during enqueue_many, each on its own pooled connection.
CONCURRENT_CHUNKS = 4


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
        queue = await self._queues.recorded(type(event))
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
            queue = await self._queues.recorded(type(event))
            item = self._item(event, due, context)
            store = queue.store_for(item.id)
            batches.setdefault(store, []).append((index, item))
            types.append(queue.event_type)
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
        config = self._config
        return event_item(config.serializer, config.max_payload_bytes, event, due, context)
