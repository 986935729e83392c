"""One event type's queue: its layout and the store of each partition."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aioqueue._model.event import Event, serial_key_of

from .client import RedisClient
from .keys import QueueLayout, partition_of
from .registry import resolve_layout
from .schemas import publish_schema
from .serial_keys import record_serial_field
from .store import QueueStore

__all__ = ["QueueDirectory", "TypeQueue"]


class TypeQueue:
    """The stores of one event type, one per partition, and which one holds an id."""

    __slots__ = ("layout", "recorded", "stores")

    def __init__(self, client: RedisClient, layout: QueueLayout) -> None:
        self.layout = layout
        self.stores = tuple(QueueStore(client, keys, layout.event_type) for keys in layout.all_keys)
        self.recorded = False
        """Whether this service has written the type to the prefix's registry yet."""

    @property
    def event_type(self) -> str:
        return self.layout.event_type

    def store_for(self, event_id: str) -> QueueStore:
        if len(self.stores) == 1:
            return self.stores[0]
        return self.stores[partition_of(event_id, len(self.stores))]


class QueueDirectory:
    """The queues one service touches, made on first use and recorded in the type registry."""

    __slots__ = ("_client", "_partitions", "_prefix", "_queues", "_schema_of")

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        partitions: Mapping[str, int],
        schema_of: Callable[[type[Event]], dict[str, Any] | None] = lambda event_class: None,
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._partitions = partitions
        self._schema_of = schema_of
        """The payload schema an event class implies (the serializer's), to publish."""
        self._queues: dict[str, TypeQueue] = {}

    def queue(self, event_type: str) -> TypeQueue:
        queue = self._queues.get(event_type)
        if queue is None:
            layout = QueueLayout(self._prefix, event_type, self._partitions.get(event_type, 1))
            queue = self._queues[event_type] = TypeQueue(self._client, layout)
        return queue

    async def recorded(self, event_type: str, event_class: type[Event] | None = None) -> TypeQueue:
        """The queue, after making sure (once per service) that the registry lists it with
        this service's partition count, raising PartitionCountMismatchError when it lists
        another, that the type's published schema is the one `event_class` implies, and that
        its serial key (if the class sets one) is recorded."""
        queue = self.queue(event_type)
        if not queue.recorded:
            layout = queue.layout
            await resolve_layout(self._client, layout.prefix, event_type, layout.partitions)
            payload_schema = None if event_class is None else self._schema_of(event_class)
            if payload_schema is not None:
                await publish_schema(self._client, layout.prefix, event_type, payload_schema)
            serial_field = None if event_class is None else serial_key_of(event_class)
            if serial_field is not None:
                await record_serial_field(self._client, layout, serial_field)
            queue.recorded = True
        return queue
