"""Waiting for a group of server processes (a cluster, a Sentinel group) to settle."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

__all__ = ["poll_until_settled"]

# Cluster gossip and Sentinel timers change state on their own, with nothing to wait on.
_POLL_INTERVAL = 0.02


def poll_until_settled(
    problem: Callable[[], str | None], deadline: float, failure: Callable[[str], Exception]
) -> None:
    """Calls `problem` (what is not right yet, or None once all is) until it returns None;
    past `deadline` (time.monotonic) raises `failure(last problem)`. An error reply or a
    refused connection counts as a problem: the process may still be starting, or be down
    on purpose."""
    last: str | None = "not checked yet"
    while True:
        try:
            last = problem()
        except (redis.RedisError, OSError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        if last is None:
            return
        if time.monotonic() >= deadline:
            raise failure(last)
        time.sleep(_POLL_INTERVAL)
