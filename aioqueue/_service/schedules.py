"""The schedules part of a service: declaring, removing and listing recurring schedules, and
the keeper of each schedule it declared while it runs. It owns those declarations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import anyio

from aioqueue._model.errors import ConfigurationError
from aioqueue._model.event import Event, event_type_name
from aioqueue._producing.producer import Producer
from aioqueue._recurring.keeper import Misfire, ScheduleDeclaration, ScheduleKeeper
from aioqueue._recurring.records import ScheduleInfo, list_schedules, remove_by_name
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._wire.keys import QueueKeys

from .runtime import Runtime

__all__ = ["ScheduleRegistration", "Schedules"]

MISFIRE_POLICIES = ("skip", "once", "all")


@dataclass
class ScheduleRegistration:
    declaration: ScheduleDeclaration
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Cancels this service's keeper of the schedule (remove_schedule)."""


class Schedules:
    """A service's recurring schedules (see EventService for what the public methods
    promise)."""

    def __init__(self, runtime: Runtime, producer: Producer) -> None:
        self._runtime = runtime
        self._producer = producer
        self._schedules: dict[str, ScheduleRegistration] = {}

    def add(
        self,
        name: str,
        event: Callable[[datetime], Event],
        spec: ScheduleSpec,
        *,
        misfire: Misfire,
        max_catch_up: int,
    ) -> None:
        self._runtime.ensure_open()
        if not isinstance(name, str) or not name or len(name) > 200:
            raise ConfigurationError(f"a schedule name must be 1-200 characters, got {name!r}")
        if misfire not in MISFIRE_POLICIES:
            raise ConfigurationError(f"misfire must be one of {MISFIRE_POLICIES}, got {misfire!r}")
        if (
            isinstance(max_catch_up, bool)
            or not isinstance(max_catch_up, int)
            or not (1 <= max_catch_up <= 10_000)
        ):
            raise ConfigurationError(f"max_catch_up must be from 1 to 10000, got {max_catch_up!r}")
        if not callable(event):
            raise ConfigurationError(f"event must be a function of the tick, got {event!r}")
        sample = event(spec.tick_time(next(spec.ticks_after(0))))
        if not isinstance(sample, Event):
            raise ConfigurationError(f"event(tick) must return an Event, got {sample!r}")
        event_type = event_type_name(type(sample))
        if self._runtime.config.partitions.get(event_type, 1) != 1:
            raise ConfigurationError(
                f"schedule {name!r}: {event_type} is partitioned; a schedule keeps its record "
                "beside its events in one hash tag, so its type cannot be partitioned"
            )
        previous = self._schedules.pop(name, None)
        if previous is not None:
            previous.scope.cancel()
        registration = ScheduleRegistration(
            ScheduleDeclaration(name, spec, event, event_type, misfire, max_catch_up)
        )
        self._schedules[name] = registration
        if self._runtime.running:
            self._start_keeper(registration)

    async def remove(self, name: str) -> bool:
        self._runtime.ensure_open()
        registration = self._schedules.pop(name, None)
        if registration is not None:
            registration.scope.cancel()
        return await remove_by_name(self._runtime.client, self._runtime.config.prefix, name)

    async def listed(self) -> list[ScheduleInfo]:
        self._runtime.ensure_open()
        return await list_schedules(self._runtime.client, self._runtime.config.prefix)

    def start(self) -> None:
        """A keeper for every schedule declared (the service starts)."""
        for registration in self._schedules.values():
            self._start_keeper(registration)

    def _start_keeper(self, registration: ScheduleRegistration) -> None:
        declaration = registration.declaration
        runtime = self._runtime
        keeper = ScheduleKeeper(
            runtime.client,
            QueueKeys.for_type(runtime.config.prefix, declaration.event_type),
            runtime.config.prefix,
            declaration,
            self._producer,
        )

        async def keep() -> None:
            with registration.scope:
                await keeper.run()

        runtime.start_background(f"keeper of schedule {declaration.name!r}", keep)
