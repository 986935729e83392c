"""The producing part of a service: enqueue, enqueue_many, cancel, and moving a pending event
in time (reschedule, run now). It owns the service's Producer."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from aioqueue._model.durations import Duration
from aioqueue._model.event import Event
from aioqueue._producing.enqueue_options import EnqueueOptions, EnqueueRequest
from aioqueue._producing.producer import EnqueueOutcome, Producer
from aioqueue._producing.writes import (
    DueTime,
    MoveResult,
    RunNowResult,
    cancel,
    context_json,
    reschedule,
    run_now,
)
from aioqueue._transport.recovery import logger

from .runtime import Runtime

__all__ = ["DueSooner", "Producing"]

DueSooner = Callable[[str, float], None]
"""Told that an event of a type (its wire name) was written due in so many seconds: the
service's dispatcher, if it handles the type, may have to wake sooner than it planned."""


class Producing:
    """Writes events for a service (see EventService for what each method promises)."""

    def __init__(self, runtime: Runtime, due_sooner: DueSooner) -> None:
        self._runtime = runtime
        self._due_sooner = due_sooner
        self.producer = Producer(runtime.client, runtime.queues, runtime.config)

    async def enqueue(self, event: Event, delay: Duration | None, options: EnqueueOptions) -> bool:
        self._runtime.ensure_open()
        request = EnqueueRequest.of("enqueue", delay, options)
        outcome = await self.producer.enqueue(
            event, request.due, self._context(request), request.mode
        )
        self._enqueued([outcome], request.due)
        return outcome.scheduled

    async def enqueue_many(
        self, events: Iterable[Event], delay: Duration | None, options: EnqueueOptions
    ) -> list[bool]:
        self._runtime.ensure_open()
        request = EnqueueRequest.of("enqueue_many", delay, options)
        outcomes = await self.producer.enqueue_many(
            events, request.due, self._context(request), request.mode
        )
        self._enqueued(outcomes, request.due)
        return [outcome.scheduled for outcome in outcomes]

    def _enqueued(self, outcomes: Sequence[EnqueueOutcome], due: DueTime) -> None:
        metrics = self._runtime.config.metrics
        for outcome in outcomes:
            metrics.event_enqueued(outcome.event_type, scheduled=outcome.scheduled)
        for event_type in {outcome.event_type for outcome in outcomes if outcome.scheduled}:
            self._due_sooner(event_type, due.due_in)

    def _context(self, request: EnqueueRequest) -> str:
        """The context as JSON, with what the instrumentation adds (a trace's parent)."""
        return context_json(self._runtime.config.instrumentation.enqueue_context(request.context))

    async def cancel(self, event_class: type[Event], event_id: str) -> bool:
        self._runtime.ensure_open()
        keys = self._runtime.queue_of(event_class).layout.keys_for(event_id)
        return await cancel(self._runtime.client, keys, event_id)

    async def run_now(self, event_class: type[Event], event_id: str) -> bool:
        self._runtime.ensure_open()
        layout = self._runtime.queue_of(event_class).layout
        result: RunNowResult = await run_now(self._runtime.client, layout, event_id)
        if result == "in_flight":
            logger.info(
                "not running %s %r now: an attempt is under way", event_class.__qualname__, event_id
            )
        return result == "due"

    async def reschedule(
        self, event_class: type[Event], event_id: str, delay: Duration | None, at: datetime | None
    ) -> bool:
        self._runtime.ensure_open()
        due = DueTime.of(delay, at)
        layout = self._runtime.queue_of(event_class).layout
        result: MoveResult = await reschedule(self._runtime.client, layout, event_id, due)
        if result == "in_flight":
            logger.info(
                "not rescheduling %s %r: an attempt is under way",
                event_class.__qualname__,
                event_id,
            )
        elif result == "moved":
            self._due_sooner(layout.event_type, due.due_in)
        return result == "moved"
