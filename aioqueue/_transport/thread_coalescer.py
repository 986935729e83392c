"""Coalescing calls from many threads: requests that arrive while a call is under way share
the next one (a group commit), as coalescer.py does for the tasks of one event loop.

A thread whose request finds no call under way for its key sends it at once, alone;
threads that arrive while a call is under way wait, and when it returns the first of them
sends the next group (theirs, oldest first, up to the limit) while the others wait for it.
One thread alone sends each request in a call of its own, as if nothing were shared. Under
load each call carries many requests: a blocking SyncProducer shared by 32 threads made one
script call an event, and a script call's fixed cost on the server (about 20 µs, and a round
trip) was most of an event's.

Nothing runs in the background and no lock is held across a call. A fork in the middle of
a call leaves the child a fresh coalescer (the calls under way belong to the parent's
threads), so nothing the child inherits can be held for ever.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["ThreadCoalescer"]

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
R = TypeVar("R")


class _Request(Generic[T, R]):
    """A waiting thread's request, and what it waits for: its result, or a turn to send."""

    __slots__ = ("answered", "error", "item", "result", "sends")

    def __init__(self, item: T) -> None:
        self.item = item
        # Only a thread that waits makes one: an Event costs more than the rest of a lone call.
        self.answered = threading.Event()
        self.sends = False
        """Set, before `answered`, on the request whose thread sends the next group."""
        self.result: R | None = None
        self.error: BaseException | None = None

    def outcome(self) -> R:
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # set with the group's results


class ThreadCoalescer(Generic[K, T, R]):
    """Sends the requests of many threads in shared calls of at most `limit` requests.

    `send(key, items)` makes one call for requests that share `key` and returns a result per
    item, in order; an exception it raises is raised in every thread whose request was in
    that call. Requests of different keys never share a call, and may be sent at once.
    """

    def __init__(self, send: Callable[[K, list[T]], Sequence[R]], limit: int) -> None:
        self._send = send
        self._limit = limit
        self._lock = threading.Lock()
        self._waiting: dict[K, list[_Request[T, R]]] = {}
        """Per key with a call under way: the requests waiting for a later call."""
        _COALESCERS.add(self)

    def submit(self, key: K, item: T) -> R:
        """Sends `item` in a call shared with other threads' requests; returns its result."""
        with self._lock:
            waiting = self._waiting.get(key)
            if waiting is None:  # no call under way: this thread sends its own at once
                self._waiting[key] = []
            else:
                request: _Request[T, R] = _Request(item)
                waiting.append(request)
        if waiting is None:
            try:
                [result] = self._send_checked(key, [item])
            finally:
                self._next_turn(key)
            return result
        try:
            request.answered.wait()
        except BaseException:  # interrupted (KeyboardInterrupt): no longer waiting
            self._withdraw(key, request)
            raise
        if request.sends:
            self._send_group(key)
        return request.outcome()

    def waiting(self, key: K) -> int:
        """Requests of `key` waiting for a call (what the tests watch)."""
        with self._lock:
            return len(self._waiting.get(key, ()))

    def _send_group(self, key: K) -> None:
        """Sends the oldest waiting requests of `key` (the sender's own is the oldest) and
        answers them, having handed the next group to the thread of the first one left."""
        with self._lock:
            waiting = self._waiting[key]
            group = waiting[: self._limit]
            del waiting[: self._limit]
        try:
            results = self._send_checked(key, [request.item for request in group])
        except BaseException as exc:
            for request in group:
                request.error = exc
        else:
            for request, result in zip(group, results, strict=True):
                request.result = result
        finally:
            self._next_turn(key)
            for request in group:
                request.answered.set()

    def _send_checked(self, key: K, items: list[T]) -> Sequence[R]:
        results = self._send(key, items)
        if len(results) != len(items):
            raise RuntimeError(f"{len(results)} results for {len(items)} requests")
        return results

    def _next_turn(self, key: K) -> None:
        """After a call: the first waiting request's thread sends next; none waits, none does."""
        with self._lock:
            waiting = self._waiting[key]
            if not waiting:
                del self._waiting[key]
                return
            following = waiting[0]
            following.sends = True
        following.answered.set()

    def _withdraw(self, key: K, request: _Request[T, R]) -> None:
        """Takes an interrupted thread's request out of the queue; if it had just been given
        the next turn, gives that turn on. A request already in a call stays in it."""
        with self._lock:
            waiting = self._waiting.get(key)
            if waiting is None or request not in waiting:
                return
            waiting.remove(request)
            if not request.sends:
                return
        self._next_turn(key)

    def _forget_after_fork(self) -> None:
        # The child's only thread is the one that forked: no request of its own waits.
        self._lock = threading.Lock()
        self._waiting = {}


# Every coalescer of the process, for the fork handler (weakly: they go with their owner).
_COALESCERS: weakref.WeakSet[ThreadCoalescer[Any, Any, Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for coalescer in list(_COALESCERS):
        coalescer._forget_after_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)
