"""What every part of EventService shares: its state, settings, client and queues.

EventService is one public class whose methods come in groups (handlers, producing, dead
letters, ...), each group in a module of its own that subclasses ServiceBase. The groups
declare here what they read, so each module can be read (and type-checked) on its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from anyio.abc import TaskGroup

from aioqueue._delivery.consumer import Consumer
from aioqueue._delivery.dispatcher import Dispatcher
from aioqueue._delivery.handler_runner import Handler
from aioqueue._engine.client import RedisClient
from aioqueue._engine.producer import Producer
from aioqueue._engine.queues import QueueDirectory, TypeQueue
from aioqueue._model.config import ServiceConfig
from aioqueue._model.errors import ServiceStateError
from aioqueue._model.event import Event, event_type_name

__all__ = ["Registration", "ServiceBase", "ServiceState"]


class ServiceState(enum.Enum):
    IDLE = "idle"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"


@dataclass
class Registration:
    """A handler added to the service, and its consumer once the service runs."""

    event_class: type[Event]
    event_type: str
    handler: Handler
    parallelism: int
    consumer: Consumer | None = None


class ServiceBase:
    """The state the parts of EventService share; EventService.__init__ sets it."""

    _config: ServiceConfig
    _client: RedisClient
    _state: ServiceState
    _queues: QueueDirectory
    _producer: Producer
    _registrations: dict[str, Registration]
    _dispatcher: Dispatcher | None
    """Made when the service starts, and only if it dispatches."""
    _task_group: TaskGroup | None
    """Owns every background task while the service runs."""

    def _ensure_open(self) -> None:
        if self._state in (ServiceState.CLOSING, ServiceState.CLOSED):
            raise ServiceStateError(f"the service is {self._state.value}")

    def _queue_of(self, event_class: type[Event]) -> TypeQueue:
        return self._queues.queue(event_type_name(event_class))
