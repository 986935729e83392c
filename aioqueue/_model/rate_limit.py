"""A rate limit: at most `limit` handler starts of a type in any window of `per_ms`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RateLimit"]


@dataclass(frozen=True, slots=True)
class RateLimit:
    limit: int
    per_ms: int

    def __str__(self) -> str:
        return f"{self.limit}/{self.per_ms / 1000:g}s"
