"""Checks that several entry points share (the service's builder and the SyncProducer, the
functions that take one set of keywords), so that one input is refused the same way, with
the same message, wherever it is given."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from .errors import ConfigurationError
from .event import Event, serial_key_of

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_PAYLOAD_BYTES_LIMIT",
    "checked",
    "int_in_range",
    "refuse_partitioned_serial_key",
    "refuse_unknown_keywords",
]

T = TypeVar("T")
V = TypeVar("V")

DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
MAX_PAYLOAD_BYTES_LIMIT = 512 * 1024 * 1024
"""Redis refuses a string above 512 MB, so no setting may allow a larger payload."""


def int_in_range(
    name: str,
    value: int,
    low: int,
    high: int,
    error: Callable[[str], Exception] = ConfigurationError,
) -> int:
    """`value` if it is an int (not a bool) from `low` to `high`, else `error` (by default
    ConfigurationError) saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def checked(convert: Callable[[V], T], value: V, name: str) -> T:
    """Runs a validating conversion, turning its TypeError/ValueError into a config error."""
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"invalid {name}: {exc}") from exc


def refuse_partitioned_serial_key(event_class: type[Event], partitions: int) -> None:
    """A type with a __serial_key__ keeps its keys in one hash tag: it has one partition."""
    if partitions != 1 and serial_key_of(event_class) is not None:
        raise ConfigurationError(
            f"partitions of {event_class.__qualname__}: a type with a __serial_key__ "
            "cannot be partitioned (its keys must live in one hash tag, or two partitions "
            "could run events of one key at once)"
        )


def refuse_unknown_keywords(
    caller: str, given: Mapping[str, object], known: Collection[str]
) -> None:
    """The TypeError Python raises for a misspelt keyword, for a function that takes a set of
    keywords declared once as a TypedDict (`**options: Unpack[...]`), which Python does not
    check by itself."""
    unknown = sorted(name for name in given if name not in known)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
