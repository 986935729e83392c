"""EventService's handlers: adding and removing them, before or while the service runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from types import CodeType
from typing import TypeVar

from aioqueue._delivery.consumer import Consumer
from aioqueue._delivery.watchdog import handler_code
from aioqueue._engine.store import QueueStore
from aioqueue._model.errors import HandlerRegistrationError
from aioqueue._model.event import Event, event_type_name

from .base import Registration, ServiceBase, ServiceState

__all__ = ["ServiceHandlers"]

E = TypeVar("E", bound=Event)


class ServiceHandlers(ServiceBase):
    def add_handler(
        self,
        event_class: type[E],
        handler: Callable[[E], Awaitable[bool]],
        *,
        parallelism: int = 1,
    ) -> None:
        """Delivers due events of `event_class` to `handler`, at most `parallelism` at once.

        Works before and while the service runs. The handler returns True when done; False,
        an exception or the handler timeout mean "try again later".
        """
        self._ensure_open()
        event_type = event_type_name(event_class)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise HandlerRegistrationError(
                f"parallelism must be an integer >= 1, got {parallelism!r}"
            )
        if event_type in self._registrations:
            registered = self._registrations[event_type].event_class
            raise HandlerRegistrationError(
                f"a handler for event type {event_type!r} ({registered.__qualname__}) is already "
                "registered; remove_handler() it first"
            )
        registration = Registration(
            event_class=event_class,
            event_type=event_type,
            handler=handler,
            parallelism=parallelism,
        )
        self._registrations[event_type] = registration
        if self._state is ServiceState.RUNNING:
            self._start_consumer(registration)
            if self._dispatcher is not None:
                self._dispatcher.wake()

    def remove_handler(self, event_class: type[Event]) -> bool:
        """Stops delivering `event_class` here; running handlers finish. False if none was set."""
        registration = self._registrations.pop(event_type_name(event_class), None)
        if registration is None:
            return False
        if registration.consumer is not None:
            registration.consumer.stop_taking()
        return True

    def _start_consumer(self, registration: Registration) -> None:
        assert self._task_group is not None
        registration.consumer = Consumer(
            stores=self._queues.queue(registration.event_type).stores,
            event_class=registration.event_class,
            handler=registration.handler,
            parallelism=registration.parallelism,
            config=self._config,
            on_claimed=self._ready_list_drained,
        )
        self._task_group.start_soon(registration.consumer.run)

    def _handler_codes(self) -> dict[CodeType, str]:
        codes = {}
        for registration in list(self._registrations.values()):
            code = handler_code(registration.handler)
            if code is not None:
                name = getattr(registration.handler, "__qualname__", code.co_name)
                codes[code] = f"{name} ({registration.event_type})"
        return codes

    def _ready_list_drained(self, ready_left: int) -> None:
        if self._dispatcher is not None:
            self._dispatcher.ready_list_drained(ready_left)

    def _handled_stores(self) -> Iterator[QueueStore]:
        for event_type in self._registrations:
            yield from self._queues.queue(event_type).stores
