"""Handler timeouts: one timer per consumer rather than one per handler call."""

from __future__ import annotations

import math
import time

import anyio

__all__ = ["HandlerTimeouts", "TimeoutLane"]


class TimeoutLane:
    """The handler call one worker is running, and when it must be cut off."""

    __slots__ = ("deadline", "scope")

    def __init__(self) -> None:
        self.deadline = math.inf
        self.scope: anyio.CancelScope | None = None


class HandlerTimeouts:
    """Cancels handler calls that outlive the handler timeout.

    A deadline per call (anyio's move_on_after) costs a loop timer per event, which at
    thousands of events per second is a noticeable share of a consumer's time. Every call
    gets the same timeout, so a call that starts later always ends later: one task that
    wakes at the earliest deadline of the calls running, and otherwise every `timeout`,
    never needs waking early, and a call only has to note when it started.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._lanes: list[TimeoutLane] = []

    def lane(self) -> TimeoutLane:
        lane = TimeoutLane()
        self._lanes.append(lane)
        return lane

    def start(self, lane: TimeoutLane, scope: anyio.CancelScope) -> None:
        """`scope` (entered around the handler call) is cancelled at the timeout."""
        lane.scope = scope
        lane.deadline = time.monotonic() + self.timeout

    @staticmethod
    def stop(lane: TimeoutLane) -> None:
        lane.deadline = math.inf
        lane.scope = None

    async def run(self) -> None:
        """Cuts off overdue calls until cancelled."""
        while True:
            now = time.monotonic()
            # A call starting after this pass ends no sooner than now + timeout.
            next_pass = now + self.timeout
            for lane in self._lanes:
                if lane.deadline <= now and lane.scope is not None:
                    lane.scope.cancel()
                    self.stop(lane)
                else:
                    next_pass = min(next_pass, lane.deadline)
            # anyio's loop clock is monotonic too; sleeping a hair long is harmless.
            await anyio.sleep(max(0.0, next_pass - now))
