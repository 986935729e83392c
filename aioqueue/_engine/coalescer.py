"""Coalescing concurrent calls: requests that arrive while one batch is in flight share the
next call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import anyio

__all__ = ["Coalescer"]

T = TypeVar("T")
R = TypeVar("R")


class _Request(Generic[T, R]):
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = anyio.Event()
        self.result: R | None = None
        self.error: BaseException | None = None


class Coalescer(Generic[T, R]):
    """Sends requests in batches without a timer or a background task.

    The first caller to find no batch in flight becomes the flusher: it sends everything
    waiting, and keeps sending until nothing is left. A lone call therefore costs one round
    trip as before, while 32 concurrent calls share a handful. The flushing runs shielded
    from the flusher's own cancellation, because other callers are waiting on it.
    """

    def __init__(self, flush: Callable[[list[T]], Awaitable[Sequence[R]]], max_batch: int) -> None:
        self._flush = flush
        self._max_batch = max_batch
        self._waiting: list[_Request[T, R]] = []
        self._flushing = False

    async def submit(self, item: T) -> R:
        request: _Request[T, R] = _Request(item)
        self._waiting.append(request)
        if not self._flushing:
            self._flushing = True
            try:
                with anyio.CancelScope(shield=True):
                    await self._flush_waiting()
            finally:
                self._flushing = False
        await request.done.wait()
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[return-value]

    async def _flush_waiting(self) -> None:
        while self._waiting:
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            try:
                results = await self._flush([request.item for request in batch])
            except Exception as exc:  # every caller in the batch gets the same error
                for request in batch:
                    request.error = exc
            else:
                for request, result in zip(batch, results, strict=True):
                    request.result = result
            finally:
                for request in batch:
                    request.done.set()
