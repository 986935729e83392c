"""Durations: every setting and argument takes a timedelta or a number of seconds."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TypeAlias

Duration: TypeAlias = timedelta | float | int

__all__ = ["Duration", "to_seconds"]


def to_seconds(value: Duration, name: str) -> float:
    """Returns `value` in seconds; raises TypeError/ValueError naming `name` if it is not one."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise TypeError(f"{name} must be a timedelta or a number of seconds, got {value!r}")
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return seconds
