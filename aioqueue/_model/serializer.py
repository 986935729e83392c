"""The serializer protocol, and the default: typed JSON payloads (see codec.py)."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from .codec import codec_for
from .event import Event

__all__ = ["JsonSerializer", "Serializer"]

E = TypeVar("E", bound=Event)


class Serializer(Protocol):
    """Encodes an event's fields (all but `id`) as JSON text and decodes them back."""

    def encode(self, event: Event) -> str:
        """Returns the payload: a JSON object of the event's fields without `id`."""
        ...

    def decode(self, event_class: type[E], event_id: str, payload: str) -> E:
        """Builds an event from its id and payload; raises PayloadDecodeError if it can't."""
        ...

    def schema(self, event_class: type[Event]) -> dict[str, Any] | None:
        """Checks that the class's fields can round-trip, raising EventDefinitionError
        (naming the class and the field) if not, and returns the payload's JSON Schema, or
        None for a serializer that publishes none. Called when a handler is added."""
        ...


class JsonSerializer:
    """The default serializer: JSON, for dataclass, msgspec.Struct and pydantic (v2) events.

    Payloads decode into exactly the annotated types (see codec.py); the id travels beside
    the payload, not inside it, so other producers only write the event's own fields.
    """

    def encode(self, event: Event) -> str:
        """The event's fields but `id` as a JSON object; Decimal, sets, timedelta and
        nested Structs in the form `decode` reads back. Raises SerializationError for a
        value that has no JSON form."""
        return codec_for(type(event)).encode(event)

    def decode(self, event_class: type[E], event_id: str, payload: str) -> E:
        """An instance of `event_class` with id `event_id` and the payload's fields, each
        of its annotated type. Raises PayloadDecodeError naming the field path of the
        first mismatch (`$.items[0].qty: expected int, got str`); fields the class does
        not have are ignored."""
        event = codec_for(event_class).decode(event_id, payload)
        return event  # type: ignore[return-value]  # the codec of event_class builds one

    def schema(self, event_class: type[Event]) -> dict[str, Any] | None:
        """The JSON Schema (2020-12) of the event object the class implies, which services
        publish under `P:schemas`. Raises EventDefinitionError, naming the class and the
        field, for a field that cannot round-trip through JSON."""
        return codec_for(event_class).schema
