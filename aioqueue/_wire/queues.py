"""One event type's queue: its layout and the store of each partition."""

from __future__ import annotations

import asyncio

import anyio

from aioqueue._model.event import Event
from aioqueue._transport.client import RedisClient
from aioqueue._transport.steps import run_steps
from aioqueue._wire.event_types import EventTypeRecord, EventTypes
from aioqueue._wire.keys import QueueLayout, partition_of
from aioqueue._wire.store import QueueStore

__all__ = ["QueueDirectory", "TypeQueue"]


class TypeQueue:
    """The stores of one event type, one per partition, and which one holds an id."""

    __slots__ = ("layout", "stores")

    def __init__(self, client: RedisClient, layout: QueueLayout) -> None:
        self.layout = layout
        self.stores = tuple(QueueStore(client, keys, layout.event_type) for keys in layout.all_keys)

    @property
    def event_type(self) -> str:
        return self.layout.event_type

    def store_for(self, event_id: str) -> QueueStore:
        if len(self.stores) == 1:
            return self.stores[0]
        return self.stores[partition_of(event_id, len(self.stores))]


class QueueDirectory:
    """The queues one service touches, by wire name, and the event types it writes."""

    __slots__ = ("_client", "_prefix", "_queues", "_resolving", "types")

    def __init__(self, client: RedisClient, prefix: str, types: EventTypes) -> None:
        self._client = client
        self._prefix = prefix
        self.types = types
        self._queues: dict[str, TypeQueue] = {}
        self._resolving: dict[type[Event], asyncio.Future[EventTypeRecord]] = {}
        """Resolutions under way: the first enqueues of a class, often many at once, wait
        for one (each would otherwise take a connection of its own for the same writes)."""

    def queue(self, event_type: str) -> TypeQueue:
        queue = self._queues.get(event_type)
        if queue is None:
            layout = QueueLayout(
                self._prefix, event_type, self.types.partitions_of(event_type) or 1
            )
            queue = self._queues[event_type] = TypeQueue(self._client, layout)
        return queue

    def known(self, event_class: type[Event]) -> TypeQueue | None:
        """The class's queue if the class is resolved already, else None (see recorded);
        no await, for the enqueue path."""
        record = self.types.known(event_class)
        return None if record is None else self.queue(record.event_type)

    async def recorded(self, event_class: type[Event], *, again: bool = False) -> TypeQueue:
        """The class's queue, once (per service) the class is resolved (see
        EventTypes.resolve: registry, published schema, serial key); `again` resolves it
        even if it was resolved before (the server lost what was recorded)."""
        record = None if again else self.types.known(event_class)
        if record is None:
            record = await self._resolve(event_class)
        return self.queue(record.event_type)

    async def _resolve(self, event_class: type[Event]) -> EventTypeRecord:
        resolving = self._resolving.get(event_class)
        if resolving is not None:
            return await asyncio.shield(resolving)
        resolving = self._resolving[event_class] = asyncio.get_running_loop().create_future()
        try:
            # Shielded, as the coalescer's flushes are: others wait on it (each reply has
            # its deadline, so this cannot hang).
            with anyio.CancelScope(shield=True):
                record = await run_steps(self._client, self.types.resolve(event_class))
        except BaseException as exc:
            resolving.set_exception(exc)
            resolving.exception()  # retrieved: a lone caller's failure is not logged as lost
            raise
        else:
            resolving.set_result(record)
            return record
        finally:
            del self._resolving[event_class]
