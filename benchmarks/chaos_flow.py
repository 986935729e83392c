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
  each handler call logged when it starts (with its attempt, due and claim times) and when it
  ends (ends also when cut by its timeout or cancelled). An *overlap* is a call of a key
  starting before the previous call of that key ended; a call of a worker that was SIGKILLed
  ends at the kill. What a key's hold promises ends with the lease of the call holding it: a
  worker stalled longer than its lease mid-handler (or cut off from Redis) may see its event
  run again elsewhere and the next of its key begin beside it (the guarantees page). Such
  overlaps are counted apart (`key_overlaps_lease_ended`), and only when the log proves it:
  a next attempt of the earlier call's event came due (at its lease's end) no later than the
  later call's claim, or the same attempt was handed out again while the earlier call ran (a
  failover lost the claim's write, and the key's hold with it).

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
    key_overlaps_lease_ended: int
    """Overlaps whose earlier call ran on past its lease's end (see the module's doc)."""
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
    time of the start or end; a limited event's line has its claim's time instead, a keyed
    event's start its attempt, due time and claim time after it)."""
    rng = random.Random()

    def note(kind: str, event_id: str, key: int | str, at_ms: float, *more: object) -> None:
        fields = (kind, event_id, key, f"{at_ms:.1f}", *more)
        os.write(flow_log, ("\t".join(map(str, fields)) + "\n").encode())

    async def handle_limited(event: ChaosLimited) -> bool:
        note("S", event.id, "", current_delivery().claimed_at.timestamp() * 1000)
        record(event.id, event.due_ms)
        return True

    async def handle_keyed(event: ChaosKeyed) -> bool:
        delivery = current_delivery()
        due_ms = f"{delivery.due_at.timestamp() * 1000:.1f}"
        claimed_ms = f"{delivery.claimed_at.timestamp() * 1000:.1f}"
        note("S", event.id, event.key, time.time() * 1000, delivery.attempt, due_ms, claimed_ms)
        try:
            record(event.id, event.due_ms)
            await anyio.sleep(rng.uniform(0, handler_ms / 1000))
            return True
        finally:
            note("E", event.id, event.key, time.time() * 1000)

    service.add_handler(ChaosLimited, handle_limited, parallelism=8)
    service.add_handler(ChaosKeyed, handle_keyed, parallelism=8)


@dataclass
class KeyedCall:
    """One handler call of a keyed event, from its flow log's lines (times in ms: start and
    end on the worker's clock, due and claim on the server's, the same machine's)."""

    event_id: str
    key: int
    attempt: int
    due_ms: float
    claimed_ms: float
    start: float
    end: float


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
    calls: list[KeyedCall] = []
    for path in sorted(logs.glob("*.flow")):
        claims, keyed_calls = read_flow_log(path.read_text(), kills_ms.get(path.stem, math.inf))
        limited_claims.extend(claims)
        calls.extend(keyed_calls)
    violations = _windows_over_limit(sorted(limited_claims), rate_limit)
    overlaps = key_overlaps(calls)
    per_ms = RATE_PER_S * 1000
    restart = restart_ms or (math.inf, 0.0)

    def window_near_restart(first_claim: float) -> bool:
        # The window's claims were counted against a window state the kill may have cut
        # short: the window reaches into the lost second, or begins before the state rebuilt.
        at, down_ms = restart
        return at - FSYNC_LOSS_MS - per_ms <= first_claim <= at + down_ms + per_ms

    def call_near_restart(earlier: KeyedCall) -> bool:
        # The earlier call's hold on its key was written within the lost second.
        at, _ = restart
        return at - FSYNC_LOSS_MS - 500 <= earlier.start <= at

    lease_ended = near_restart = 0
    for earlier, later in overlaps:
        if lease_ended_first(earlier, later, calls):
            lease_ended += 1
        elif call_near_restart(earlier):
            near_restart += 1
    expected = {event.id for event in (*limited, *keyed)}
    return FlowReport(
        rate_limit=rate_limit,
        limited_scheduled=len(limited),
        keyed_scheduled=len(keyed),
        lost=len(expected - handed_out - pending),
        limit_violations=sum(1 for claim in violations if not window_near_restart(claim)),
        limit_violations_near_restart=sum(1 for claim in violations if window_near_restart(claim)),
        key_overlaps=len(overlaps) - lease_ended - near_restart,
        key_overlaps_near_restart=near_restart,
        key_overlaps_lease_ended=lease_ended,
        keyed_calls=len(calls),
    )


def read_flow_log(text: str, killed_at: float) -> tuple[list[float], list[KeyedCall]]:
    """One worker's flow log: the claim times of its limited calls, and its keyed calls (a
    call never ended, its worker SIGKILLed, ends at `killed_at`)."""
    limited_claims: list[float] = []
    calls: list[KeyedCall] = []
    started: dict[str, KeyedCall] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "S" and parts[1].startswith(LIMITED_PREFIX) and len(parts) == 4:
            limited_claims.append(float(parts[3]))
        elif parts[0] == "S" and len(parts) == 7:
            event_id, key, start, attempt, due_ms, claimed_ms = parts[1:]
            started[event_id] = KeyedCall(
                event_id,
                int(key),
                int(attempt),
                float(due_ms),
                float(claimed_ms),
                float(start),
                math.inf,
            )
        elif parts[0] == "E" and len(parts) == 4 and parts[1] in started:
            call = started.pop(parts[1])
            call.end = float(parts[3])
            calls.append(call)
        # Any other line was torn by a kill: the main log's count of torn lines covers it.
    for call in started.values():  # never ended: its worker was killed
        call.end = killed_at
        calls.append(call)
    return limited_claims, calls


def key_overlaps(calls: Sequence[KeyedCall]) -> list[tuple[KeyedCall, KeyedCall]]:
    """Each call of a key that began before an earlier call of that key ended, with that
    earlier call (the one of the latest end so far: a short call inside a long one must not
    hide the long one from the next)."""
    by_key: dict[int, list[KeyedCall]] = {}
    for call in calls:
        by_key.setdefault(call.key, []).append(call)
    overlaps = []
    for of_key in by_key.values():
        of_key.sort(key=lambda call: call.start)
        latest = of_key[0]
        for call in of_key[1:]:
            if call.start < latest.end:
                overlaps.append((latest, call))
            if call.end > latest.end:
                latest = call
    return overlaps


def lease_ended_first(earlier: KeyedCall, later: KeyedCall, calls: Sequence[KeyedCall]) -> bool:
    """Whether the log proves that the earlier call's lease had ended when the later call was
    claimed: a next attempt of its event came due (when that lease ended, or later for an
    attempt after that; a retry after a failure is due after the call ended) no later than
    the later call's claim, whenever it was handed out (its worker may have been killed
    first); or the same attempt was handed out again while the earlier call ran (a failover
    lost the claim's write, and the key's hold with it)."""
    return any(
        again.event_id == earlier.event_id
        and (
            (again.attempt > earlier.attempt and again.due_ms <= later.claimed_ms)
            or (
                again.attempt == earlier.attempt
                and earlier.claimed_ms < again.claimed_ms < earlier.end
            )
        )
        for again in calls
    )


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
