"""Staying alive through Redis errors: the background loops log them and back off."""

from __future__ import annotations

import logging
import random

import anyio
from redis.exceptions import RedisClusterException, RedisError

__all__ = ["REDIS_ERRORS", "ErrorBackoff", "logger"]

logger = logging.getLogger("aioqueue")

# What a lost or failing server looks like from redis-py: its own errors (ConnectionError,
# TimeoutError and friends derive from RedisError) and the OS's socket errors. On a cluster
# also RedisClusterException (not a RedisError: "cannot be connected", SlotNotCoveredError,
# raised while a failover is under way), and AttributeError: redis-py's cluster client (8.1)
# disconnects a node's connections while other commands are using them when one command hits
# a connection error or CLUSTERDOWN, and those fail inside redis-py with "'NoneType' object
# has no attribute 'writelines'". The loops that catch these only wrap single Redis calls.
REDIS_ERRORS = (RedisError, RedisClusterException, OSError, AttributeError)


class ErrorBackoff:
    """Sleeps up to 50 ms after the first error in a row, doubling up to 1 s; success resets
    it. Each sleep is drawn from the upper half of its bound ("equal jitter"), so that the
    loops of many workers that lost the same server do not all try it again in the same
    instant, while none sleeps longer than the bound.

    The cap is how late a loop may find a server that is back: with 5 s, delivery resumed 1.4 s
    after a Sentinel failover of about 1.8 s had ended (tests/test_sentinel_failover.py: the
    loops were in their 1.6 s sleep; 0.8 s with 1 s), and up to 5 s after a long one. A try a
    second against a server that is down costs it nothing worth saving.
    """

    __slots__ = ("_delay", "_failures", "_what")

    FIRST = 0.05
    CAP = 1.0

    def __init__(self, what: str) -> None:
        self._what = what
        self._failures = 0
        self._delay = self.FIRST

    async def sleep_after(self, error: BaseException) -> None:
        self._failures += 1
        seconds = self._delay * (0.5 + random.random() / 2)
        # The first error of a streak gets a traceback; the rest of the streak one line each.
        logger.warning(
            "%s failed (%s: %s); retrying in %.3f s",
            self._what,
            type(error).__name__,
            error,
            seconds,
            exc_info=error if self._failures == 1 else None,
        )
        await anyio.sleep(seconds)
        self._delay = min(self.CAP, self._delay * 2)

    def reset(self) -> None:
        if self._failures:
            logger.info("%s recovered after %d failed tries", self._what, self._failures)
        self._failures = 0
        self._delay = self.FIRST
