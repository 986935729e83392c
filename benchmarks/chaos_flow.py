"""Flow control in the chaos run: a rate-limited type and a serial-key type go through the same
kills, cuts and server restart as the main events, and the report counts what must stay 0.

- ChaosLimited: every event due when the window opens, the limit (per RATE_PER_S, every
  service summed) set so that draining them takes about three quarters of the window: the
  limit binds all along. A *limit violation* is a window of RATE_PER_S holding more than the
  limit of the claims the handlers were called for, each at the time the server handed it out
  (`Delivery.claimed_at`, on the server's clock, what the limit counts): exact whatever delay a
  loaded worker puts between a claim and its handler's start (with the starts' own times,
  0.3 s of slack was not enough under the suite's long server matrix).
- ChaosKeyed: events spread over the window on KEYS key values (`__serial_key__ = "key"`),
  each handler call logged when it starts and when it ends (ends also when cut by its timeout
  or cancelled). An *overlap* is a call of a key starting before the previous call of that key
  ended; a call of a worker that was SIGKILLed ends at the kill.

With AOF `appendfsync everysec`, a server SIGKILL may lose the last second of writes, the
key holders and the rate window's hand-outs among them: what that can let through is counted
apart (`*_near_restart`: calls that started within the second before the kill, or windows
that reach into it) and is not a fault of the scripts. Every event of both types must also be
delivered: `lost` counts those never handed to a handler, as the main report does.
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from aioqueue import Event, EventService, EventServiceBuilder, current_delivery

LIMITED_PREFIX = "lim-"
KEYED_PREFIX = "key-"
RATE_PER_S = 2.0
KEYS = 20
# AOF everysec: how much of the server's last writes a SIGKILL may take with it.
FSYNC_LOSS_MS = 1000.0


@dataclass
class ChaosLimited(Event):
    id: str
    due_ms: int


@dataclass
class ChaosKeyed(Event):
    __serial_key__ = "key"
    id: str
    due_ms: int
    key: int


@dataclass
class FlowReport:
    rate_limit: int
    """Hand-outs (claims) allowed per RATE_PER_S."""
    limited_scheduled: int
    keyed_scheduled: int
    lost: int
    """Flow events never handed to a handler (and not pending)."""
    limit_violations: int
    limit_violations_near_restart: int
    key_overlaps: int
    key_overlaps_near_restart: int
    keyed_calls: int


def rate_limit_for(limited_events: int, window_s: float) -> int:
    """A limit under which the limited events take about 3/4 of the window to drain."""
    return max(5, math.ceil(limited_events / (window_s * 0.75) * RATE_PER_S))


def plan_flow_events(
    events: int, first_due_ms: int, window_ms: int, rng: random.Random
) -> tuple[list[ChaosLimited], list[ChaosKeyed]]:
    """A twentieth as many rate-limited events, all due at once, and a tenth as many keyed
    ones spread over the window."""
    limited = [
        ChaosLimited(id=f"{LIMITED_PREFIX}{index:06d}", due_ms=first_due_ms)
        for index in range(events // 20)
    ]
    keyed = []
    for index in range(events // 10):
        due_ms = first_due_ms + int(rng.uniform(0, window_ms) // 10) * 10
        keyed.append(
            ChaosKeyed(id=f"{KEYED_PREFIX}{index:06d}", due_ms=due_ms, key=rng.randrange(KEYS))
        )
    return limited, keyed


def with_rate_limit(builder: EventServiceBuilder, limit: int) -> EventServiceBuilder:
    return builder.rate_limit(ChaosLimited, limit, per=RATE_PER_S)


def add_flow_handlers(
    service: EventService,
    record: Callable[[str, int], None],
    flow_log: int,
    handler_ms: float,
) -> None:
    """The workers' handlers: each call is recorded like a main event (for lost and
    duplicated), and in the flow log (`S`tart and `E`nd lines, one write(2) each, with the
    time of the start or end; a limited event's line has its claim's time instead)."""
    rng = random.Random()

    def note(kind: str, event_id: str, key: int | str, at_ms: float | None = None) -> None:
        moment = time.time() * 1000 if at_ms is None else at_ms
        os.write(flow_log, f"{kind}\t{event_id}\t{key}\t{moment:.1f}\n".encode())

    async def handle_limited(event: ChaosLimited) -> bool:
        note("S", event.id, "", current_delivery().claimed_at.timestamp() * 1000)
        record(event.id, event.due_ms)
        return True

    async def handle_keyed(event: ChaosKeyed) -> bool:
        note("S", event.id, event.key)
        try:
            record(event.id, event.due_ms)
            await anyio.sleep(rng.uniform(0, handler_ms / 1000))
            return True
        finally:
            note("E", event.id, event.key)

    service.add_handler(ChaosLimited, handle_limited, parallelism=8)
    service.add_handler(ChaosKeyed, handle_keyed, parallelism=8)


def analyse_flow(
    logs: Path,
    *,
    rate_limit: int,
    limited: Sequence[ChaosLimited],
    keyed: Sequence[ChaosKeyed],
    handed_out: set[str],
    pending: set[str],
    kills_ms: dict[str, float],
    restart_ms: tuple[float, float] | None,
) -> FlowReport:
    """The flow part of the report, from the workers' flow logs (`<worker>.flow`);
    `kills_ms` maps a worker's name to when it was SIGKILLed, `restart_ms` is when the server
    was killed and how long it was down (ms), if it was."""
    limited_claims: list[float] = []
    calls: dict[int, list[tuple[float, float]]] = {}
    for path in sorted(logs.glob("*.flow")):
        killed_at = kills_ms.get(path.stem, math.inf)
        started: dict[str, tuple[int, float]] = {}
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) != 4:
                continue  # torn by a kill: the main log's count of torn lines covers it
            kind, event_id, key, moment = parts[0], parts[1], parts[2], float(parts[3])
            if event_id.startswith(LIMITED_PREFIX):
                limited_claims.append(moment)
            elif kind == "S":
                started[event_id] = (int(key), moment)
            elif event_id in started:
                key_value, began = started.pop(event_id)
                calls.setdefault(key_value, []).append((began, moment))
        for key_value, began in started.values():  # never ended: its worker was killed
            calls.setdefault(key_value, []).append((began, killed_at))
    violations = _windows_over_limit(sorted(limited_claims), rate_limit)
    overlaps = [
        (earlier_start, later_start)
        for intervals in calls.values()
        for (earlier_start, earlier_end), (later_start, _) in _neighbours(sorted(intervals))
        if later_start < earlier_end
    ]
    per_ms = RATE_PER_S * 1000
    restart = restart_ms or (math.inf, 0.0)

    def window_near_restart(first_claim: float) -> bool:
        # The window's claims were counted against a window state the kill may have cut
        # short: the window reaches into the lost second, or begins before the state rebuilt.
        at, down_ms = restart
        return at - FSYNC_LOSS_MS - per_ms <= first_claim <= at + down_ms + per_ms

    def call_near_restart(earlier_start: float) -> bool:
        # The earlier call's hold on its key was written within the lost second.
        at, _ = restart
        return at - FSYNC_LOSS_MS - 500 <= earlier_start <= at

    expected = {event.id for event in (*limited, *keyed)}
    return FlowReport(
        rate_limit=rate_limit,
        limited_scheduled=len(limited),
        keyed_scheduled=len(keyed),
        lost=len(expected - handed_out - pending),
        limit_violations=sum(1 for claim in violations if not window_near_restart(claim)),
        limit_violations_near_restart=sum(1 for claim in violations if window_near_restart(claim)),
        key_overlaps=sum(1 for earlier, _ in overlaps if not call_near_restart(earlier)),
        key_overlaps_near_restart=sum(1 for earlier, _ in overlaps if call_near_restart(earlier)),
        keyed_calls=sum(len(intervals) for intervals in calls.values()),
    )


def _neighbours(
    intervals: list[tuple[float, float]],
) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    """Each call of a key with the one before it, keeping the latest end seen so far (a short
    call inside a long one must not hide the long one from the next)."""
    pairs = []
    latest = intervals[0] if intervals else (0.0, 0.0)
    for interval in intervals[1:]:
        pairs.append((latest, interval))
        if interval[1] > latest[1]:
            latest = interval
    return pairs


def _windows_over_limit(claims: list[float], limit: int) -> list[float]:
    """The first claim of each window of RATE_PER_S that holds more than `limit`. A claim at
    t counts against every later one before t + RATE_PER_S, as claim.lua counts it (it keeps
    the hand-outs of the last `per` ms and drops those that old)."""
    window_ms = RATE_PER_S * 1000
    over, last = [], 0
    for first, claimed in enumerate(claims):
        last = max(last, first)
        while last + 1 < len(claims) and claims[last + 1] - claimed < window_ms:
            last += 1
        if last - first + 1 > limit:
            over.append(claimed)
    return over
