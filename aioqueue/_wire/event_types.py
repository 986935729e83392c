"""Event types as producers write them: each class resolved once into one record.

Before the first event of a class is written, four things must hold in Redis: the prefix's
registry records the type with the partition count the producer writes to (registry.py), the
type's payload schema is published for producers without the class (schemas.py), and its
serial key, if the class has one, is recorded for every dispatcher (serial_keys.py). That is
one conversation (`EventTypes.resolve`), run once per class and producer, asyncio or
blocking alike; its outcome is an `EventTypeRecord`, which every later enqueue of the class
reads instead of asking each module again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aioqueue._model.event import Event, event_type_name, serial_key_of
from aioqueue._model.serializer import Serializer
from aioqueue._transport.steps import Steps
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.registry import resolve_layout_steps
from aioqueue._wire.schemas import publish_schema_steps
from aioqueue._wire.serial_keys import record_serial_field_steps

__all__ = ["EventTypeRecord", "EventTypes"]


@dataclass(frozen=True, slots=True)
class EventTypeRecord:
    """One event class as it is written: its wire name, where its queue lives (the
    registry's partition count), the schema it published and the serial key it recorded."""

    event_class: type[Event]
    event_type: str
    layout: QueueLayout
    schema: dict[str, Any] | None
    serial_field: str | None


class EventTypes:
    """The event classes one producer writes, each resolved on first use and then kept.

    `partitions` gives a type's partition count by wire name; a type it leaves out has
    `default_partitions`: 1 for a service (whose consumers read the keys of one partition
    unless configured otherwise), None for a producer that writes wherever the registry says
    (1 for a type nobody recorded yet).
    """

    __slots__ = ("_default_partitions", "_partitions", "_prefix", "_records", "_serializer")

    def __init__(
        self,
        prefix: str,
        serializer: Serializer,
        partitions: Mapping[str, int],
        *,
        default_partitions: int | None,
    ) -> None:
        self._prefix = prefix
        self._serializer = serializer
        self._partitions = partitions
        self._default_partitions = default_partitions
        self._records: dict[type[Event], EventTypeRecord] = {}

    def known(self, event_class: type[Event]) -> EventTypeRecord | None:
        """The class's record once it was resolved; None before (call `resolve`)."""
        return self._records.get(event_class)

    def partitions_of(self, event_type: str) -> int | None:
        return self._partitions.get(event_type, self._default_partitions)

    def resolve(self, event_class: type[Event]) -> Steps[EventTypeRecord]:
        """Resolves the class (see the module's docstring) and keeps its record. Raises
        EventDefinitionError for a class that cannot be an event, before Redis is asked,
        and PartitionCountMismatchError when the registry records another count."""
        event_type = event_type_name(event_class)
        schema = self._serializer.schema(event_class)
        serial_field = serial_key_of(event_class)
        layout = yield from resolve_layout_steps(
            self._prefix, event_type, self.partitions_of(event_type)
        )
        if schema is not None:
            yield from publish_schema_steps(self._prefix, event_type, schema)
        if serial_field is not None:
            yield from record_serial_field_steps(layout, serial_field)
        record = EventTypeRecord(event_class, event_type, layout, schema, serial_field)
        self._records[event_class] = record
        return record
