"""Turning events into JSON payloads and back (orjson; dataclasses and pydantic models)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, TypeVar

import orjson

from .errors import PayloadDecodeError, SerializationError
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


class JsonSerializer:
    """The default serializer: orjson, for dataclass and pydantic (v2) events.

    The id travels beside the payload, not inside it, so other producers only write the
    event's own fields.
    """

    def encode(self, event: Event) -> str:
        try:
            fields = _fields_of(event)
            fields.pop("id", None)
            return orjson.dumps(fields).decode()
        except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
            raise SerializationError(
                f"cannot encode {type(event).__qualname__} {getattr(event, 'id', '?')!r} "
                f"as JSON: {exc}"
            ) from exc

    def decode(self, event_class: type[E], event_id: str, payload: str) -> E:
        try:
            fields = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise PayloadDecodeError(f"payload is not valid JSON: {exc}") from exc
        if not isinstance(fields, dict):
            raise PayloadDecodeError(f"payload must be a JSON object, got {type(fields).__name__}")
        fields["id"] = event_id
        validate = getattr(event_class, "model_validate", None)
        try:
            event = validate(fields) if validate is not None else event_class(**fields)
        except (TypeError, ValueError) as exc:
            # pydantic's ValidationError is a ValueError; a dataclass raises TypeError for
            # missing or unknown fields.
            raise PayloadDecodeError(
                f"payload does not fit {event_class.__qualname__}: {exc}"
            ) from exc
        if not isinstance(event, event_class):
            raise PayloadDecodeError(f"decoding did not produce a {event_class.__qualname__}")
        return event


def _fields_of(event: Event) -> dict[str, Any]:
    dump = getattr(event, "model_dump", None)
    if dump is not None:
        fields = dump(mode="json")
    elif dataclasses.is_dataclass(event):
        # Shallow on purpose: orjson serializes nested dataclasses, datetimes and UUIDs itself.
        fields = {field.name: getattr(event, field.name) for field in dataclasses.fields(event)}
    else:
        raise TypeError("events must be dataclasses or pydantic models")
    if not isinstance(fields, dict):
        raise TypeError("model_dump() did not return a dict")
    return fields
