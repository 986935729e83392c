"""Running a batch handler on a list of claimed deliveries of one type.

Every promise of a handler of one event holds per event of a batch: each event's attempt
was spent by its own claim and its lease is renewed on its own; a failure (False, an
exception, the handler timeout) is settled per event, with the event's own backoff and its
own dead letter; a mapping of event id -> bool settles each event by its entry, and an event
left out of it is tried again, never taken as done. Each event gets its instrumentation
scope (a tracing span) and its metrics, and `current_deliveries()` describes them all.

The handler timeout covers the whole call. An undecodable event goes to the dead letters on
its own, before the call, and the handler gets the others.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import anyio

from aioqueue._model.batches import BatchHandler
from aioqueue._model.delivery import Delivery, delivery_under_way
from aioqueue._model.errors import OutsideHandlerError, PayloadDecodeError
from aioqueue._model.event import Event
from aioqueue._model.instrumentation import HandlingScope
from aioqueue._transport.recovery import logger

from .handler_runner import Succeeded, _Call, settle_failure
from .leases import Lease
from .runner_base import Runner
from .threaded_calls import overrun_text

__all__ = ["BatchRunner"]

# How much of an unexpected return value the error text quotes.
_RESULT_REPR_LIMIT = 200


@dataclass(slots=True)
class _BatchCall:
    """What current_deliveries() describes while a batch handler runs (see DeliverySource).

    Ended when the handler returns, because the context the call ran in can outlive it: a
    loop timer scheduled during the call (the handler timeout's own, a timeout in the
    handler) keeps its context, cancelled or not, until asyncio drops it, which can be as
    late as the timer's time. The calls hold every event's lease and envelope, so a batch
    worker kept up to about a hundred finished batches in memory (asyncio drops cancelled
    timers early once they are over half of more than a hundred)."""

    calls: list[_Call] | None
    """None once the handler has returned."""

    def delivery(self) -> Delivery:
        raise OutsideHandlerError(
            "current_delivery() describes the one event of a handler; a batch handler's "
            "events are described by current_deliveries()"
        )

    def deliveries(self) -> list[Delivery]:
        if self.calls is None:
            raise OutsideHandlerError(
                "current_deliveries() describes a batch while its handler runs; this batch "
                "handler has returned"
            )
        return [call.delivery() for call in self.calls]

    def end(self) -> None:
        self.calls = None


class BatchRunner(Runner[BatchHandler]):
    """Runs one event type's batch handler on lists of deliveries. Failures are settled
    here; successes are handed back, for the consumer to acknowledge."""

    async def run(self, leases: Sequence[Lease]) -> list[Succeeded]:
        """Handles the claimed attempts in one call of the handler; returns those that
        succeeded, after settling the others. Raises NotStarted when a sync handler's call
        was still waiting for a thread as the service stopped, and the cancellation when the
        service cut the call off (the caller gives the events back)."""
        events, held = await self._decoded(leases)
        if not held:
            return []
        config = self._config
        calls = [_Call(lease, lease.claimed_late, 0.0, config.retry_attempts) for lease in held]
        scopes = [
            config.instrumentation.handling(
                lease.envelope.event_type,
                lease.envelope.id,
                lease.envelope.attempt,
                lease.envelope.context,
            )
            for lease in held
        ]
        handling = [scope.__enter__() for scope in scopes]
        started = time.perf_counter()
        try:
            errors = await self._call(events, held, _BatchCall(calls))
        except BaseException as exc:
            _leave(scopes, exc)
            raise
        duration = time.perf_counter() - started
        for scope, error in zip(handling, errors, strict=True):
            scope.finished(error)
        _leave(scopes, None)
        succeeded = []
        failed = []
        for lease, error in zip(held, errors, strict=True):
            if error is None:
                succeeded.append(Succeeded(lease, duration, lease.claimed_late))
            else:
                failed.append((lease, error))
        await self._settle_failures(failed, duration)
        return succeeded

    async def _decoded(self, leases: Sequence[Lease]) -> tuple[list[Event], list[Lease]]:
        """The events to hand over and their leases; an undecodable one goes to the dead
        letters on its own."""
        events = []
        held = []
        buried = []
        for lease in leases:
            envelope = lease.envelope
            try:
                event = self._decode(envelope)
            except PayloadDecodeError as exc:
                self._log_undecodable(envelope, exc)
                buried.append((lease, str(exc)))
                continue
            events.append(event)
            held.append(lease)
        async with anyio.create_task_group() as settling:
            for lease, error in buried:
                settling.start_soon(self._bury, lease, error)
        return events, held

    async def _bury(self, lease: Lease, error: str) -> None:
        await settle_failure(self._config, lease, error, bury=True)
        self._report("dead", lease, 0.0)

    async def _call(
        self, events: list[Event], leases: list[Lease], batch: _BatchCall
    ) -> list[str | None]:
        """Calls the handler; returns each event's error text, None for a success."""
        token = delivery_under_way.set(batch)
        try:
            if self._threaded is None:
                now = time.monotonic()
                for lease in leases:
                    lease.started = now
                with anyio.CancelScope(deadline=anyio.current_time() + self._timeout) as scope:
                    result: Any = await self._handler(events)  # type: ignore[misc]
                if scope.cancelled_caught:
                    return [self._timed_out(lease.envelope.attempt) for lease in leases]
            else:
                threaded = await self._threaded.call(events, leases)
                if threaded.overran is not None:
                    return [
                        overrun_text(self._timeout, lease.envelope.attempt, threaded.overran)
                        for lease in leases
                    ]
                result = threaded.value
        except Exception as exc:
            first = leases[0].envelope
            logger.warning(
                "batch handler %s failed on %d %s events (%r first, attempt %d)",
                self.handler_name,
                len(leases),
                first.event_type,
                first.id,
                first.attempt,
                exc_info=True,
            )
            return [
                f"attempt {lease.envelope.attempt} raised {type(exc).__name__}: {exc}"
                for lease in leases
            ]
        finally:
            delivery_under_way.reset(token)
            batch.end()
        return self._errors_of(result, leases)

    def _errors_of(self, result: object, leases: list[Lease]) -> list[str | None]:
        """Each event's error text for what the handler returned (None: a success)."""
        name = self.handler_name
        if result is True:
            return [None] * len(leases)
        if result is False:
            return [
                f"batch handler {name} returned False on attempt {lease.envelope.attempt}"
                for lease in leases
            ]
        if isinstance(result, Mapping):
            return self._errors_by_id(result, leases)
        if inspect.iscoroutine(result):
            result.close()  # a plain function that returned a coroutine: never awaited here
        shown = repr(result)
        if len(shown) > _RESULT_REPR_LIMIT:
            shown = shown[:_RESULT_REPR_LIMIT] + "..."
        return [
            f"batch handler {name} returned {shown} on attempt {lease.envelope.attempt}; "
            "return True (all done), False (all tried again) or a mapping of event id to "
            "True or False"
            for lease in leases
        ]

    def _errors_by_id(self, outcomes: Mapping[Any, Any], leases: list[Lease]) -> list[str | None]:
        name = self.handler_name
        errors: list[str | None] = []
        for lease in leases:
            envelope = lease.envelope
            outcome = outcomes.get(envelope.id)
            if outcome is True:
                errors.append(None)
            elif outcome is False:
                errors.append(
                    f"batch handler {name} returned False for it on attempt {envelope.attempt}"
                )
            elif envelope.id not in outcomes:
                errors.append(
                    f"batch handler {name} left it out of the outcomes it returned on attempt "
                    f"{envelope.attempt} (an event left out is tried again)"
                )
            else:
                errors.append(
                    f"batch handler {name} returned {outcome!r} for it on attempt "
                    f"{envelope.attempt}; an outcome is True or False"
                )
        unknown = set(outcomes) - {lease.envelope.id for lease in leases}
        if unknown:
            logger.warning(
                "batch handler %s returned outcomes for %d ids not in its batch (e.g. %r): ignored",
                name,
                len(unknown),
                next(iter(unknown)),
            )
        return errors

    async def _settle_failures(self, failed: list[tuple[Lease, str]], duration: float) -> None:
        if not failed:
            return

        async def settle(lease: Lease, error: str) -> None:
            outcome = await settle_failure(self._config, lease, error)
            self._report(outcome, lease, duration)

        # Concurrently: the service's call gate bounds how many go out at once.
        async with anyio.create_task_group() as settling:
            for lease, error in failed:
                settling.start_soon(settle, lease, error)

    def report_successes(self, succeeded: Sequence[Succeeded]) -> None:
        """Reports successes once they are acknowledged (or once acknowledging them failed)."""
        for success in succeeded:
            self._report("ok", success.lease, success.duration)

    def _report(self, outcome: Any, lease: Lease, duration: float) -> None:
        self._config.metrics.event_handled(
            lease.envelope.event_type, outcome, duration=duration, lateness=lease.claimed_late
        )


def _leave(
    scopes: list[AbstractContextManager[HandlingScope]], error: BaseException | None
) -> None:
    """Leaves the events' instrumentation scopes, last entered first (as they nest)."""
    for scope in reversed(scopes):
        if error is None:
            scope.__exit__(None, None, None)
        else:
            scope.__exit__(type(error), error, error.__traceback__)
