"""Handing claimed deliveries to a pool of workers, waking no more workers than needed."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Generic, TypeVar

__all__ = ["Handoff"]

T = TypeVar("T")


class Handoff(Generic[T]):
    """Items for a pool of workers, with as few task switches as the handlers allow.

    A queue that wakes one waiting worker per item wastes most of those wake-ups when
    handlers finish without pausing: the first worker to run takes every item, and the
    others wake up to nothing. Here one worker is woken; each time a worker takes an item
    and more are waiting, it asks for a check on the next turn of the event loop, and only
    if items are still waiting then (its handler paused) is another worker woken. Handlers
    that pause still start one loop turn after another; handlers that don't run back to
    back in one task.
    """

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._waking = 0
        """Workers woken that have not run yet: they will take items, so wake no more."""
        self._check_scheduled = False

    def put(self, item: T) -> None:
        self._items.append(item)
        if self._waking == 0:
            self._wake_one()

    async def get(self) -> T:
        while not self._items:
            woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle.append(woken)
            try:
                await woken
            except BaseException:
                if woken.done() and not woken.cancelled():
                    self._waking -= 1  # woken, then cancelled: pass the wake-up on
                    self._schedule_check()
                else:
                    woken.cancel()
                    # _wake_one may have dropped it already: it discards futures that are
                    # done, and a cancelled one is, before this task runs again.
                    with contextlib.suppress(ValueError):
                        self._idle.remove(woken)
                raise
            self._waking -= 1
        item = self._items.popleft()
        if self._items:
            self._schedule_check()
        return item

    def take_up_to(self, most: int) -> list[T]:
        """Takes up to `most` items that wait now, without waiting, stopping before a None
        (which tells a worker to stop: it is left for the worker that gets it)."""
        taken: list[T] = []
        items = self._items
        while items and len(taken) < most and items[0] is not None:
            taken.append(items.popleft())
        if items:
            self._schedule_check()
        return taken

    def take_all(self) -> list[T]:
        """Takes every item no worker has taken yet."""
        items = list(self._items)
        self._items.clear()
        return items

    def _schedule_check(self) -> None:
        if not self._check_scheduled:
            self._check_scheduled = True
            asyncio.get_running_loop().call_soon(self._check)

    def _check(self) -> None:
        self._check_scheduled = False
        if self._items and self._waking == 0:
            self._wake_one()

    def _wake_one(self) -> None:
        while self._idle:
            woken = self._idle.popleft()
            if not woken.done():
                woken.set_result(None)
                self._waking += 1
                return
