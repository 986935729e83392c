"""Retry policies: how long to wait before the next attempt of a failed event."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from .durations import Duration, to_seconds

__all__ = ["ExponentialBackoff", "FixedDelays", "RetryPolicy"]


class RetryPolicy(Protocol):
    """Decides the delay before the next attempt."""

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt number `attempt` (1 for the first) failed."""
        ...


class ExponentialBackoff:
    """`base * 2**(attempt-1)` seconds, at most `cap`.

    With jitter, the delay is drawn uniformly from its upper half, so failures of many events
    at once spread out without any retry coming much sooner than planned.
    """

    __slots__ = ("base", "cap", "jitter")

    def __init__(
        self, base: Duration = 1.0, cap: Duration = 3600.0, *, jitter: bool = True
    ) -> None:
        self.base = to_seconds(base, "ExponentialBackoff base")
        self.cap = to_seconds(cap, "ExponentialBackoff cap")
        if self.base < 0 or self.cap < self.base:
            raise ValueError(
                f"ExponentialBackoff needs 0 <= base <= cap, got base={self.base}, cap={self.cap}"
            )
        self.jitter = jitter

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt `attempt` (1 for the first) failed:
        `min(cap, base * 2**(attempt - 1))`, or a uniform draw from its upper half with
        jitter."""
        # The exponent is bounded so huge attempt numbers cannot overflow a float.
        planned = min(self.cap, self.base * 2.0 ** min(max(attempt - 1, 0), 64))
        if self.jitter:
            return random.uniform(planned / 2, planned)
        return planned

    def __repr__(self) -> str:
        return f"ExponentialBackoff(base={self.base}, cap={self.cap}, jitter={self.jitter})"


class FixedDelays:
    """The n-th failed attempt waits `delays[n-1]`; the last delay repeats after that."""

    __slots__ = ("delays",)

    def __init__(self, delays: Sequence[Duration]) -> None:
        if not delays:
            raise ValueError("FixedDelays needs at least one delay")
        self.delays = tuple(to_seconds(d, "FixedDelays delay") for d in delays)
        if any(d < 0 for d in self.delays):
            raise ValueError(f"FixedDelays delays must be >= 0, got {self.delays}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt `attempt` (1 for the first) failed: the
        `attempt`-th delay, or the last one for every attempt beyond the list."""
        return self.delays[min(max(attempt, 1), len(self.delays)) - 1]

    def __repr__(self) -> str:
        return f"FixedDelays({list(self.delays)})"
