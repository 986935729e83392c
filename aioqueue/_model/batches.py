"""How a batch handler's events are grouped: `service.add_batch_handler(...)`."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from .checks import int_in_range
from .durations import Duration, to_seconds
from .errors import HandlerRegistrationError

__all__ = ["MAX_BATCH_SIZE", "BatchHandler", "BatchOutcome", "Batching"]

MAX_BATCH_SIZE = 10_000
"""A claim takes a batch in one script call, and a ready list holds two: beyond this the
server would stall other clients for milliseconds at a time."""

BatchOutcome: TypeAlias = "bool | Mapping[str, bool]"
"""What a batch handler returns: True (every event finished), False (every event tried
again), or event id -> True or False, per event (an id left out is tried again)."""

BatchHandler: TypeAlias = (
    "Callable[[list[Any]], Awaitable[BatchOutcome]] | Callable[[list[Any]], BatchOutcome]"
)
"""An `async def` batch handler, or a plain function (run in a worker thread)."""


@dataclass(frozen=True, slots=True)
class Batching:
    """A batch handler is called with up to `max_size` events, as soon as that many are in
    hand or `max_wait` seconds after the first of them arrived."""

    max_size: int
    max_wait: float

    @classmethod
    def of(cls, max_size: int, max_wait: Duration) -> Batching:
        """Checks the values as add_batch_handler takes them; raises
        HandlerRegistrationError."""
        int_in_range("max_size", max_size, 1, MAX_BATCH_SIZE, HandlerRegistrationError)
        try:
            seconds = to_seconds(max_wait, "max_wait")
        except (TypeError, ValueError) as exc:
            raise HandlerRegistrationError(f"invalid max_wait: {exc}") from exc
        if math.isnan(seconds) or not 0 <= seconds <= 3600:
            raise HandlerRegistrationError(
                f"max_wait must be between 0 and 3600 s, got {max_wait!r}"
            )
        return cls(max_size, seconds)
