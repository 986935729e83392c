"""EventService's view into a queue: pending events by page, one event in full, and moving a
pending event in time (run now, reschedule)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

from aioqueue._model.durations import Duration
from aioqueue._model.event import Event
from aioqueue._producing.writes import DueTime, reschedule, run_now
from aioqueue._transport.recovery import logger
from aioqueue._wire.browse import EventInfo, PendingPage, inspect_event, pending_page

from .base import ServiceBase

__all__ = ["ServiceBrowsing"]


class ServiceBrowsing(ServiceBase):
    async def pending(
        self,
        event_class: type[Event],
        *,
        limit: int = 50,
        cursor: str | None = None,
        due_before: datetime | None = None,
        due_after: datetime | None = None,
    ) -> PendingPage:
        """A page of pending events of a type, in schedule order (at most 1000).

        Pass the page's `next_cursor` to get the next one, until it is None. The pages of one
        walk list an event at most once while the queue moves: an event that stays where it
        is is listed once, one that is dispatched, claimed, retried, rescheduled, replaced or
        enqueued after the first page may be missing (so a page can hold fewer events than
        `limit`, even none, and still have a next one). `due_before` / `due_after` (aware
        datetimes) bound the due times listed. Raises InvalidCursorError (a ValueError) for a
        cursor no page handed out.
        """
        self._ensure_open()
        layout = self._queue_of(event_class).layout
        return await pending_page(
            self._client,
            layout,
            limit=limit,
            cursor=cursor,
            due_before=due_before,
            due_after=due_after,
        )

    async def inspect(self, event_class: type[Event], event_id: str) -> EventInfo | None:
        """The event's state, due time, attempt and retries left, last error, payload and
        context, pending or dead; None when the queue holds no event with that id."""
        self._ensure_open()
        info = await inspect_event(self._client, self._queue_of(event_class).layout, event_id)
        if info is None:
            return None
        left = max(0, self._config.retry_attempts - info.attempt)
        return dataclasses.replace(info, retries_left=0 if info.state == "dead" else left)

    async def run_now(self, event_class: type[Event], event_id: str) -> bool:
        """Makes a pending event due now, keeping its attempt count; False when no such
        event is pending (a dead one is put back with `requeue`) or when an attempt of it
        is under way."""
        self._ensure_open()
        result = await run_now(self._client, self._queue_of(event_class).layout, event_id)
        if result == "in_flight":
            logger.info(
                "not running %s %r now: an attempt is under way", event_class.__qualname__, event_id
            )
        return result == "due"

    async def reschedule(
        self,
        event_class: type[Event],
        event_id: str,
        delay: Duration | None = None,
        *,
        at: datetime | None = None,
    ) -> bool:
        """Moves a pending event to a new due time, `delay` from now or `at`, keeping its
        payload, context and attempt count, in one atomic step (it is never unscheduled in
        between). False for an unknown id, a dead event, or one whose attempt is under way."""
        self._ensure_open()
        due = DueTime.of(delay, at)
        layout = self._queue_of(event_class).layout
        result = await reschedule(self._client, layout, event_id, due)
        if result == "in_flight":
            logger.info(
                "not rescheduling %s %r: an attempt is under way",
                event_class.__qualname__,
                event_id,
            )
        elif result == "moved" and self._dispatcher is not None:
            self._dispatcher.wake_for(due.due_in)
        return result == "moved"
