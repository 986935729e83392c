"""Events: the base class, wire names, and the context a handler reads."""

from __future__ import annotations

import re
import weakref
from contextvars import ContextVar
from typing import ClassVar

from .errors import EventDefinitionError

__all__ = ["Event", "event_context", "event_type_name", "serial_key_of"]

# Wire names end up inside a Redis hash tag ("prefix:{Name}:..."), so braces are excluded
# and the alphabet is kept small enough to be safe in any key, URL or metric label.
_WIRE_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,128}")


class Event:
    """Base class of events: subclass it as a dataclass, a msgspec Struct
    (`kw_only=True`) or a pydantic model, with `id: str`.

    `(wire name, id)` identifies an event: at most one event of a type with a given id is
    pending at a time. The wire name is the class name unless the class sets
    `__event_type__ = "name"` (1-128 letters, digits, `_`, `.` or `-`); it is never read
    from a payload. The other fields are the payload, decoded into their annotated types.
    """

    __slots__ = ()
    __event_type__: ClassVar[str]
    __serial_key__: ClassVar[str]
    """Optional: the name of a field; events with the same value of it are handled one at a
    time, in due order, across every service (see the flow control guide, "Serial keys")."""
    id: str


event_context: ContextVar[dict[str, str]] = ContextVar("aioqueue_event_context")
"""The context given at enqueue time (`enqueue(..., context={...})`), a `dict[str, str]`
set while a handler runs, in async and sync (threaded) handlers alike:
`event_context.get()["trace_id"]`."""


# Looked up on every enqueue; weak so that classes made at run time can still go away.
_wire_names: weakref.WeakKeyDictionary[type[Event], str] = weakref.WeakKeyDictionary()


def event_type_name(event_class: type[Event]) -> str:
    """The wire name of an event class: its `__event_type__`, else its name. Raises
    EventDefinitionError for a class that is no Event or whose name is not a wire name."""
    if not (isinstance(event_class, type) and issubclass(event_class, Event)):
        raise EventDefinitionError(
            f"{event_class!r} is not an event class: subclass aioqueue.Event"
        )
    name = _wire_names.get(event_class)
    if name is None:
        name = _wire_names[event_class] = _validated_wire_name(event_class)
    return name


def _validated_wire_name(event_class: type[Event]) -> str:
    # Only the class's own setting counts: a subclass is a different event type.
    name = event_class.__dict__.get("__event_type__", event_class.__name__)
    if not isinstance(name, str) or not _WIRE_NAME.fullmatch(name):
        raise EventDefinitionError(
            f"event type name {name!r} of {event_class.__qualname__} must be 1-128 characters "
            "of letters, digits, '_', '.' or '-'"
        )
    return name


def serial_key_of(event_class: type[Event]) -> str | None:
    """The field named by the class's `__serial_key__`, or None; raises EventDefinitionError
    when it names no field of the class."""
    field = getattr(event_class, "__serial_key__", None)
    if field is None:
        return None
    fields = {
        name for klass in event_class.__mro__ for name in getattr(klass, "__annotations__", {})
    }
    if not isinstance(field, str) or field not in fields or field.startswith("__"):
        raise EventDefinitionError(
            f"__serial_key__ of {event_class.__qualname__} must name one of its fields, "
            f"got {field!r}"
        )
    return field
