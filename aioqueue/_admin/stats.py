"""Queue statistics per event type, read from Redis on the server's clock (`aioqueue stats`).

What each number means (all counted by `lua/stats.lua` at one instant of the server clock, per
partition, then added up over a type's partitions):

- **pending**: events not yet settled (the `events` hash). Each pending event is in exactly
  one of: due now, ready, in flight, or waiting for its due time (first attempt or retry);
  so pending minus the next three is how many wait for their time.
- **due now**: pending events whose due time has passed but which no dispatcher has moved to
  the ready list yet (schedule score <= server now). Includes events whose worker was lost:
  the lease it stopped renewing ran out.
- **ready**: dispatched events whose delivery waits in the ready list for a consumer with a
  free handler slot. Stale copies in the list (of events cancelled, replaced or re-dispatched
  since, which consumers drop) are not counted.
- **in flight**: events taken by a consumer whose attempt has no outcome yet: dispatched (the
  stored envelope carries `due_at`, which a failed attempt removes) and not in the ready
  list. A handler that runs, or a worker that died while running one: until a dispatcher
  takes its event again after its lease (5 s by default), that event also counts as
  due now. Read from a counter the scripts keep (`under_way`), not from the envelopes, so
  `stats` costs the same at ten events or ten million.
- **finished**: successes so far (acknowledged events), a running total the scripts keep;
  its growth over time is the type's throughput.
- **dead**: dead letters.
- **paused**: whether the type is paused (`aioqueue pause`): nothing is dispatched or claimed.
- **rate limit**: the handler starts per window recorded for the type, if any.
- **oldest overdue**: how long, in seconds, the most overdue event has been waiting for a
  dispatcher or a consumer: server now minus the earliest due time in the schedule (if it has
  passed) or minus the `due_at` of the oldest ready event. 0 when nothing waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.exceptions import ResponseError

from aioqueue._admin.named_types import resolve_layouts
from aioqueue._model.rate_limit import RateLimit
from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys, QueueLayout
from aioqueue._wire.pausing import is_paused
from aioqueue._wire.rate_limits import read_rate_limit
from aioqueue._wire.registry import read_registry
from aioqueue._wire.scripts import LuaScript

__all__ = ["QueueStats", "StatsSnapshot", "read_stats"]

STATS = LuaScript("stats")


@dataclass(frozen=True, slots=True)
class QueueStats:
    """The state of one event type's queue (see the module docstring for each number)."""

    event_type: str
    partitions: int
    pending: int
    due_now: int
    ready: int
    in_flight: int
    dead: int
    oldest_overdue: float
    """Seconds."""
    paused: bool = False
    rate_limit: RateLimit | None = None
    finished: int = 0
    """Successes so far (a running total)."""

    def to_json(self) -> dict[str, Any]:
        fields = asdict(self)
        fields["type"] = fields.pop("event_type")
        limit = self.rate_limit
        fields["rate_limit"] = (
            None if limit is None else {"limit": limit.limit, "per": limit.per_ms / 1000}
        )
        return fields


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    server_time_ms: int
    """The server clock when the first queue was counted."""
    queues: list[QueueStats]
    problems: list[str] = field(default_factory=list)
    """Registry entries and queues that could not be read, each described; the rest are
    counted all the same."""

    def to_json(self) -> dict[str, Any]:
        return {
            "server_time_ms": self.server_time_ms,
            "types": [queue.to_json() for queue in self.queues],
            "problems": self.problems,
        }


async def read_stats(
    client: RedisClient,
    prefix: str,
    event_types: Sequence[str] = (),
    *,
    allow_undeclared: bool = False,
) -> StatsSnapshot:
    """Counts the queues of `event_types` (every registered type when empty; one nobody
    declared raises UndeclaredTypeError unless `allow_undeclared`). A registry entry or a
    queue that cannot be read is described in `problems` and the others are counted: one
    bad record must not blind the operator to every type."""
    problems: list[str] = []
    if event_types:
        layouts = await resolve_layouts(
            client, prefix, event_types, allow_undeclared=allow_undeclared
        )
    else:
        registry = await read_registry(client, prefix)
        layouts, problems = registry.layouts, list(registry.problems)
    queues = []
    first_now: int | None = None
    for layout in layouts:
        try:
            stats, now = await _read_type(client, layout)
        except ResponseError as exc:  # a key of the wrong type, written by something else
            problems.append(f"{layout.event_type} cannot be counted: {exc}")
            continue
        first_now = now if first_now is None else first_now
        queues.append(stats)
    if first_now is None:
        first_now = await _server_time_ms(client)
    return StatsSnapshot(server_time_ms=first_now, queues=queues, problems=problems)


@dataclass
class _Counts:
    pending: int = 0
    due_now: int = 0
    ready: int = 0
    in_flight: int = 0
    dead: int = 0
    oldest_overdue_ms: int = 0
    finished: int = 0


async def _read_type(client: RedisClient, layout: QueueLayout) -> tuple[QueueStats, int]:
    counts = _Counts()
    first_now: int | None = None
    for keys in layout.all_keys:
        now = await _read_partition(client, keys, counts)
        first_now = now if first_now is None else first_now
    assert first_now is not None
    stats = QueueStats(
        event_type=layout.event_type,
        partitions=layout.partitions,
        pending=counts.pending,
        due_now=counts.due_now,
        ready=counts.ready,
        in_flight=counts.in_flight,
        dead=counts.dead,
        oldest_overdue=counts.oldest_overdue_ms / 1000,
        paused=await is_paused(client, layout),
        rate_limit=await read_rate_limit(client, layout),
        finished=counts.finished,
    )
    return stats, first_now


async def _read_partition(client: RedisClient, keys: QueueKeys, counts: _Counts) -> int:
    script_keys = [keys.schedule, keys.events, keys.ready, keys.dead_letters, keys.counts]
    reply = [int(value) for value in await STATS.run(client, script_keys, [])]
    now, pending, due_now, ready, dead, under_way, earliest_due, ready_head_due = reply[:8]
    counts.finished += reply[8]
    counts.pending += pending
    counts.due_now += due_now
    counts.ready += ready
    # Never less than nothing: an envelope with `due_at` written by hand was never counted.
    counts.in_flight += max(0, under_way - ready)
    counts.dead += dead
    for due in (earliest_due, ready_head_due):
        if due >= 0:
            counts.oldest_overdue_ms = max(counts.oldest_overdue_ms, now - due)
    return now


async def _server_time_ms(client: RedisClient) -> int:
    seconds, microseconds = await gated_call(client, lambda: client.time())
    return int(seconds) * 1000 + int(microseconds) // 1000
