"""Handler slots: how many more events a consumer may take out of Redis right now."""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["SlotPool", "SlotRequest"]


class SlotRequest:
    """A taker waiting for free slots. `wakeup` is set once slots are granted, and may be set
    by anything else the taker should act on (finished events to carry, see Consumer)."""

    __slots__ = ("granted", "most", "wakeup")

    def __init__(self, most: int) -> None:
        self.most = most
        self.granted = 0
        # asyncio's Event rather than anyio's, which looks up the running async library
        # each time one is made: a taker makes one per claim.
        self.wakeup = asyncio.Event()


class SlotPool:
    """The free handler slots of one consumer, shared by the takers of its partitions.

    Slots go to waiting takers first come, first served, so a busy partition cannot starve
    the others. A taker gets every free slot up to what it asked for, so that it can claim
    several events in one call.
    """

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiting: deque[SlotRequest] = deque()

    def request(self, most: int) -> SlotRequest:
        """Queues a request for up to `most` slots; granted at once if slots are free."""
        request = SlotRequest(most)
        self._waiting.append(request)
        self._grant()
        return request

    def withdraw(self, request: SlotRequest) -> int:
        """Ends a request, woken or not; returns the slots it was granted (now the caller's)."""
        if request.granted == 0:
            self._waiting.remove(request)
        return request.granted

    @property
    def contended(self) -> bool:
        """Whether a taker is waiting for slots."""
        return bool(self._waiting)

    def release(self, count: int) -> None:
        if count > 0:
            self._free += count
            self._grant()

    def _grant(self) -> None:
        while self._waiting and self._free > 0:
            request = self._waiting.popleft()
            request.granted = min(self._free, request.most)
            self._free -= request.granted
            request.wakeup.set()
