"""Schedules in Redis: their records, beside their event type's keys, and the scripts that
change them (documented in docs/wire-format.md).

A record lives in the hash `P:{Type}:schedules` (field: the schedule's name), so the script
that produces a tick writes the tick's event and the record in one slot, atomically. The
prefix's directory `P:schedules` (name -> event type) lets tools find every schedule.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from aioqueue._engine.client import RedisClient, within_reply_timeout
from aioqueue._engine.envelope import died_at_from_ms, text
from aioqueue._engine.keys import QueueKeys
from aioqueue._engine.recovery import logger
from aioqueue._engine.scripts import LuaScript
from aioqueue._engine.writes import EnqueueItem
from aioqueue._model.errors import ConfigurationError

from .spec import ScheduleSpec

__all__ = [
    "ScheduleInfo",
    "ScheduleRecord",
    "TickOutcome",
    "declare",
    "directory_key",
    "info_of",
    "list_schedules",
    "produce_tick",
    "read_directory",
    "read_record",
    "remove",
    "remove_by_name",
]

DECLARE = LuaScript("schedule_declare")
TICK = LuaScript("schedule_tick")
REMOVE = LuaScript("schedule_remove")

TickOutcome = Literal["produced", "kept", "moved", "early", "changed", "gone"]


def directory_key(prefix: str) -> str:
    """hash: schedule name -> the wire name of its event type."""
    return f"{prefix}:schedules"


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A schedule as Redis holds it, read at `now` (ms, server clock)."""

    spec: str
    tick: int | None
    """The latest tick produced (or, after a spec change, the change's time): the next tick
    comes after it."""
    previous_tick: int | None
    tick_id: str | None
    produced_at: int | None
    """When the latest tick's event was written."""
    now: int

    @classmethod
    def parse(cls, raw: bytes | str, now: int) -> ScheduleRecord | None:
        try:
            fields = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(fields, dict) or not isinstance(fields.get("spec"), str):
            return None
        return cls(
            spec=fields["spec"],
            tick=_ms(fields.get("tick")),
            previous_tick=_ms(fields.get("previous_tick")),
            tick_id=fields["tick_id"] if isinstance(fields.get("tick_id"), str) else None,
            produced_at=_ms(fields.get("produced_at")),
            now=now,
        )


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """What `EventService.schedules()` and the operator tools show of one schedule."""

    name: str
    event_type: str
    spec: str
    """The cron expression, or the interval (`every 30 s`)."""
    tz: str
    next_tick: datetime | None
    last_tick: datetime | None
    """The latest tick whose time has come (its event produced), None before the first."""
    last_fired_at: datetime | None
    """When the event of the latest produced tick was written: ahead of its tick normally,
    after it for a tick produced late (services were down: see `misfire`)."""

    def to_json(self) -> dict[str, Any]:
        def when(moment: datetime | None) -> str | None:
            return moment.isoformat() if moment else None

        return {
            "name": self.name,
            "type": self.event_type,
            "spec": self.spec,
            "tz": self.tz,
            "next_tick": when(self.next_tick),
            "last_tick": when(self.last_tick),
            "last_fired_at": when(self.last_fired_at),
        }


async def declare(
    client: RedisClient, keys: QueueKeys, prefix: str, event_type: str, name: str, spec: str
) -> tuple[str, ScheduleRecord]:
    """Stores the spec (the latest declaration wins); returns ('created' | 'same' | the
    replaced spec, the record)."""
    await within_reply_timeout(client.hset(directory_key(prefix), name, event_type))
    outcome, now, raw = await DECLARE.run(
        client, [keys.schedules, keys.schedule, keys.events], [name, spec]
    )
    record = ScheduleRecord.parse(raw, int(now))
    assert record is not None
    return text(outcome), record


async def produce_tick(
    client: RedisClient,
    keys: QueueKeys,
    name: str,
    spec: str,
    seen_tick: int | None,
    tick: int,
    item: EnqueueItem,
) -> tuple[TickOutcome, ScheduleRecord | None]:
    """Writes the tick's event and records the tick, if the record still says `seen_tick`."""
    script_keys = [keys.schedules, keys.schedule, keys.events, keys.sequence, keys.wake]
    args: list[str | int] = [
        name, spec, "" if seen_tick is None else str(seen_tick), str(tick),
        item.id, item.payload, item.context_json, str(item.due_ms),
    ]  # fmt: skip
    outcome, now, raw = await TICK.run(client, script_keys, args)
    record = ScheduleRecord.parse(raw, int(now)) if raw else None
    return text(outcome), record  # type: ignore[return-value]


async def read_record(client: RedisClient, keys: QueueKeys, name: str) -> ScheduleRecord | None:
    raw, (seconds, micros) = await within_reply_timeout(_read(client, keys, name))
    now = int(seconds) * 1000 + int(micros) // 1000
    return None if raw is None else ScheduleRecord.parse(raw, now)


async def _read(client: RedisClient, keys: QueueKeys, name: str) -> tuple[Any, Any]:
    return await client.hget(keys.schedules, name), await client.time()


async def remove(client: RedisClient, keys: QueueKeys, prefix: str, name: str) -> bool:
    removed = int(await REMOVE.run(client, [keys.schedules, keys.schedule, keys.events], [name]))
    await within_reply_timeout(client.hdel(directory_key(prefix), name))
    return removed == 1


async def read_directory(client: RedisClient, prefix: str) -> dict[str, str]:
    """Every schedule name of the prefix -> its event type."""
    entries = await within_reply_timeout(client.hgetall(directory_key(prefix)))
    return {text(name): text(event_type) for name, event_type in entries.items()}


async def list_schedules(client: RedisClient, prefix: str) -> list[ScheduleInfo]:
    """Every schedule of the prefix, by name; an unusable record is logged and left out."""
    infos = []
    for name, event_type in sorted((await read_directory(client, prefix)).items()):
        record = await read_record(client, QueueKeys.for_type(prefix, event_type), name)
        if record is None:
            continue
        try:
            infos.append(info_of(name, event_type, record))
        except ConfigurationError as exc:
            logger.warning("schedule %r has an unusable record: %s", name, exc)
    return infos


async def remove_by_name(client: RedisClient, prefix: str, name: str) -> bool:
    """Removes the schedule wherever the directory says it lives; False if there is none."""
    event_type = (await read_directory(client, prefix)).get(name)
    if event_type is None:
        return False
    return await remove(client, QueueKeys.for_type(prefix, event_type), prefix, name)


def info_of(name: str, event_type: str, record: ScheduleRecord) -> ScheduleInfo:
    """The record as people read it; the next tick is computed from the stored spec."""
    spec = ScheduleSpec.from_key(record.spec)
    if record.tick is None:
        last, upcoming = None, next(spec.ticks_after(record.now))
    elif record.tick_id is None:  # a spec change at `tick`: nothing of the new spec yet
        last, upcoming = record.previous_tick, next(spec.ticks_after(record.tick))
    elif record.tick > record.now:
        last, upcoming = record.previous_tick, record.tick
    else:
        last, upcoming = record.tick, next(spec.ticks_after(record.tick))
    return ScheduleInfo(
        name=name,
        event_type=event_type,
        spec=spec.describe(),
        tz=spec.tz,
        next_tick=spec.tick_time(upcoming),
        last_tick=spec.tick_time(last) if last is not None else None,
        last_fired_at=died_at_from_ms(record.produced_at) if record.produced_at else None,
    )


def _ms(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
