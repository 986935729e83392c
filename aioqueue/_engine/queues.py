"""One event type's queue: its layout and the store of each partition."""

from __future__ import annotations

from aioqueue._model.event import Event

from .client import RedisClient
from .event_types import EventTypes
from .keys import QueueLayout, partition_of
from .steps import run_steps
from .store import QueueStore

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

    __slots__ = ("_client", "_prefix", "_queues", "types")

    def __init__(self, client: RedisClient, prefix: str, types: EventTypes) -> None:
        self._client = client
        self._prefix = prefix
        self.types = types
        self._queues: dict[str, TypeQueue] = {}

    def queue(self, event_type: str) -> TypeQueue:
        queue = self._queues.get(event_type)
        if queue is None:
            layout = QueueLayout(
                self._prefix, event_type, self.types.partitions_of(event_type) or 1
            )
            queue = self._queues[event_type] = TypeQueue(self._client, layout)
        return queue

    async def recorded(self, event_class: type[Event]) -> TypeQueue:
        """The class's queue, once (per service) the class is resolved (see
        EventTypes.resolve: registry, published schema, serial key)."""
        record = self.types.known(event_class)
        if record is None:
            record = await run_steps(self._client, self.types.resolve(event_class))
        return self.queue(record.event_type)
