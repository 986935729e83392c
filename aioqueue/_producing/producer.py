"""Producing: validating events and writing them through the enqueue script."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import NamedTuple, TypeAlias

import anyio

from aioqueue._model.config import ServiceConfig
from aioqueue._model.errors import DurabilityError
from aioqueue._model.event import Event
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import (
    CHUNK_SIZE,
    DueTime,
    event_item,
    queue_enqueue_steps,
)
from aioqueue._transport.client import RedisClient
from aioqueue._transport.coalescer import Coalescer
from aioqueue._transport.steps import run_steps
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.queues import QueueDirectory

__all__ = ["EnqueueOutcome", "Producer"]

_Coalesced: TypeAlias = "tuple[str, bool, int | None]"
"""What calls must share to share a script call: their event type, and their write mode's
replace and max_wait_ms (a plain tuple: one is made per call)."""

# Script calls in flight at once during enqueue_many, each on its own pooled connection.
CONCURRENT_CHUNKS = 4
# Coalesced script calls in flight at once for one type and write mode (see coalescer.py):
# with two, the callers one call answers prepare the next while the server runs the other.
# One where a second lane costs more than it overlaps. A partitioned type's batch is already
# a call per partition, sent to a cluster's nodes at once: two lanes halve those calls and
# cost the client a quarter more CPU an event (8 partitions on 3 masters, 32 in flight, 14 ->
# 17.4 µs), which gained 8 % over 20,000 events but lost 20 % over the 3,000 of the cluster
# benchmark, where the producer shares two cores with a starting worker. Under durability
# each call waits for its own confirmation from the replicas (two lanes: 28,000 -> 24,000
# events/s).
LANES = 2


class EnqueueOutcome(NamedTuple):
    """What an enqueue did with one event."""

    event_type: str
    """The event's type, by its wire name."""
    scheduled: bool
    """True when scheduled, False when an event of that type and id was pending and kept."""


class Producer:
    """Validates events and schedules them, grouped per partition and chunked."""

    __slots__ = ("_client", "_coalescers", "_config", "_queues")

    def __init__(self, client: RedisClient, queues: QueueDirectory, config: ServiceConfig) -> None:
        self._client = client
        self._queues = queues
        self._config = config
        # Calls that share a type and a write mode share script calls, whatever their
        # partitions: a batch goes out as one call per partition, sent together. Its lanes
        # take the service's connections as every call does (call_gate.py): a producer of a
        # thousand types holds no more of them than a producer of one.
        self._coalescers: dict[_Coalesced, Coalescer[EnqueueItem, bool]] = {}

    async def enqueue(
        self, event: Event, due: DueTime, context: str, mode: WriteMode
    ) -> EnqueueOutcome:
        """Schedules one event; returns its event type and whether it was scheduled.
        Concurrent calls for the same type share script calls."""
        queue = self._queues.known(type(event)) or await self._queues.recorded(type(event))
        layout = queue.layout
        item = self._item(event, due, context)
        coalesced = (layout.event_type, mode.replace, mode.max_wait_ms)
        coalescer = self._coalescers.get(coalesced)
        if coalescer is None:
            coalescer = self._coalescers[coalesced] = Coalescer(
                [
                    functools.partial(self._write, layout, mode=mode)
                    for _ in range(self._lanes_for(layout))
                ],
                CHUNK_SIZE,
            )
        return EnqueueOutcome(layout.event_type, await coalescer.submit(item))

    def _lanes_for(self, layout: QueueLayout) -> int:
        one_call_a_batch = layout.partitions == 1 and self._config.durability is None
        return LANES if one_call_a_batch else 1

    async def enqueue_many(
        self, events: Iterable[Event], due: DueTime, context: str, mode: WriteMode
    ) -> list[EnqueueOutcome]:
        """Schedules `events`; returns what it did with each (an EnqueueOutcome), in order.

        Every event is validated and encoded before anything is written.
        """
        by_type: dict[QueueLayout, list[tuple[int, EnqueueItem]]] = {}
        types: list[str] = []
        for index, event in enumerate(events):
            layout = (await self._queues.recorded(type(event))).layout
            by_type.setdefault(layout, []).append((index, self._item(event, due, context)))
            types.append(layout.event_type)
        results = [False] * len(types)
        chunks = [
            (layout, entries[start : start + CHUNK_SIZE])
            for layout, entries in by_type.items()
            for start in range(0, len(entries), CHUNK_SIZE)
        ]
        limiter = anyio.CapacityLimiter(CONCURRENT_CHUNKS)
        # A chunk not confirmed under durability lets the others finish, and the call raises
        # its DurabilityError itself rather than in an exception group.
        not_confirmed: list[DurabilityError] = []

        async def write(layout: QueueLayout, chunk: list[tuple[int, EnqueueItem]]) -> None:
            async with limiter:
                try:
                    scheduled = await self._write(layout, [item for _, item in chunk], mode=mode)
                except DurabilityError as exc:
                    not_confirmed.append(exc)
                    return
            for (index, _), was_scheduled in zip(chunk, scheduled, strict=True):
                results[index] = was_scheduled

        if len(chunks) == 1:
            await write(*chunks[0])
        else:
            async with anyio.create_task_group() as writers:
                for layout, chunk in chunks:
                    writers.start_soon(write, layout, chunk)
        if not_confirmed:
            raise not_confirmed[0]
        return [
            EnqueueOutcome(event_type, scheduled)
            for event_type, scheduled in zip(types, results, strict=True)
        ]

    async def _write(
        self, layout: QueueLayout, items: list[EnqueueItem], *, mode: WriteMode
    ) -> list[bool]:
        durability = self._config.durability
        steps = queue_enqueue_steps(self._client, layout, items, mode=mode, durability=durability)
        return await run_steps(self._client, steps)

    def prepare(self, event: Event, due: DueTime, context: str = "{}") -> EnqueueItem:
        """Validates and encodes one event for a script that writes it (a schedule's tick)."""
        return self._item(event, due, context)

    def _item(self, event: Event, due: DueTime, context: str) -> EnqueueItem:
        config = self._config
        return event_item(config.serializer, config.max_payload_bytes, event, due, context)
