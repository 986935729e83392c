"""The administration part of a service: what it reads and changes in its queues for an
operator or a test — dead letters and requeue, pages of pending events and one event in
full, pausing and resuming a type, and run_due."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import anyio

from aioqueue._model.durations import Duration, to_seconds
from aioqueue._model.errors import ServiceStateError
from aioqueue._model.event import Event
from aioqueue._model.workers import Worker
from aioqueue._producing.writes import run_now
from aioqueue._transport.recovery import logger
from aioqueue._wire.browse import (
    MAX_PAGE,
    EventInfo,
    PendingEvent,
    PendingPage,
    inspect_event,
    pending_page,
)
from aioqueue._wire.dead_letters import read_dead_letters
from aioqueue._wire.envelope import DeadLetter
from aioqueue._wire.keys import QueueLayout
from aioqueue._wire.pausing import pause, paused_types, resume
from aioqueue._wire.workers import read_workers

from .runtime import Runtime

__all__ = ["Administration"]

# How often run_due looks at the queues while handlers work.
_POLL_INTERVAL = 0.01


class Administration:
    """A service's operator actions (see EventService for what the public methods promise)."""

    def __init__(
        self,
        runtime: Runtime,
        wake_dispatcher: Callable[[], None],
        handled_types: Callable[[], list[str]],
    ) -> None:
        self._runtime = runtime
        self._wake_dispatcher = wake_dispatcher
        self._handled_types = handled_types

    async def dead_letters(self, event_class: type[Event], limit: int) -> list[DeadLetter]:
        runtime = self._runtime
        runtime.ensure_open()
        queue = runtime.queue_of(event_class)
        return await read_dead_letters(queue, event_class, runtime.config.serializer, limit)

    async def requeue(self, event_class: type[Event], event_id: str) -> bool:
        self._runtime.ensure_open()
        store = self._runtime.queue_of(event_class).store_for(event_id)
        result = await store.requeue(event_id)
        if result == "requeued":
            # Due now, as an enqueue due now: the script wakes the other services' dispatchers.
            self._wake_dispatcher()
        elif result in ("pending", "unreadable"):
            logger.info(
                "not requeueing %s %r: it is %s", event_class.__qualname__, event_id, result
            )
        return result == "requeued"

    async def pending(
        self,
        event_class: type[Event],
        limit: int,
        cursor: str | None,
        due_before: datetime | None,
        due_after: datetime | None,
    ) -> PendingPage:
        self._runtime.ensure_open()
        layout = self._runtime.queue_of(event_class).layout
        return await pending_page(
            self._runtime.client,
            layout,
            limit=limit,
            cursor=cursor,
            due_before=due_before,
            due_after=due_after,
        )

    async def inspect(self, event_class: type[Event], event_id: str) -> EventInfo | None:
        runtime = self._runtime
        runtime.ensure_open()
        info = await inspect_event(runtime.client, runtime.queue_of(event_class).layout, event_id)
        if info is None:
            return None
        left = max(0, runtime.config.retry_attempts - info.attempt)
        return dataclasses.replace(info, retries_left=0 if info.state == "dead" else left)

    async def pause(self, event_class: type[Event]) -> None:
        self._runtime.ensure_open()
        queue = await self._runtime.queues.recorded(event_class)
        returned = await pause(self._runtime.client, queue.layout)
        logger.info(
            "paused %s (%d waiting deliveries back in the schedule)",
            queue.layout.event_type,
            returned,
        )

    async def resume(self, event_class: type[Event]) -> bool:
        self._runtime.ensure_open()
        queue = await self._runtime.queues.recorded(event_class)
        resumed = await resume(self._runtime.client, queue.layout)
        if resumed:
            self._wake_dispatcher()
        return resumed

    async def paused(self) -> set[str]:
        self._runtime.ensure_open()
        return await paused_types(self._runtime.client, self._runtime.config.prefix)

    async def run_due(self, within: Duration) -> int:
        runtime = self._runtime
        runtime.ensure_open()
        if not runtime.running:
            raise ServiceStateError("run_due needs a running service: call it inside `async with`")
        horizon = datetime.now(timezone.utc) + timedelta(seconds=to_seconds(within, "within"))
        made_due = 0
        while True:
            busy = False
            for event_type in self._handled_types():
                layout = runtime.queues.queue(event_type).layout
                for event in await self._every_pending(layout):
                    if event.state in ("due", "ready", "in_flight"):
                        busy = True
                    elif event.due_at < horizon:
                        busy = True
                        if await run_now(runtime.client, layout, event.id) == "due":
                            made_due += 1
            if not busy:
                return made_due
            await anyio.sleep(_POLL_INTERVAL)

    async def _every_pending(self, layout: QueueLayout) -> list[PendingEvent]:
        events: list[PendingEvent] = []
        cursor = None
        while True:
            page = await pending_page(self._runtime.client, layout, limit=MAX_PAGE, cursor=cursor)
            events += page.events
            if page.next_cursor is None:
                return events
            cursor = page.next_cursor

    async def workers(self) -> list[Worker]:
        self._runtime.ensure_open()
        listed = await read_workers(self._runtime.client, self._runtime.config.prefix)
        if listed.unreadable:
            logger.warning(
                "left out worker records that do not read as one: %s", ", ".join(listed.unreadable)
            )
        return listed.workers
