"""Staying alive through Redis errors: the background loops log them and back off."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable

import anyio
from redis.exceptions import RedisClusterException, RedisError

__all__ = ["REDIS_ERRORS", "WARN_EVERY", "Causes", "ErrorBackoff", "causes", "logger"]

logger = logging.getLogger("aioqueue")

# What a lost or failing server looks like from redis-py: its own errors (ConnectionError,
# TimeoutError and friends derive from RedisError) and the OS's socket errors. On a cluster
# also RedisClusterException (not a RedisError: "cannot be connected", SlotNotCoveredError,
# raised while a failover is under way), and AttributeError: redis-py's cluster client (8.1)
# disconnects a node's connections while other commands are using them when one command hits
# a connection error or CLUSTERDOWN, and those fail inside redis-py with "'NoneType' object
# has no attribute 'writelines'". The loops that catch these only wrap single Redis calls.
REDIS_ERRORS = (RedisError, RedisClusterException, OSError, AttributeError)


# One warning per cause (the error's type and text) in this long, whatever number of loops
# meet it: a service waits on hundreds of queues, and a server that is down, or a setting
# that is wrong, must not fill a log with the same line.
WARN_EVERY = 10.0


class Causes:
    """When each cause was last warned of, and how many warnings of it were held back since
    (`clock`: seconds, monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._warned: dict[str, float] = {}
        self._held_back: dict[str, int] = {}

    def may_warn(self, cause: str) -> int | None:
        """None while `cause` was warned of less than WARN_EVERY ago (the warning is held
        back and counted); else how many were held back since the last one."""
        now = self._clock()
        last = self._warned.get(cause)
        if last is not None and now - last < WARN_EVERY:
            self._held_back[cause] = self._held_back.get(cause, 0) + 1
            return None
        if len(self._warned) > 1000:  # causes with changing texts: forget the old ones
            self._warned.clear()
        self._warned[cause] = now
        return self._held_back.pop(cause, 0)


causes = Causes()
"""Every loop's warnings of one process, held to one per cause (see WARN_EVERY)."""


class ErrorBackoff:
    """Sleeps up to 50 ms after the first error in a row, doubling up to 1 s; success resets
    it. Each sleep is drawn from the upper half of its bound ("equal jitter"), so that the
    loops of many workers that lost the same server do not all try it again in the same
    instant, while none sleeps longer than the bound.

    The cap is how late a loop may find a server that is back: with 5 s, delivery resumed 1.4 s
    after a Sentinel failover of about 1.8 s had ended (tests/faults/test_sentinel_failover.py: the
    loops were in their 1.6 s sleep; 0.8 s with 1 s), and up to 5 s after a long one. A try a
    second against a server that is down costs it nothing worth saving.

    Each failure is a warning of one line, at most one per cause (see WARN_EVERY) for all
    loops together; the traceback goes to DEBUG.
    """

    __slots__ = ("_delay", "_failures", "_warned", "_what")

    FIRST = 0.05
    CAP = 1.0

    def __init__(self, what: str) -> None:
        self._what = what
        self._failures = 0
        self._delay = self.FIRST
        self._warned = False

    async def sleep_after(self, error: BaseException) -> None:
        self._failures += 1
        seconds = self._delay * (0.5 + random.random() / 2)
        cause = f"{type(error).__name__}: {error}"
        held_back = causes.may_warn(cause)
        if held_back is not None:
            self._warned = True
            logger.warning(
                "%s failed (%s); retrying in %.3f s%s",
                self._what,
                cause,
                seconds,
                f" ({held_back} more like it not shown)" if held_back else "",
            )
        logger.debug("%s failed", self._what, exc_info=error)
        await anyio.sleep(seconds)
        self._delay = min(self.CAP, self._delay * 2)

    async def attempt(self, call: Callable[[], Awaitable[object]]) -> bool:
        """Runs `call` for a loop that repeats it: True when it succeeded (the backoff starts
        over), False after a Redis error, once this backoff's sleep is over."""
        try:
            await call()
        except REDIS_ERRORS as exc:
            await self.sleep_after(exc)
            return False
        self.reset()
        return True

    def reset(self) -> None:
        if self._failures and self._warned:
            logger.info("%s recovered after %d failed tries", self._what, self._failures)
        self._failures = 0
        self._warned = False
        self._delay = self.FIRST
