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
        return codec_for(type(event)).encode(event)

    def decode(self, event_class: type[E], event_id: str, payload: str) -> E:
        event = codec_for(event_class).decode(event_id, payload)
        return event  # type: ignore[return-value]  # the codec of event_class builds one

    def schema(self, event_class: type[Event]) -> dict[str, Any] | None:
        return codec_for(event_class).schema
