"""Sync handlers: a plain function runs in a worker thread, never on the event loop.

The Python form of a handler scheduler: Django ORM calls, `requests`, `smtplib` block, and a
blocking call on the loop would stall every other handler, the acknowledgements and the
dispatcher of the whole service. So a handler that is not a coroutine function runs through
`anyio.to_thread.run_sync`, bounded twice: by its consumer's `parallelism` (one worker per
slot, each waiting for its own thread) and by the service's `handler_threads` limiter, shared
by every sync handler of the service.

A thread cannot be cancelled. A call past the handler timeout therefore goes on: a warning
names the handler, the attempt counts as failed whatever the function returns, the handler
slot (and the thread) stay taken until it returns, and the event's lease is extended while it
runs, so its retry is never dispatched, here or in another service, while it still runs.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from aioqueue._engine.envelope import Envelope
from aioqueue._engine.recovery import REDIS_ERRORS, logger
from aioqueue._engine.store import QueueStore

__all__ = ["ThreadedCalls", "ThreadedResult", "is_async_handler", "overrun_text"]

# Seconds before a failed lease extension is tried again (a cut connection reconnects at once).
_RETRY_EXTENSION_AFTER = 0.1


def is_async_handler(handler: object) -> bool:
    """Whether calling `handler` returns a coroutine to await: an `async def` function, a
    partial of one, or an object whose `__call__` is one."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - the method itself is inspected
    return call is not None and inspect.iscoroutinefunction(call)


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
        lease_ms: int,
    ) -> None:
        self._handler = handler
        self._handler_name = handler_name
        self._limiter = limiter
        self._timeout = timeout
        self._lease_ms = lease_ms

    async def call(self, event: object, store: QueueStore, envelope: Envelope) -> ThreadedResult:
        """Calls the handler in a thread with the caller's context (event_context, tracing);
        raises what it raised. Cancelling this waits for the thread to return."""
        context = contextvars.copy_context()
        started = time.monotonic()
        outcome: ThreadedResult | None = None
        error: Exception | None = None
        async with anyio.create_task_group() as overrun_watch:
            overrun_watch.start_soon(self._watch_overrun, store, envelope)
            try:
                value = await anyio.to_thread.run_sync(
                    context.run, self._handler, event, limiter=self._limiter
                )
                outcome = ThreadedResult(value)
            # Caught inside the task group and raised after it: raised inside, the handler's
            # error would leave wrapped in an exception group.
            except Exception as exc:
                error = exc
            finally:
                overrun_watch.cancel_scope.cancel()
        if error is not None:
            raise error
        assert outcome is not None
        elapsed = time.monotonic() - started
        if elapsed > self._timeout:
            outcome.overran = elapsed
        return outcome

    async def _watch_overrun(self, store: QueueStore, envelope: Envelope) -> None:
        """From the timeout on: warns once, then keeps the attempt leased until cancelled."""
        await anyio.sleep(self._timeout)
        logger.warning(
            "sync handler %s has run %g s on %s %r, past the handler timeout: a thread cannot "
            "be stopped, so the attempt counts as failed when it returns, and its slot stays "
            "taken and the event stays leased until then",
            self._handler_name,
            self._timeout,
            envelope.event_type,
            envelope.id,
        )
        # The dispatcher pre-scheduled the next attempt for the timeout plus a margin (one
        # second): move it on before that margin runs out, and again every half lease. A
        # failed extension is tried again soon, while the margin may still hold.
        while True:
            try:
                if not await store.extend_lease(envelope, self._lease_ms):
                    return  # cancelled, replaced or settled meanwhile: nothing left to keep
            except REDIS_ERRORS as exc:
                logger.warning(
                    "could not extend the lease of %s %r: %s", envelope.event_type, envelope.id, exc
                )
                await anyio.sleep(_RETRY_EXTENSION_AFTER)
                continue
            await anyio.sleep(max(_RETRY_EXTENSION_AFTER, self._lease_ms / 2000))


def overrun_text(handler_name: str, timeout: float, took: float) -> str:
    """The error an overrunning sync call is settled with."""
    return (
        f"handler {handler_name} timed out after {timeout:g} s (a sync handler's thread "
        f"cannot be stopped: it returned after {took:.3g} s)"
    )
