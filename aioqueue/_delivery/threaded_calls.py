"""Sync handlers: a plain function runs in a worker thread, never on the event loop.

The Python form of a handler scheduler: Django ORM calls, `requests`, `smtplib` block, and a
blocking call on the loop would stall every other handler, the acknowledgements and the
dispatcher of the whole service. So a handler that is not a coroutine function runs through
`anyio.to_thread.run_sync`, bounded twice: by its consumer's `parallelism` (one worker per
slot, each waiting for its own thread) and by the service's `handler_threads` limiter, shared
by every sync handler of the service.

A call begins when it has a thread: until then its handler has not started, so a stopping
service gives its event back uncounted, and its handler timeout has not begun either. Its
lease is renewed with every other (leases.py) for as long as the service holds it.

A thread cannot be cancelled. A call past the handler timeout therefore goes on: a warning
names the handler, the attempt counts as failed whatever the function returns, and the
handler slot (and the thread) stay taken until it returns, its lease renewed, so its retry
is never dispatched, here or in another service, while it still runs. For the same reason a
stopping service waits for a call still running when its shutdown grace ends, and settles
its outcome as usual.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from aioqueue._transport.recovery import logger

from .leases import Lease

__all__ = [
    "LeaseLapsed",
    "NotStarted",
    "ThreadedCalls",
    "ThreadedResult",
    "handler_name_of",
    "is_async_handler",
    "overrun_text",
    "threaded_calls_for",
]


class NotStarted(Exception):
    """The call was waiting for a thread when its service stopped: no handler began."""


class LeaseLapsed(NotStarted):
    """The call waited for a thread until a lease of its events may have ended (see
    Lease.held_until): no handler began, and none may now."""


def is_async_handler(handler: object) -> bool:
    """Whether calling `handler` returns a coroutine to await: an `async def` function, a
    partial of one, or an object whose `__call__` is one."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - the method itself is inspected
    return call is not None and inspect.iscoroutinefunction(call)


def handler_name_of(handler: object) -> str:
    """How logs name a handler: a callable object's repr can be long and changing, its class
    names it well enough."""
    return str(getattr(handler, "__qualname__", type(handler).__qualname__))


def threaded_calls_for(
    handler: Callable[[Any], object],
    timeout: float,
    thread_limiter: anyio.CapacityLimiter | None,
) -> ThreadedCalls | None:
    """The threads a sync handler's calls run in (the service's `thread_limiter`, or anyio's
    default one); None for an async handler, which runs on the loop."""
    if is_async_handler(handler):
        return None
    return ThreadedCalls(
        handler,
        handler_name=handler_name_of(handler),
        limiter=thread_limiter or anyio.to_thread.current_default_thread_limiter(),
        timeout=timeout,
    )


@dataclass(slots=True)
class ThreadedResult:
    value: object
    """What the function returned."""
    overran: float | None = None
    """Seconds the call took when it ran past the handler timeout, else None."""


class ThreadedCalls:
    """Runs one sync handler's calls in worker threads (see the module docstring)."""

    def __init__(
        self,
        handler: Callable[[Any], object],
        *,
        handler_name: str,
        limiter: anyio.CapacityLimiter,
        timeout: float,
    ) -> None:
        self._handler = handler
        self._handler_name = handler_name
        self._limiter = limiter
        self._timeout = timeout
        self._waiting: set[anyio.CancelScope] = set()
        self._stopped = False
        # The threads a call may use once it holds a token of `limiter` (taken first, so
        # that the call knows when its thread starts): anyio's run_sync takes a limiter too.
        self._unbounded = anyio.CapacityLimiter(math.inf)

    def stop_waiting(self) -> None:
        """Calls waiting for a thread, now and from now on, raise NotStarted."""
        self._stopped = True
        for scope in self._waiting:
            scope.cancel()

    async def call(self, argument: object, leases: Sequence[Lease]) -> ThreadedResult:
        """Calls the handler with `argument` (an event, or a batch's list) in a thread with
        the caller's context (event_context, tracing, the delivery), setting `started` of
        the call's `leases` as the thread starts; raises what it raised, or NotStarted. Once
        the thread runs, cancelling this waits for it."""
        context = contextvars.copy_context()
        with anyio.CancelScope() as waiting:
            self._waiting.add(waiting)
            try:
                if self._stopped:
                    waiting.cancel()
                await self._limiter.acquire()
            finally:
                self._waiting.discard(waiting)
        if waiting.cancelled_caught:
            raise NotStarted
        try:
            started = time.monotonic()
            if any(lease.lapsed(started) for lease in leases):
                raise LeaseLapsed
            for lease in leases:
                lease.started = started
            outcome: ThreadedResult | None = None
            error: Exception | None = None
            # A timer rather than a watching task: a task and its task group per call cost
            # more than the thread hop itself, on the loop every other handler shares.
            overrun_warning = asyncio.get_running_loop().call_later(
                self._timeout, self._warn_at_timeout, leases
            )
            # Shielded: the thread runs on whatever happens to this task, and its outcome is
            # settled like any other, even when its service cuts its handlers off as it
            # stops (which then waits for it, its lease renewed, see Consumer.cut_off).
            with anyio.CancelScope(shield=True):
                try:
                    value = await anyio.to_thread.run_sync(
                        context.run, self._handler, argument, limiter=self._unbounded
                    )
                    outcome = ThreadedResult(value)
                except Exception as exc:
                    error = exc
                finally:
                    overrun_warning.cancel()
        finally:
            self._limiter.release()
        if error is not None:
            raise error
        assert outcome is not None
        elapsed = time.monotonic() - started
        if elapsed > self._timeout:
            outcome.overran = elapsed
        return outcome

    def _warn_at_timeout(self, leases: Sequence[Lease]) -> None:
        envelope = leases[0].envelope
        logger.warning(
            "sync handler %s has run %g s on %s %r (attempt %d)%s, past the handler timeout: "
            "a thread cannot be stopped, so the attempt counts as failed when it returns, and "
            "its slot stays taken and the event leased until then",
            self._handler_name,
            self._timeout,
            envelope.event_type,
            envelope.id,
            envelope.attempt,
            f" and {len(leases) - 1} more of its batch" if len(leases) > 1 else "",
        )


def overrun_text(timeout: float, attempt: int, took: float) -> str:
    """The error an overrunning sync call is settled with."""
    return (
        f"the handler did not finish within {timeout:g} s on attempt {attempt} (a sync "
        f"handler's thread cannot be stopped: it returned after {took:.3g} s)"
    )
