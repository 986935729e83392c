"""EventService.run_due(): skip ahead in a test, handling now what would come due soon."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import anyio

from aioqueue._model.durations import Duration, to_seconds
from aioqueue._model.errors import ServiceStateError
from aioqueue._producing.writes import run_now
from aioqueue._wire.browse import MAX_PAGE, PendingEvent, pending_page
from aioqueue._wire.keys import QueueLayout

from .base import ServiceBase, ServiceState

__all__ = ["ServiceRunDue"]

# How often run_due looks at the queues while handlers work.
_POLL_INTERVAL = 0.01


class ServiceRunDue(ServiceBase):
    async def run_due(self, within: Duration = 0) -> int:
        """Handles now, through this running service's handlers, every event of the types it
        handles that is due within `within` from now, including the retries of failed
        attempts that come due within that window; returns once none is left in it (and none
        is being handled). Returns how many events it made due early.

        Meant for tests ("the payment check in 3 hours": `await service.run_due(timedelta(
        hours=3))`): events go through the real scripts, so attempts count, retries back off
        inside the window and dead letters happen as in production. Each round reads every
        pending event of the handled types, which suits a test's queue, not a production
        one. Bound it with `anyio.fail_after` (or `asyncio.timeout`) where a handler may
        never succeed.
        """
        self._ensure_open()
        if self._state is not ServiceState.RUNNING:
            raise ServiceStateError("run_due needs a running service: call it inside `async with`")
        horizon = datetime.now(timezone.utc) + timedelta(seconds=to_seconds(within, "within"))
        made_due = 0
        while True:
            busy = False
            for registration in list(self._registrations.values()):
                layout = self._queues.queue(registration.event_type).layout
                for event in await _every_pending(self, layout):
                    if event.state in ("due", "ready", "in_flight"):
                        busy = True
                    elif event.due_at < horizon:
                        busy = True
                        if await run_now(self._client, layout, event.id) == "due":
                            made_due += 1
            if not busy:
                return made_due
            await anyio.sleep(_POLL_INTERVAL)


async def _every_pending(service: ServiceBase, layout: QueueLayout) -> list[PendingEvent]:
    events: list[PendingEvent] = []
    cursor = None
    while True:
        page = await pending_page(service._client, layout, limit=MAX_PAGE, cursor=cursor)
        events += page.events
        if page.next_cursor is None:
            return events
        cursor = page.next_cursor
