"""EventService's producing side: enqueue, enqueue_many and cancel."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from aioqueue._model.durations import Duration
from aioqueue._model.event import Event
from aioqueue._producing.writes import DueTime, cancel, context_json, max_wait_ms

from .base import ServiceBase

__all__ = ["ServiceProducing"]


class ServiceProducing(ServiceBase):
    async def enqueue(
        self,
        event: Event,
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
        context: Mapping[str, str] | None = None,
        replace: bool = False,
        max_wait: Duration | None = None,
    ) -> bool:
        """Schedules `event` after `delay` (timedelta or seconds) or at `at` (aware datetime).

        Returns True when scheduled, False when an event with the same type and id was
        already pending and was kept. `replace=True` overwrites it instead: new payload,
        context and due time, fresh attempt count. `max_wait` (with `replace=True`) makes it
        a bounded debounce: however often the event is replaced, it is due no later than the
        first enqueue of the pending version plus `max_wait`.

        With the builder's `durability(...)`, returns only once the replicas have the event,
        else raises DurabilityError: the event may exist, and enqueueing it again is safe.
        """
        self._ensure_open()
        due = DueTime.of(delay, at)
        bound = max_wait_ms(max_wait, replace=replace)
        context = self._config.instrumentation.enqueue_context(context)
        outcome = await self._producer.enqueue(
            event, due, context_json(context), replace=replace, max_wait_ms=bound
        )
        self._after_enqueue([outcome], due)
        return outcome[1]

    async def enqueue_many(
        self,
        events: Iterable[Event],
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
        context: Mapping[str, str] | None = None,
        replace: bool = False,
        max_wait: Duration | None = None,
    ) -> list[bool]:
        """Schedules many events with one due time and context, a few script calls in all.

        Returns, per event in order, what enqueue() would have. Every event is validated
        before anything is written. With `durability(...)`, DurabilityError means some of the
        events may exist: enqueue them all again.
        """
        self._ensure_open()
        due = DueTime.of(delay, at)
        bound = max_wait_ms(max_wait, replace=replace)
        context = self._config.instrumentation.enqueue_context(context)
        outcomes = await self._producer.enqueue_many(
            events, due, context_json(context), replace=replace, max_wait_ms=bound
        )
        self._after_enqueue(outcomes, due)
        return [scheduled for _, scheduled in outcomes]

    def _after_enqueue(self, outcomes: list[tuple[str, bool]], due: DueTime) -> None:
        metrics = self._config.metrics
        for event_type, scheduled in outcomes:
            metrics.event_enqueued(event_type, scheduled=scheduled)
        if self._dispatcher is not None and any(
            scheduled and event_type in self._registrations for event_type, scheduled in outcomes
        ):
            # A local event due before the dispatcher's next pass wakes it at once.
            self._dispatcher.wake_for(due.due_in)

    async def cancel(self, event_class: type[Event], event_id: str) -> bool:
        """Removes a pending event; once this returns, no handler will be handed it.

        A handler that is already running it is not interrupted. Returns False if no event
        with that id was pending.
        """
        self._ensure_open()
        return await cancel(
            self._client, self._queue_of(event_class).layout.keys_for(event_id), event_id
        )
