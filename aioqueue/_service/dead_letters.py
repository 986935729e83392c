"""EventService's dead letters: reading them and putting them back."""

from __future__ import annotations

from typing import TypeVar

from aioqueue._model.event import Event
from aioqueue._transport.recovery import logger
from aioqueue._wire.dead_letters import read_dead_letters
from aioqueue._wire.envelope import DeadLetter

from .base import ServiceBase

__all__ = ["ServiceDeadLetters"]

E = TypeVar("E", bound=Event)


class ServiceDeadLetters(ServiceBase):
    async def dead_letters(self, event_class: type[E], limit: int = 100) -> list[DeadLetter]:
        """The newest `limit` dead letters of a type, each with its last error."""
        self._ensure_open()
        queue = self._queue_of(event_class)
        return await read_dead_letters(queue, event_class, self._config.serializer, limit)

    async def requeue(self, event_class: type[Event], event_id: str) -> bool:
        """Puts a dead event back, due now, with a fresh attempt count.

        False when there is no such dead letter, when an event with that id is pending (both
        are kept), or when the dead letter's envelope is unreadable.
        """
        self._ensure_open()
        result = await self._queue_of(event_class).store_for(event_id).requeue(event_id)
        if result == "requeued" and self._dispatcher is not None:
            # Due now, as an enqueue due now: the script wakes the other services' dispatchers.
            self._dispatcher.wake()
        if result in ("pending", "unreadable"):
            logger.info(
                "not requeueing %s %r: it is %s", event_class.__qualname__, event_id, result
            )
        return result == "requeued"
