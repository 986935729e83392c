"""Keeping one schedule: every service that declares it runs a keeper, and one tick at a time
is produced, ahead of its time, by whichever keeper's script call comes first.

A keeper reads the schedule's record. While the latest produced tick is still to come, it
sleeps until then; once that tick's time has come it produces the next one, due at its
tick, through schedule_tick.lua, which writes the event only if the record still holds the
tick the keeper read. The tick's delivery is then that of any delayed event (the dispatcher
wakes for it), and its id, derived from the tick by the schedule's event factory, dedupes it.

Before it produces, a keeper checks that the name directory still gives the name to its
event type; if another type took it, or it was removed, and a move died before fencing this
type's record, the keeper fences it itself and stops (see names.py). A keeper that finds its
record gone without a removal or a move (the server lost its data) declares the schedule
again and goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import anyio

from aioqueue._model.errors import ConfigurationError
from aioqueue._model.event import Event, event_type_name
from aioqueue._producing.enqueue_calls import EnqueueItem
from aioqueue._producing.producer import Producer
from aioqueue._producing.writes import DueTime
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import REDIS_ERRORS, ErrorBackoff, logger
from aioqueue._wire.keys import QueueKeys

from .misfire import Misfire, ticks_to_produce
from .records import (
    ScheduleRecord,
    Tombstone,
    after_gone,
    declare,
    produce_tick,
    read_stored,
    still_owned,
)
from .spec import ScheduleSpec

__all__ = ["Misfire", "ScheduleDeclaration", "ScheduleKeeper"]


@dataclass(frozen=True, slots=True)
class ScheduleDeclaration:
    name: str
    spec: ScheduleSpec
    make_event: Callable[[datetime], Event]
    event_type: str
    misfire: Misfire
    max_catch_up: int


class ScheduleKeeper:
    """Produces a schedule's ticks with the other services that declare it (see above)."""

    def __init__(
        self,
        client: RedisClient,
        keys: QueueKeys,
        prefix: str,
        declaration: ScheduleDeclaration,
        producer: Producer,
    ) -> None:
        self._client = client
        self._keys = keys
        self._prefix = prefix
        self._declaration = declaration
        self._producer = producer
        self._warned_spec: str | None = None

    async def run(self) -> None:
        """Keeps the schedule until cancelled, or until the schedule is removed from Redis or
        moved to another type."""
        declaration = self._declaration
        errors = ErrorBackoff(f"keeping schedule {declaration.name!r}")
        declared = False
        declared_again = False
        while True:
            try:
                stored: ScheduleRecord | Tombstone | None = None
                if not declared:
                    stored = await self._declare()
                    declared = True
                if stored is None:  # overtaken as it declared, or declared a while ago
                    stored = await read_stored(self._client, self._keys, declaration.name)
                if isinstance(stored, ScheduleRecord) and stored.pending:
                    # A declaration that died before it made its record live: taken as no
                    # record at all, so the schedule is declared again where it belongs.
                    stored = None
                if not isinstance(stored, ScheduleRecord):
                    if not await self._declare_again(stored, declared_again):
                        return
                    declared, declared_again = False, True
                    continue
                declared_again = False
                record = stored
                if _has_a_tick_to_produce(record):
                    owned = await self._still_owned(record)
                    if owned is None:
                        _log_declared_again(declaration.name, "the name directory")
                        declared = False
                        continue
                    if not owned:
                        return
                wait = await self._step(record)
                errors.reset()
            except REDIS_ERRORS as exc:
                await errors.sleep_after(exc)
                continue
            except _TickNotMade as exc:
                logger.error("schedule %r: %s", declaration.name, exc, exc_info=exc.__cause__)
                await errors.sleep_after(exc)
                continue
            if wait > 0:
                await anyio.sleep(wait)

    async def _declare(self) -> ScheduleRecord | None:
        """Declares the schedule; the record it wrote, None when a later declaration of the
        name overtook it."""
        declaration = self._declaration
        outcome, record = await declare(
            self._client, self._prefix, declaration.event_type, declaration.name,
            declaration.spec.key,
        )  # fmt: skip
        if outcome not in ("created", "same", "superseded"):
            logger.warning(
                "schedule %r changed from %r to %r; the pending tick of the old spec is "
                "cancelled", declaration.name, outcome, declaration.spec.key,
            )  # fmt: skip
        return record

    async def _declare_again(self, stored: Tombstone | None, just_declared: bool) -> bool:
        """Whether to declare the schedule again now that this type holds no live record of
        it (records.after_gone); says why, either way. Not right after declaring it again:
        a declaration that left no live record behind was overtaken, and the keeper stops."""
        declaration = self._declaration
        again, entry = await after_gone(
            self._client, self._prefix, declaration.event_type, declaration.name, stored
        )
        if again and not just_declared:
            _log_declared_again(declaration.name, "its record")
            return True
        moved_to = None if entry is None else entry.event_type
        if moved_to == declaration.event_type:
            moved_to = None  # declared again and at once overtaken: told as a removal
        logger.warning(
            "schedule %r %s; this service stops keeping it", declaration.name,
            _whereabouts(moved_to),
        )  # fmt: skip
        return False

    async def _still_owned(self, record: ScheduleRecord) -> bool | None:
        """See records.still_owned; says why when the name is no longer this type's."""
        declaration = self._declaration
        owned, entry = await still_owned(
            self._client, self._prefix, declaration.event_type, declaration.name, record
        )
        if owned is False:
            assert entry is not None
            logger.warning(
                "schedule %r %s; this service stops keeping it", declaration.name,
                _whereabouts(entry.event_type),
            )  # fmt: skip
        return owned

    async def _step(self, record: ScheduleRecord) -> float:
        """Produces what is due to be produced; returns how long to sleep before the next
        look (0: look again at once)."""
        if not _has_a_tick_to_produce(record):
            assert record.tick is not None
            return (record.tick - record.now) / 1000  # the latest tick is still to come
        spec = self._stored_spec(record)
        declaration = self._declaration
        plan = ticks_to_produce(
            spec, record.tick, record.now, declaration.misfire, declaration.max_catch_up
        )
        for tick in plan.ticks:
            item = self._prepare(spec, tick)
            outcome, _ = await produce_tick(
                self._client, self._keys, declaration.name, spec.key, record.tick, tick, item,
                record.token,
            )  # fmt: skip
            if outcome not in ("produced", "kept"):
                return 0  # another service moved the schedule on, or it changed: read again
            if plan.dropped_missed and tick == plan.ticks[0]:
                # Said by the one keeper whose catch-up went through, once.
                logger.warning(
                    "schedule %r: more than max_catch_up=%d ticks were missed; producing the "
                    "latest %d, from %s", declaration.name, declaration.max_catch_up,
                    len(plan.ticks), spec.tick_time(tick).isoformat(),
                )  # fmt: skip
            if outcome == "kept":
                logger.warning(
                    "schedule %r: tick %s has the id %r of an event still pending, which is "
                    "kept; derive the id from the tick", declaration.name,
                    spec.tick_time(tick).isoformat(), item.id,
                )  # fmt: skip
            record = _advanced(record, tick)
        return 0

    def _stored_spec(self, record: ScheduleRecord) -> ScheduleSpec:
        """The spec Redis holds: the most recent declaration wins, wherever it was made."""
        ours = self._declaration.spec
        if record.spec == ours.key:
            return ours
        if self._warned_spec != record.spec:
            self._warned_spec = record.spec
            logger.warning(
                "schedule %r: Redis holds %r, this service declared %r; the most recent "
                "declaration wins, and this service follows it", self._declaration.name,
                record.spec, ours.key,
            )  # fmt: skip
        try:
            return ScheduleSpec.from_key(record.spec)
        except ConfigurationError as exc:
            raise _TickNotMade(f"the stored spec is unusable: {exc}") from exc

    def _prepare(self, spec: ScheduleSpec, tick: int) -> EnqueueItem:
        declaration = self._declaration
        moment = spec.tick_time(tick)
        try:
            event = declaration.make_event(moment)
        except Exception as exc:
            raise _TickNotMade(f"the event factory failed for tick {moment.isoformat()}") from exc
        if not isinstance(event, Event) or event_type_name(type(event)) != declaration.event_type:
            raise _TickNotMade(
                f"the event factory returned {event!r} for tick {moment.isoformat()}, not a "
                f"{declaration.event_type} event"
            )
        try:
            return self._producer.prepare(event, DueTime(tick, absolute=True, due_in=0.0))
        except ValueError as exc:
            raise _TickNotMade(f"the tick's event cannot be enqueued: {exc}") from exc


def _has_a_tick_to_produce(record: ScheduleRecord) -> bool:
    """No tick produced yet, or the latest one's time has come."""
    return record.tick is None or record.tick <= record.now


def _log_declared_again(name: str, what_is_gone: str) -> None:
    logger.warning(
        "schedule %r: %s is gone from Redis, yet nothing removed the schedule (the server "
        "lost its data?); this service declares it again", name, what_is_gone,
    )  # fmt: skip


def _whereabouts(event_type: str | None) -> str:
    if event_type is None:
        return "was removed from Redis"
    return f"was declared under event type {event_type} by another service"


def _advanced(record: ScheduleRecord, tick: int) -> ScheduleRecord:
    """The record as this keeper just wrote it, for its next produce in the same step."""
    return ScheduleRecord(
        spec=record.spec, tick=tick, previous_tick=record.tick, tick_id=None,
        produced_at=record.now, now=record.now, token=record.token,
    )  # fmt: skip


class _TickNotMade(Exception):
    """The tick's event could not be made; the keeper logs it and tries again later."""
