"""Coalescing concurrent calls: requests that arrive while one batch is in flight share the
next call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

__all__ = ["Coalescer"]

T = TypeVar("T")
R = TypeVar("R")


class Coalescer(Generic[T, R]):
    """Sends requests in batches without a timer or a background task.

    The first caller to find no batch in flight becomes the flusher: it sends everything
    waiting, and keeps sending until nothing is left. Before each batch it lets the event
    loop run once, so that every caller able to submit right now (those the previous batch
    just answered, first of all) joins it: 32 concurrent callers share one call per round
    trip instead of splitting into two alternating halves, and a lone call costs one loop
    turn more. The flushing runs shielded from the flusher's own cancellation, because other
    callers are waiting on it.
    """

    def __init__(self, flush: Callable[[list[T]], Awaitable[Sequence[R]]], max_batch: int) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._items: list[T] = []
        # Each request's future, in the order of _items; asyncio's own futures rather than
        # anyio Events, because one is made per request and the redis client is asyncio's.
        self._futures: list[asyncio.Future[R]] = []
        self._flushing = False

    async def submit(self, item: T) -> R:
        future: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._items.append(item)
        self._futures.append(future)
        if not self._flushing:
            self._flushing = True
            try:
                with anyio.CancelScope(shield=True):
                    await self._flush_waiting()
            finally:
                self._flushing = False
        return await future

    async def _flush_waiting(self) -> None:
        while self._items:
            if len(self._items) < self._max_batch:
                await asyncio.sleep(0)
            items, futures = self._items[: self._max_batch], self._futures[: self._max_batch]
            del self._items[: self._max_batch], self._futures[: self._max_batch]
            try:
                results = await self._flush(items)
            except BaseException as exc:  # every caller in the batch gets the same error
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
                if not isinstance(exc, Exception):
                    self._fail_waiting(exc)
                    raise
            else:
                for future, result in zip(futures, results, strict=True):
                    if not future.done():
                        future.set_result(result)

    def _fail_waiting(self, exc: BaseException) -> None:
        """The flusher is going away (KeyboardInterrupt, SystemExit): nobody would send what
        waits, so its callers get the error instead of waiting forever."""
        for future in self._futures:
            if not future.done():
                future.set_exception(exc)
        self._items.clear()
        self._futures.clear()
