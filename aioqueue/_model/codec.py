"""Typed payloads: each event class's encoder, decoder and JSON Schema, checked once.

Dataclass and msgspec.Struct events decode through msgspec into exactly their annotated
types (datetime with its offset, Decimal with every digit, enums, nested dataclasses, sets,
...); pydantic models keep their own validation. The id travels beside the payload, never
inside it (docs/wire-format.md).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import itertools
import math
import operator
import re
import typing
import uuid
import weakref
from collections.abc import Callable, Sequence
from json.encoder import encode_basestring as quoted  # C; a JSON string, non-ASCII kept
from typing import Any

import msgspec
import orjson

from .errors import (
    EventDefinitionError,
    InvalidEventError,
    PayloadDecodeError,
    SerializationError,
)
from .event import Event

__all__ = ["EventCodec", "codec_for"]

# msgspec says "Expected `int`, got `str` - at `$.items[0].qty`"; operators read the path first.
_AT_PATH = re.compile(r"^(?P<reason>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)


class EventCodec:
    """Encodes one event class's fields (all but `id`) as JSON text and decodes them back."""

    def __init__(self, event_class: type[Event]) -> None:
        self.event_class = event_class
        self.name = event_class.__qualname__
        self._validate = getattr(event_class, "model_validate", None)
        if self._validate is not None:  # pydantic: its own types, validation and schema
            self.schema: dict[str, Any] = event_class.model_json_schema()  # type: ignore[attr-defined]
            self._fields: Callable[[Event], dict[str, Any]] = _pydantic_fields
            return
        _refuse_untyped_fields(event_class)
        try:
            self._decoder = msgspec.json.Decoder(event_class)
            self.schema = msgspec.json.schema(event_class)
        except (TypeError, NameError) as exc:
            raise EventDefinitionError(
                f"event class {self.name} cannot be decoded exactly: "
                f"{_culprit(event_class)}{_last_line(exc)}; use types that round-trip through "
                "JSON (see the guide 'Typed events and schemas')"
            ) from exc
        if dataclasses.is_dataclass(event_class):
            # The payload's fields, looked up once: dataclasses.fields() per event cost more
            # than encoding them. Shallow on purpose: orjson writes nested dataclasses itself.
            names = tuple(
                field.name for field in dataclasses.fields(event_class) if field.name != "id"
            )
            self._fields = lambda event: {name: getattr(event, name) for name in names}
        else:
            self._fields = _struct_fields

    def encode(self, event: Event) -> str:
        """The payload: a JSON object of the event's fields without `id`."""
        try:
            fields = self._fields(event)
            fields.pop("id", None)
            # orjson writes str, int, datetime, UUID, enums and dataclasses itself (fast); the
            # rest (Decimal as a string with every digit, sets, timedelta, Structs) goes
            # through msgspec, whose decoder reads exactly that form back.
            payload = orjson.dumps(fields, default=_builtin)
        except (TypeError, ValueError, orjson.JSONEncodeError) as exc:
            raise SerializationError(
                f"cannot encode {self.name} {getattr(event, 'id', '?')!r} as JSON: {exc}"
            ) from exc
        # JSON has no NaN or infinity: orjson writes them as null, which a `float` field
        # refuses at delivery and a `float | None` one reads as None, the value lost either
        # way. Each top-level None and each such float is a `null` of its own in the payload
        # (text inside strings can only add more), so a payload with no more nulls than the
        # fields that are None holds none of them: an event with optional fields left out
        # costs a count, not a walk. The walk goes through the fields as encoded (their wire
        # names, as decoding errors give).
        nulls = payload.count(b"null")
        if nulls and nulls > sum(map(operator.is_, fields.values(), _NONES)):
            path = _non_finite_path(fields)
            if path is not None:
                raise InvalidEventError(
                    f"{self.name} {getattr(event, 'id', '?')!r}: ${path} is not a finite "
                    "number, which JSON cannot carry (it would arrive as null); use None, "
                    "or a finite float"
                )
        return payload.decode()

    def decode(self, event_id: str, payload: str) -> Event:
        """Builds the event from its id and payload; raises PayloadDecodeError naming the
        field path when the payload does not fit the class."""
        if self._validate is not None:
            return self._decode_pydantic(event_id, payload)
        try:
            event = self._decoder.decode(_with_id(payload, event_id))
        except msgspec.ValidationError as exc:
            raise PayloadDecodeError(
                f"payload does not fit {self.name}: {located(str(exc))}"
            ) from exc
        except msgspec.DecodeError as exc:
            raise _not_an_object(payload) from exc
        return event

    def _decode_pydantic(self, event_id: str, payload: str) -> Event:
        try:
            fields = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise PayloadDecodeError(f"payload is not valid JSON: {exc}") from exc
        if not isinstance(fields, dict):
            raise PayloadDecodeError(f"payload must be a JSON object, got {type(fields).__name__}")
        fields["id"] = event_id
        try:
            event = self._validate(fields)  # type: ignore[misc]
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            raise PayloadDecodeError(f"payload does not fit {self.name}: {exc}") from exc
        if not isinstance(event, self.event_class):
            raise PayloadDecodeError(f"decoding did not produce a {self.name}")
        return event


# Built once per class and looked up twice per enqueue (encode, then the read-back). A plain
# dict: a codec holds its class, so a weak key would never go away either.
_codecs: dict[type[Event], EventCodec] = {}


def codec_for(event_class: type[Event]) -> EventCodec:
    """The class's codec; raises EventDefinitionError, naming the class and the field, for a
    class whose fields cannot round-trip."""
    codec = _codecs.get(event_class)
    if codec is None:
        codec = _codecs[event_class] = EventCodec(event_class)
    return codec


def located(message: str) -> str:
    """msgspec's "Expected `int`, got `str` - at `$.a[0]`" as "$.a[0]: expected int, got str"."""
    match = _AT_PATH.match(message)
    assert match is not None  # the pattern matches any text
    reason = match["reason"].replace("`", "")
    reason = reason[:1].lower() + reason[1:]
    return f"{match['path'] or '$'}: {reason}"


def _with_id(payload: str, event_id: str) -> str:
    """The payload object with `"id": event_id` as its last member, so it wins over an `id`
    inside the payload (which is ignored, as documented) and decoding stays one C call."""
    if payload[-1:] == "}" and payload[-2:-1] not in " \t\r\n{":  # a member, then "}": ours
        return f'{payload[:-1]},"id":{quoted(event_id)}}}'
    body = payload.rstrip()
    if not body.endswith("}"):
        raise _not_an_object(payload)
    head = body[:-1].rstrip()
    separator = "" if head.endswith("{") else ","
    return f'{head}{separator}"id":{quoted(event_id)}}}'


def _not_an_object(payload: str) -> PayloadDecodeError:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        return PayloadDecodeError(f"payload is not valid JSON: {exc}")
    return PayloadDecodeError(f"payload must be a JSON object, got {type(value).__name__}")


def _refuse_untyped_fields(event_class: type[Event]) -> None:
    """A bare `object` decodes to whatever JSON holds, never to what was sent: refuse it
    where the class is defined (`Any` stays allowed: it says "plain JSON" on purpose)."""
    seen: set[type] = set()

    def visit(owner: type, field: str, annotation: Any) -> None:
        if annotation is object:
            raise EventDefinitionError(
                f"field {field!r} of {owner.__qualname__} is a bare `object`, which cannot "
                "round-trip: give it a concrete type (or typing.Any for plain JSON)"
            )
        for argument in typing.get_args(annotation):
            visit(owner, field, argument)
        if isinstance(annotation, type) and _has_fields(annotation):
            walk(annotation)

    def walk(cls: type) -> None:
        if cls in seen:
            return
        seen.add(cls)
        try:
            hints = typing.get_type_hints(cls, include_extras=True)
        except NameError as exc:
            raise EventDefinitionError(
                f"the annotations of {cls.__qualname__} cannot be resolved ({exc}): define "
                "the types they name at module level"
            ) from exc
        for name, annotation in hints.items():
            if typing.get_origin(annotation) is not typing.ClassVar:
                visit(cls, name, annotation)

    walk(event_class)


def _culprit(event_class: type[Event]) -> str:
    """Which field msgspec refused ("field 'x': "), found by building each field's decoder;
    empty when the class as a whole is the problem."""
    for name, annotation in typing.get_type_hints(event_class, include_extras=True).items():
        if typing.get_origin(annotation) is typing.ClassVar:
            continue
        try:
            # msgspec decodes an unknown class by isinstance (never from JSON): the schema
            # is what refuses it.
            msgspec.json.Decoder(annotation)
            msgspec.json.schema(annotation)
        except (TypeError, NameError):
            return f"field {name!r}: "
    return ""


def _last_line(exc: Exception) -> str:
    # msgspec explains custom types in a list of options; its last line names the type.
    return str(exc).strip().splitlines()[-1]


def _has_fields(cls: type) -> bool:
    return dataclasses.is_dataclass(cls) or issubclass(cls, msgspec.Struct)


def _struct_fields(event: Event) -> dict[str, Any]:
    fields = msgspec.to_builtins(event)  # honours the Struct's renames
    if not isinstance(fields, dict):
        raise TypeError(f"{type(event).__qualname__} must encode as an object (array_like?)")
    return fields


def _pydantic_fields(event: Event) -> dict[str, Any]:
    fields = event.model_dump(mode="json")  # type: ignore[attr-defined]
    if not isinstance(fields, dict):
        raise TypeError("model_dump() did not return a dict")
    return fields


def _non_finite_path(value: Any, depth: int = 0) -> str | None:
    """The path below `value` of the first NaN or infinite float in it ("" for `value`
    itself, ".amount" or "[2]" below it), or None. The path is written only on the way back
    from one found: a payload with a None in it, the common case that is searched, holds none,
    and writing every member's path was most of the search's time."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ""
    if depth > _MAX_DEPTH or value is None or isinstance(value, _SCALARS):
        return None
    indexed = False
    if isinstance(value, dict):
        members: Any = value.items()
    elif isinstance(value, _COLLECTIONS):
        members, indexed = enumerate(value), True
    else:
        names = _field_names(value)
        if names is None:
            return None
        members = ((name, getattr(value, name, None)) for name in names)
    for key, member in members:
        # Members are mostly of a type that holds no float, or a float: both are settled
        # here, without the call and the isinstance checks a nested value needs.
        kind = type(member)
        if kind in _HOLDS_NO_FLOAT or (kind is float and math.isfinite(member)):
            continue
        found = _non_finite_path(member, depth + 1)
        if found is not None:
            return (f"[{key}]" if indexed else f".{key}") + found
    return None


# None, as often as asked: paired with a payload's fields to count those that are None.
_NONES = itertools.repeat(None)

# Exact types that cannot be or hold a float, passed over in one lookup: most members of a
# payload are one of these, and the isinstance checks below them cost several times as much.
# Exact on purpose: a subclass (an enum of floats, a custom str) takes the general way.
_HOLDS_NO_FLOAT = frozenset(
    {
        str,
        int,
        bool,
        bytes,
        type(None),
        decimal.Decimal,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
        uuid.UUID,
    }
)

# Tuples, built once: `str | bytes | int` in an isinstance call builds a new union each time,
# which took longer than the check.
_SCALARS = (str, bytes, int)
_COLLECTIONS = (list, tuple, set, frozenset)

# Deeper than orjson encodes: a payload that nests more fails to encode before this walk.
_MAX_DEPTH = 256


def _field_names(value: Any) -> Sequence[str] | None:
    """The fields of a dataclass, Struct or pydantic model instance; None for other values."""
    return None if isinstance(value, type) else _field_names_of(type(value))


# A class's fields do not change, and reading them was most of a walk's cost. Weak keys:
# event classes made at run time (tests, many types) leave with their last reference.
_FIELD_NAMES: weakref.WeakKeyDictionary[type, tuple[str, ...] | None] = weakref.WeakKeyDictionary()


def _field_names_of(cls: type) -> tuple[str, ...] | None:
    """The fields of a dataclass, Struct or pydantic model class; None for other classes."""
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        names = _FIELD_NAMES[cls] = _read_field_names(cls)
        return names
    except TypeError:  # a class that takes no weak reference: read each time
        return _read_field_names(cls)


def _read_field_names(cls: type) -> tuple[str, ...] | None:
    if dataclasses.is_dataclass(cls):
        return tuple(field.name for field in dataclasses.fields(cls))
    if issubclass(cls, msgspec.Struct):
        return tuple(cls.__struct_fields__)
    model_fields = getattr(cls, "model_fields", None)
    return tuple(model_fields) if isinstance(model_fields, dict) else None


def _builtin(value: Any) -> Any:
    return msgspec.to_builtins(value)
