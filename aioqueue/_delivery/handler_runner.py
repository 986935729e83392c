"""Running a handler on one claimed delivery: decode, context, timeout, and failures."""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from types import MappingProxyType
from typing import Any

import anyio
import msgspec

from aioqueue._model.config import ServiceConfig
from aioqueue._model.delivery import Delivery, delivery_under_way, describe_delivery
from aioqueue._model.errors import PayloadDecodeError
from aioqueue._model.event import Event, event_context
from aioqueue._model.metrics import Outcome
from aioqueue._transport.recovery import logger
from aioqueue._wire.envelope import Envelope, died_at_from_ms

from .acknowledger import NotSettledError, settle
from .handler_timeouts import HandlerTimeouts, TimeoutLane
from .leases import Lease
from .runner_base import Runner
from .threaded_calls import NotStarted, overrun_text

__all__ = [
    "Handler",
    "HandlerRunner",
    "NotStarted",
    "Succeeded",
    "settle_failure",
]

Handler = Callable[[Any], Awaitable[bool]] | Callable[[Any], bool]
"""An `async def` handler, or a plain function (run in a worker thread, see threaded_calls)."""

# How much of an unexpected return value the error text quotes.
_RESULT_REPR_LIMIT = 200


class _Call(msgspec.Struct, gc=False, eq=False):
    """A handler call running in a lane, with what settling it needs; also what
    current_delivery() describes (see DeliverySource).

    Untracked by the garbage collector, as Succeeded is and for the same reason (see there);
    compared by identity, as a lane compares its running call."""

    lease: Lease
    lateness: float
    """Seconds from the attempt's due time to its claim (what the metrics report)."""
    started: float
    max_attempts: int

    def delivery(self) -> Delivery:
        lease = self.lease
        envelope = lease.envelope
        started = lease.started if lease.started is not None else time.monotonic()
        return describe_delivery(
            envelope.event_type,
            envelope.id,
            envelope.attempt,
            self.max_attempts,
            died_at_from_ms(envelope.due_at),
            died_at_from_ms(lease.claimed_at_ms),
            timedelta(0, lease.lateness(started)),  # positional: a third faster than seconds=
            MappingProxyType(envelope.context),
        )

    def deliveries(self) -> list[Delivery]:
        return [self.delivery()]


class Succeeded(msgspec.Struct, gc=False, eq=False):
    """A delivery whose handler returned True: it still has to be acknowledged.

    One is made per event, and a batch holds hundreds at once: objects the garbage collector
    tracks that live through its young collections are promoted, and each full collection,
    which then comes sooner, walks every object of the process. Like Lease (see there) it
    refers only to objects that never refer back to it, so it is part of no cycle and need
    not be tracked (gc=False)."""

    lease: Lease
    duration: float
    lateness: float

    @property
    def envelope(self) -> Envelope:
        return self.lease.envelope


class HandlerRunner(Runner[Handler]):
    """Runs one event type's handler on its deliveries.

    Failures are settled here (retry or dead letter, through fail.lua); successes are handed
    back, because how they are acknowledged is the consumer's business (see Consumer).
    """

    def __init__(
        self,
        *,
        event_type: str,
        event_class: type[Event],
        handler: Handler,
        config: ServiceConfig,
        thread_limiter: anyio.CapacityLimiter | None = None,
    ) -> None:
        super().__init__(
            event_type=event_type,
            event_class=event_class,
            handler=handler,
            config=config,
            thread_limiter=thread_limiter,
        )
        self.timeouts = HandlerTimeouts(config.handler_timeout, on_stuck=self._report_stuck)

    async def run(self, lease: Lease, lane: TimeoutLane) -> Succeeded | None:
        """Handles one claimed attempt in a worker's `lane` (see HandlerTimeouts, whose run()
        must be running); returns it if the handler succeeded, None if it was settled as a
        failure here (or cannot be settled at all). Raises NotStarted when a sync handler's
        call was still waiting for a thread as the service stopped."""
        envelope = lease.envelope
        try:
            event = self._decode(envelope)
        except PayloadDecodeError as exc:
            self._log_undecodable(envelope, exc)
            await self._settle_failure(lease, str(exc), bury=True)
            self.report("dead", envelope, duration=0.0, lateness=lease.claimed_late)
            return None
        started = time.perf_counter()
        call = _Call(lease, lease.claimed_late, started, self._config.retry_attempts)
        instrumented = self._config.instrumentation.handling(
            envelope.event_type, envelope.id, envelope.attempt, envelope.context
        )
        handling = instrumented.__enter__()
        try:
            error = await self._call_handler(event, lane, call)
        except NotStarted:
            instrumented.__exit__(None, None, None)
            raise
        except BaseException as exc:
            if lane.call is call and lane.cut:
                # Cut off by the timeout: for the instrumentation a failed attempt like any
                # other, although the cancellation still has to reach the lane's scope (see
                # settle_timeout), so it is not passed to the context manager as a crash.
                handling.finished(self._timed_out(envelope.attempt))
                instrumented.__exit__(None, None, None)
            else:
                instrumented.__exit__(type(exc), exc, exc.__traceback__)
            raise
        handling.finished(error)
        instrumented.__exit__(None, None, None)
        duration = time.perf_counter() - started
        if error is None:
            return Succeeded(lease, duration, call.lateness)
        outcome = await self._settle_failure(lease, error, bury=False)
        self.report(outcome, envelope, duration=duration, lateness=call.lateness)
        return None

    async def settle_timeout(self, lane: TimeoutLane) -> bool:
        """Settles the call that `lane`'s scope cut off, after the scope caught it; False if
        no call was running (the cut arrived just after the call ended)."""
        call: _Call | None = lane.call
        self.timeouts.stop(lane)
        if call is None:
            return False
        duration = time.perf_counter() - call.started
        envelope = call.lease.envelope
        outcome = await self._settle_failure(call.lease, self._timed_out(envelope.attempt))
        self.report(outcome, envelope, duration=duration, lateness=call.lateness)
        return True

    def _report_stuck(self, call: _Call) -> None:
        envelope = call.lease.envelope
        logger.warning(
            "handler %s on %s %r (attempt %d) was cut off at its timeout (%g s) but has not "
            "stopped: it awaits something that ignores cancellation (a thread, a shielded "
            "call); its event stays leased, and its slot taken, until it returns",
            self.handler_name,
            envelope.event_type,
            envelope.id,
            envelope.attempt,
            self.timeouts.timeout,
        )

    def report_successes(self, succeeded: Sequence[Succeeded]) -> None:
        """Reports successes once they are acknowledged (or once acknowledging them failed)."""
        for success in succeeded:
            self.report(
                "ok", success.envelope, duration=success.duration, lateness=success.lateness
            )

    def report(
        self, outcome: Outcome, envelope: Envelope, *, duration: float, lateness: float
    ) -> None:
        self._config.metrics.event_handled(
            envelope.event_type, outcome, duration=duration, lateness=lateness
        )

    async def _call_handler(self, event: Event, lane: TimeoutLane, call: _Call) -> str | None:
        """Runs the handler in `lane` (whose scope the timeout cancels); returns None on
        success, else the error text. A cut-off call ends in the lane's cancellation."""
        envelope = call.lease.envelope
        attempt = envelope.attempt
        context_token = event_context.set(dict(envelope.context))
        delivery_token = delivery_under_way.set(call)
        try:
            if self._threaded is None:
                call.lease.started = time.monotonic()
                self.timeouts.start(lane, call)
                result = await self._handler(event)  # type: ignore[misc]
            else:
                lane.call = call  # no deadline: a thread cannot be cut off (threaded_calls)
                threaded = await self._threaded.call(event, (call.lease,))
                if threaded.overran is not None:
                    self.timeouts.stop(lane)
                    return overrun_text(self.timeouts.timeout, attempt, threaded.overran)
                result = threaded.value
        except NotStarted:
            self.timeouts.stop(lane)
            raise
        except Exception as exc:
            logger.warning(
                "handler %s failed on %s %r (attempt %d)",
                self.handler_name,
                envelope.event_type,
                envelope.id,
                attempt,
                exc_info=True,
            )
            self.timeouts.stop(lane)
            return f"attempt {attempt} raised {type(exc).__name__}: {exc}"
        else:
            self.timeouts.stop(lane)
        finally:
            delivery_under_way.reset(delivery_token)
            event_context.reset(context_token)
        if result is True:
            return None
        if result is False:
            return f"handler {self.handler_name} returned False on attempt {attempt}"
        if inspect.isawaitable(result):
            # A plain function (a lambda, a decorator's wrapper) that returns a coroutine: it
            # ran in a thread, and awaiting the coroutine here would run it without a timeout.
            if inspect.iscoroutine(result):
                result.close()
            return (
                f"handler {self.handler_name} is a plain function that returned "
                f"{type(result).__name__} on attempt {attempt}; register the async function "
                "itself"
            )
        shown = repr(result)
        if len(shown) > _RESULT_REPR_LIMIT:
            shown = shown[:_RESULT_REPR_LIMIT] + "..."
        return (
            f"handler {self.handler_name} returned {shown} on attempt {attempt}; return True "
            "when the event is done (False or an exception to try again)"
        )

    async def _settle_failure(self, lease: Lease, error: str, *, bury: bool = False) -> Outcome:
        return await settle_failure(self._config, lease, error, bury=bury)


async def settle_failure(
    config: ServiceConfig, lease: Lease, error: str, *, bury: bool = False
) -> Outcome:
    """Records a failed attempt (fail.lua): a retry after the retry policy's delay, or the
    dead letters after the last attempt, or at once with `bury`. Shielded, and tried again
    through Redis errors for a bounded time (settle); if it never lands, the attempt comes
    back when its lease ends."""
    envelope = lease.envelope
    delay = config.retry_policy.delay(envelope.attempt)
    with anyio.CancelScope(shield=True):
        try:
            result = await settle(
                lambda: lease.store.fail(
                    envelope,
                    error,
                    retry_delay_ms=max(0, round(delay * 1000)),
                    max_attempts=config.retry_attempts,
                    bury=bury,
                ),
                f"recording a failure of {envelope.event_type} {envelope.id!r}",
            )
            return "dead" if result == "dead" else "failed"
        except NotSettledError as exc:
            logger.warning(
                "could not record the failure of %s %r; it comes back when its lease ends: %s",
                envelope.event_type,
                envelope.id,
                exc,
            )
    return "failed"
