"""Handler timeouts: one timer per consumer and one cancel scope per worker, not per call."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["STUCK_AFTER", "HandlerTimeouts", "TimeoutLane"]

# A call still running this long after it was cut off ignores its cancellation (an await
# that cannot be cancelled, such as a thread's): reported once, as its event stays leased.
STUCK_AFTER = 1.0


class TimeoutLane:
    """One worker's handler calls: the cancel scope the worker runs them in, the call running
    now (None between calls) and when it must be cut off."""

    __slots__ = ("call", "cut", "deadline", "scope", "stuck_check")

    def __init__(self) -> None:
        self.deadline = math.inf
        self.stuck_check = math.inf
        """When to report the cut-off call if it is still running (once)."""
        self.scope: anyio.CancelScope | None = None
        self.call: Any = None
        """What the worker needs to settle the running call if it is cut off."""
        self.cut = False
        """Whether the running call was cut off (its cancellation may be on its way)."""


class HandlerTimeouts:
    """Cuts off handler calls that outlive the handler timeout.

    A deadline per call (anyio's move_on_after) costs a cancel scope and a loop timer per
    event, a noticeable share of a consumer's time at thousands of events a second. Instead
    each worker runs its calls inside one long-lived cancel scope (its lane's), and one task
    cancels that scope when the running call is overdue; the worker then settles that call as
    timed out and opens a new scope. Every call gets the same timeout, so a call that starts
    later ends later: the task wakes at the earliest deadline of the calls running, and
    otherwise every `timeout`, and never needs waking early.
    """

    def __init__(self, timeout: float, on_stuck: Callable[[Any], None] = lambda call: None) -> None:
        self.timeout = timeout
        self._on_stuck = on_stuck
        self._lanes: list[TimeoutLane] = []

    def lane(self) -> TimeoutLane:
        lane = TimeoutLane()
        self._lanes.append(lane)
        return lane

    def start(self, lane: TimeoutLane, call: Any) -> None:
        """A call starts in `lane`: cut it off `timeout` from now."""
        lane.call = call
        lane.cut = False
        lane.deadline = time.monotonic() + self.timeout

    @staticmethod
    def stop(lane: TimeoutLane) -> None:
        """The call ended (however): nothing in `lane` is to be cut off."""
        lane.deadline = math.inf
        lane.stuck_check = math.inf
        lane.call = None

    async def run(self) -> None:
        """Cuts off overdue calls until cancelled."""
        while True:
            now = time.monotonic()
            # A call starting after this pass ends no sooner than now + timeout.
            next_pass = now + self.timeout
            for lane in self._lanes:
                if lane.deadline <= now:
                    lane.deadline = math.inf  # once: the scope stays cancelled
                    lane.cut = True
                    lane.stuck_check = now + STUCK_AFTER
                    if lane.scope is not None:
                        lane.scope.cancel()
                elif lane.stuck_check <= now:
                    lane.stuck_check = math.inf
                    if lane.call is not None:
                        self._on_stuck(lane.call)
                next_pass = min(next_pass, lane.deadline, lane.stuck_check)
            # anyio's loop clock is monotonic too; sleeping a hair long is harmless.
            await anyio.sleep(max(0.0, next_pass - now))
