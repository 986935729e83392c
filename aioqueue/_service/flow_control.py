"""EventService's flow control: pausing and resuming a type for every service."""

from __future__ import annotations

from aioqueue._model.event import Event
from aioqueue._transport.recovery import logger
from aioqueue._wire.pausing import pause, paused_types, resume

from .base import ServiceBase

__all__ = ["ServiceFlowControl"]


class ServiceFlowControl(ServiceBase):
    async def pause(self, event_class: type[Event]) -> None:
        """Stops every service of the prefix from taking events of the type, within one
        script call: pending events wait in Redis with their due times (enqueue, replace and
        cancel go on working), deliveries not yet claimed go back to the schedule with their
        attempt uncounted, and handlers already running finish. Lasts until resume(), across
        restarts."""
        self._ensure_open()
        queue = await self._queues.recorded(event_class)
        returned = await pause(self._client, queue.layout)
        logger.info(
            "paused %s (%d waiting deliveries back in the schedule)",
            queue.layout.event_type,
            returned,
        )

    async def resume(self, event_class: type[Event]) -> bool:
        """Lets every service take the type's events again, everything that came due during
        the pause first, in due order. False when the type was not paused."""
        self._ensure_open()
        queue = await self._queues.recorded(event_class)
        resumed = await resume(self._client, queue.layout)
        if resumed and self._dispatcher is not None:
            self._dispatcher.wake_for(0)
        return resumed

    async def paused(self) -> set[str]:
        """The wire names of the prefix's paused types."""
        self._ensure_open()
        return await paused_types(self._client, self._config.prefix)
