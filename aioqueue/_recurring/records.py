"""Schedules in Redis: their records, beside their event type's keys, and the scripts that
change them (documented in docs/wire-format.md).

A record lives in the hash `P:{Type}:schedules` (field: the schedule's name), so the script
that produces a tick writes the tick's event and the record in one slot, atomically. The
prefix's name directory says which type holds each name (names.py: how a name moves from
one type to another, on Redis Cluster too); declaring, removing and listing go through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import orjson

from aioqueue._model.errors import ConfigurationError
from aioqueue._producing.enqueue_calls import EnqueueItem
from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._wire.envelope import died_at_from_ms, iso_or_none, text
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import LuaScript

from .names import NameEntry, claim_name, read_entries, read_entry, settle
from .spec import ScheduleSpec

__all__ = [
    "ScheduleInfo",
    "ScheduleRecord",
    "TickOutcome",
    "Tombstone",
    "after_gone",
    "claim_floor",
    "declare",
    "declare_record",
    "fence",
    "info_of",
    "list_schedules",
    "make_live",
    "produce_tick",
    "read_record",
    "read_stored",
    "remove_by_name",
    "still_owned",
]

DECLARE = LuaScript("schedule_declare")
ACTIVATE = LuaScript("schedule_activate")
TICK = LuaScript("schedule_tick")
FENCE = LuaScript("schedule_fence")

TickOutcome = Literal["produced", "kept", "moved", "early", "changed", "gone"]


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
    token: int = 0
    """The name directory's token of the declaration that wrote the record (names.py)."""
    pending: bool = False
    """Written by a declaration that has yet to find its claim still standing (names.py):
    not live, it produces no tick."""

    @classmethod
    def parse(cls, raw: bytes | str, now: int) -> ScheduleRecord | None:
        """The record, or None for a tombstone (the name left the type) or unreadable text."""
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
            token=_ms(fields.get("token")) or 0,
            pending="pending" in fields,
        )


@dataclass(frozen=True, slots=True)
class Tombstone:
    """What a fence leaves of a type's record (schedule_fence.lua): the name moved to another
    type or was removed, by the claim with the token `fenced` (0: unreadable text)."""

    fenced: int

    @classmethod
    def parse(cls, raw: bytes | str) -> Tombstone:
        try:
            fields = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return cls(0)
        fenced = fields.get("fenced") if isinstance(fields, dict) else None
        return cls(_ms(fenced) or 0)


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
        """The schedule as `aioqueue schedules --json` and `GET /schedules` show it: times as
        ISO 8601 text, None for a tick not produced yet."""

        return {
            "name": self.name,
            "type": self.event_type,
            "spec": self.spec,
            "tz": self.tz,
            "next_tick": iso_or_none(self.next_tick),
            "last_tick": iso_or_none(self.last_tick),
            "last_fired_at": iso_or_none(self.last_fired_at),
        }


async def declare(
    client: RedisClient, prefix: str, event_type: str, name: str, spec: str
) -> tuple[str, ScheduleRecord | None]:
    """Stores the spec under `event_type` (the latest declaration wins; a name held by another
    type moves, see names.py); returns ('created' | 'same' | the replaced spec, the record),
    or ('superseded', None) when a later declaration of the name overtook this one."""
    keys = QueueKeys.for_type(prefix, event_type)
    floor = await claim_floor(client, keys, name)
    token, stale_types = await claim_name(client, prefix, name, event_type, floor)
    for stale_type in stale_types:
        await fence(client, QueueKeys.for_type(prefix, stale_type), name, token)
    outcome, record = await declare_record(client, keys, name, spec, token)
    if record is not None and record.pending:
        entry = await read_entry(client, prefix, name)
        record = await make_live(client, keys, name, event_type, token, entry)
        if record is None:
            outcome = "superseded"
    await settle(client, prefix, name, token)
    return outcome, record


async def claim_floor(client: RedisClient, keys: QueueKeys, name: str) -> int:
    """The least token a declaration under `keys`' type must claim for its record to be
    written: the record's own token, or one above its tombstone's. Below what the directory
    hands out anyway, unless the directory lost its data and counts from 1 again (names.py)."""
    stored = await read_stored(client, keys, name)
    if isinstance(stored, ScheduleRecord):
        return stored.token
    return 0 if stored is None else stored.fenced + 1


async def after_gone(
    client: RedisClient,
    prefix: str,
    event_type: str,
    name: str,
    stored: Tombstone | None,
) -> tuple[bool, NameEntry | None]:
    """What a keeper does when its type holds no live record of `name` (`stored`: a
    tombstone, or None for no record at all): True to declare the schedule again, with the
    directory's entry. Again when the directory gives the name to this type (the record was
    lost, or a declaration of this type is half done), or when neither the record nor the
    directory entry exists (the data was lost: a removal leaves both). Not when the directory
    gives the name to another type or says it was removed, nor for a tombstone whose
    directory entry is gone: the removal or move it records stands."""
    entry = await read_entry(client, prefix, name)
    if entry is None:
        return stored is None, None
    return entry.event_type == event_type, entry


async def declare_record(
    client: RedisClient, keys: QueueKeys, name: str, spec: str, token: int
) -> tuple[str, ScheduleRecord | None]:
    """Step 3 of a declaration (names.py): writes the type's record with the claim's token;
    ('superseded', None) when a claim with a newer token fenced or wrote it meanwhile."""
    outcome, now, raw = await DECLARE.run(
        client, [keys.schedules, keys.schedule, keys.events], [name, spec, token]
    )
    if not raw:
        return text(outcome), None
    record = ScheduleRecord.parse(raw, int(now))
    assert record is not None
    return text(outcome), record


async def make_live(
    client: RedisClient,
    keys: QueueKeys,
    name: str,
    event_type: str,
    token: int,
    entry: NameEntry | None,
) -> ScheduleRecord | None:
    """Step 4 of a declaration whose record is pending, given the directory's `entry` read
    after the record was written: the live record, or None. Made live when the entry is still
    the claim's (the same type and token), or gone (the directory lost its data: keepers
    declare on, see after_gone). A later claim of another type fences this type before its
    own record is written, so a record made live after that read is fenced by it, or refused;
    a loss of this type's slot takes the pending record with it. When the name went to
    another type or was removed, the pending record is fenced; a later claim of the same
    type writes over it instead."""
    if entry is None or (entry.event_type == event_type and entry.token == token):
        _, now, raw = await ACTIVATE.run(client, [keys.schedules], [name, token])
        return ScheduleRecord.parse(raw, int(now)) if raw else None
    if entry.event_type != event_type:
        await fence(client, keys, name, entry.token)
    return None


async def fence(client: RedisClient, keys: QueueKeys, name: str, token: int) -> bool:
    """Turns the type's record of `name` into a tombstone of `token` and cancels its pending
    tick, unless it was declared with that token or a newer one; True if a live record was
    fenced (see names.py)."""
    script_keys = [keys.schedules, keys.schedule, keys.events]
    return int(await FENCE.run(client, script_keys, [name, token])) == 1


async def still_owned(
    client: RedisClient, prefix: str, event_type: str, name: str, record: ScheduleRecord
) -> tuple[bool | None, NameEntry | None]:
    """Whether the name directory still gives `name` to `event_type`, the check a keeper
    makes before it produces a tick (None: the directory has no entry for the name). When
    it does not, the type's record is fenced with the directory's token: a move or removal
    that died before its fences left it live (names.py)."""
    entry = await read_entry(client, prefix, name)
    if entry is None:
        return None, None
    if entry.event_type == event_type:
        return True, entry
    if entry.token > record.token:
        await fence(client, QueueKeys.for_type(prefix, event_type), name, entry.token)
    return False, entry


async def produce_tick(
    client: RedisClient,
    keys: QueueKeys,
    name: str,
    spec: str,
    seen_tick: int | None,
    tick: int,
    item: EnqueueItem,
    token: int,
) -> tuple[TickOutcome, ScheduleRecord | None]:
    """Writes the tick's event and records the tick, if the record still says `seen_tick`
    and still belongs to the declaration with `token`."""
    script_keys = [keys.schedules, keys.schedule, keys.events, keys.sequence, keys.wake]
    args: list[str | int] = [
        name, spec, "" if seen_tick is None else str(seen_tick), str(tick),
        item.id, item.payload, item.context_json, str(item.due_ms), token,
    ]  # fmt: skip
    outcome, now, raw = await TICK.run(client, script_keys, args)
    record = ScheduleRecord.parse(raw, int(now)) if raw else None
    return text(outcome), record  # type: ignore[return-value]


async def read_record(client: RedisClient, keys: QueueKeys, name: str) -> ScheduleRecord | None:
    """The type's live record of `name`, None when there is none."""
    stored = await read_stored(client, keys, name)
    return stored if isinstance(stored, ScheduleRecord) and not stored.pending else None


async def read_stored(
    client: RedisClient, keys: QueueKeys, name: str
) -> ScheduleRecord | Tombstone | None:
    """What the type holds under `name`: a live record, a tombstone (the name moved or was
    removed; also unreadable text), or None for nothing at all."""
    raw, (seconds, micros) = await gated_call(client, lambda: _read(client, keys, name))
    if raw is None:
        return None
    now = int(seconds) * 1000 + int(micros) // 1000
    return ScheduleRecord.parse(raw, now) or Tombstone.parse(raw)


async def _read(client: RedisClient, keys: QueueKeys, name: str) -> tuple[Any, Any]:
    return await client.hget(keys.schedules, name), await client.time()


async def remove_by_name(client: RedisClient, prefix: str, name: str) -> bool:
    """Removes the schedule, whichever type holds the name (every type a half-done move may
    have left it in, too), with its pending next tick; False if no record was live."""
    token, stale_types = await claim_name(client, prefix, name, None)
    removed = False
    for stale_type in stale_types:
        removed |= await fence(client, QueueKeys.for_type(prefix, stale_type), name, token)
    await settle(client, prefix, name, token)
    return removed


async def list_schedules(client: RedisClient, prefix: str) -> list[ScheduleInfo]:
    """Every live schedule of the prefix, by name: the record of the type the directory
    names, or, while a move is half done, a record its fences have not reached yet (the one
    still producing ticks). An unusable record is logged and left out."""
    infos = []
    for name, entry in sorted((await read_entries(client, prefix)).items()):
        for event_type in _holders(entry):
            record = await read_record(client, QueueKeys.for_type(prefix, event_type), name)
            if record is None:
                continue
            try:
                infos.append(info_of(name, event_type, record))
            except ConfigurationError as exc:
                logger.warning("schedule %r has an unusable record: %s", name, exc)
            break
    return infos


def _holders(entry: NameEntry) -> list[str]:
    """The types that may hold a live record of the name, the directory's own first."""
    holders = [] if entry.event_type is None else [entry.event_type]
    return holders + [t for t in entry.unsettled if t != entry.event_type]


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
