"""EventService's recurring schedules: declaring, removing and listing them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import anyio

from aioqueue._model.durations import Duration
from aioqueue._model.errors import ConfigurationError
from aioqueue._model.event import Event, event_type_name
from aioqueue._recurring.keeper import Misfire, ScheduleDeclaration, ScheduleKeeper
from aioqueue._recurring.records import ScheduleInfo, list_schedules, remove_by_name
from aioqueue._recurring.spec import ScheduleSpec
from aioqueue._wire.keys import QueueKeys

from .base import ServiceBase, ServiceState

__all__ = ["ScheduleRegistration", "ServiceSchedules"]

MISFIRE_POLICIES = ("skip", "once", "all")


@dataclass
class ScheduleRegistration:
    declaration: ScheduleDeclaration
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    """Cancels this service's keeper of the schedule (remove_schedule)."""


class ServiceSchedules(ServiceBase):
    def add_schedule(
        self,
        name: str,
        *,
        event: Callable[[datetime], Event],
        cron: str | None = None,
        every: Duration | None = None,
        tz: str = "UTC",
        misfire: Misfire = "once",
        max_catch_up: int = 100,
    ) -> None:
        """Declares a recurring schedule: `event(tick)` is enqueued for each tick, due at the
        tick, once per tick however many services declare the same schedule.

        `cron` (five fields, evaluated in `tz` with Debian cron's DST rules) or `every` (an
        interval anchored to the Unix epoch). `event` receives the tick as an aware datetime in
        `tz` and must derive the event's id from it; it is called once here, with the next
        tick, to learn the event type, so it must have no side effects. `misfire` says what
        happens to ticks missed while no service ran: "skip" them, produce "once" (the latest,
        now; the default), or "all" of them (the latest `max_catch_up`). Works before and
        while the service runs. A name is unique per prefix and its most recent declaration
        wins: declared with an event of another type, the name moves, and the other type's
        schedule and its pending tick are removed before this one's first tick.
        """
        self._ensure_open()
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
        spec = ScheduleSpec.of(cron=cron, every=every, tz=tz)
        if not callable(event):
            raise ConfigurationError(f"event must be a function of the tick, got {event!r}")
        sample = event(spec.tick_time(next(spec.ticks_after(0))))
        if not isinstance(sample, Event):
            raise ConfigurationError(f"event(tick) must return an Event, got {sample!r}")
        event_type = event_type_name(type(sample))
        if self._config.partitions.get(event_type, 1) != 1:
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
        if self._state is ServiceState.RUNNING:
            self._start_keeper(registration)

    async def remove_schedule(self, name: str) -> bool:
        """Stops the schedule everywhere, whichever event type holds the name: its record
        and its pending next tick are deleted (every service's keeper then stops). False
        when Redis held no such schedule."""
        self._ensure_open()
        registration = self._schedules.pop(name, None)
        if registration is not None:
            registration.scope.cancel()
        return await remove_by_name(self._client, self._config.prefix, name)

    async def schedules(self) -> list[ScheduleInfo]:
        """Every schedule of the prefix, declared by this service or another, by name."""
        self._ensure_open()
        return await list_schedules(self._client, self._config.prefix)

    def _start_keeper(self, registration: ScheduleRegistration) -> None:
        declaration = registration.declaration
        keeper = ScheduleKeeper(
            self._client,
            QueueKeys.for_type(self._config.prefix, declaration.event_type),
            self._config.prefix,
            declaration,
            self._producer,
        )

        async def keep() -> None:
            with registration.scope:
                await keeper.run()

        self._start_background(f"keeper of schedule {declaration.name!r}", keep)
