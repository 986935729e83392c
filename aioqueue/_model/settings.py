"""Settings declared once: a builder's class attribute names the setting, its default and its
check, and its docstring below it says what it does. The builder method that sets it, and
what `build()` puts in the frozen config, follow from that one declaration; adding a setting
is one `Setting` and one field of the config (the builder test holds the two together).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, overload

from .durations import Duration, to_seconds
from .errors import ConfigurationError

__all__ = [
    "Configurable",
    "Setting",
    "any_value",
    "flag",
    "host",
    "integer",
    "port",
    "seconds",
    "settings_of",
]

In = TypeVar("In")
Out = TypeVar("Out")
B = TypeVar("B", bound="Configurable")


class Configurable(Protocol):
    """A builder: what its settings were set to, by name."""

    _values: dict[str, Any]


class Setting(Generic[In, Out]):
    """One setting of a builder (see the module docstring). On the builder,
    `builder.name(value)` sets it and returns the builder, so calls chain; `build()` runs
    the check, which turns what was given into the config's value or raises
    ConfigurationError naming the setting and what it allows."""

    def __init__(self, default: In, check: Callable[[str, In], Out], *, name: str = "") -> None:
        self.default = default
        self.check = check
        self.name = name
        """Its name; a setting shared by several builders is named where it is declared."""

    def __set_name__(self, owner: type, name: str) -> None:
        if self.name and self.name != name:
            raise TypeError(f"the setting {self.name!r} cannot be called {name!r} too")
        self.name = name

    @overload
    def __get__(self, builder: None, owner: type) -> Setting[In, Out]: ...

    @overload
    def __get__(self, builder: B, owner: type) -> Callable[[In], B]: ...

    def __get__(self, builder: B | None, owner: type) -> Setting[In, Out] | Callable[[In], B]:
        if builder is None:
            return self

        def set_value(value: In) -> B:
            builder._values[self.name] = value
            return builder

        set_value.__name__ = self.name
        return set_value

    def value(self, builder: Configurable) -> Out:
        """The checked value for the config: what the builder was given, else the default."""
        return self.of(builder._values.get(self.name, self.default))

    def of(self, given: In) -> Out:
        """`given` checked as this setting; raises ConfigurationError."""
        return self.check(self.name, given)


def settings_of(builder_class: type) -> list[Setting[Any, Any]]:
    """Every setting a builder class declares, in declaration order."""
    return [value for value in vars(builder_class).values() if isinstance(value, Setting)]


def seconds(low: float, high: float) -> Callable[[str, Duration], float]:
    """A duration (timedelta or seconds) from `low` to `high` seconds, as seconds."""

    def check(name: str, value: Duration) -> float:
        try:
            converted = to_seconds(value, name)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"invalid {name}: {exc}") from exc
        if math.isnan(converted) or not low <= converted <= high:
            raise ConfigurationError(f"{name} must be between {low} and {high} s, got {value!r}")
        return converted

    return check


def integer(low: int, high: int) -> Callable[[str, int], int]:
    """An int (not a bool) from `low` to `high`."""

    def check(name: str, value: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigurationError(
                f"{name} must be an integer from {low} to {high}, got {value!r}"
            )
        return value

    return check


def flag(name: str, value: bool) -> bool:
    return bool(value)


def any_value(name: str, value: Out) -> Out:
    """Taken as given (a pluggable object: its protocol is its check)."""
    return value


def port(name: str, value: int | None) -> int | None:
    """A TCP port (0: any free one), or None for none."""
    if value is None:
        return None
    return integer(0, 65535)(name, value)


def host(name: str, value: str) -> str:
    """A host name or address to listen on."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise ConfigurationError(f"{name} must be a host name or address, got {value!r}")
    return value
