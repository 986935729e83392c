"""How the chaos run judges the lease protocol from the handler calls its workers log: the
events a killed worker had begun must be due again within the bound after the kill, and no
attempt may be spent without a handler call unless a kill, the server's crash, or the worker
itself explains it (it gave back what it claimed and was held up past the lease of before it
could begin, and says so).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from chaos_worker import SCHEDULING_INTERVAL

from aioqueue._delivery.leases import NOT_BEGUN_AFTER_LAPSE, RENEWALS_PER_LEASE

# An event a worker's warning names: 'c-000123' (attempt 2).
_NAMED_ATTEMPT = re.compile(r"'([^']+)' \(attempt (\d+)\)")


class Call(NamedTuple):
    """One recorded handler call."""

    event_id: str
    due_ms: int
    """When the event was due (the time it carries)."""
    handled_ms: float
    """When its handler began (epoch ms)."""
    attempt: int
    delivery_due_ms: int
    """When this attempt was due (current_delivery().due_at): for an attempt after a lost
    one, when that one's lease ended."""
    worker: str
    """The worker process that made the call (see WorkerPool)."""


def read_deliveries(logs: Path) -> tuple[list[Call], int]:
    """Every recorded handler call, and the torn lines skipped."""
    calls: list[Call] = []
    torn = 0
    for path in sorted(logs.glob("*.deliveries")):
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) != 5:
                torn += 1
                continue
            event_id, due_ms, handled_ms, attempt, delivery_due_ms = parts
            calls.append(
                Call(
                    event_id,
                    int(due_ms),
                    float(handled_ms),
                    int(attempt),
                    int(delivery_due_ms),
                    path.stem,
                )
            )
    return calls, torn


def read_lapsed_not_begun(logs: Path) -> set[tuple[str, int]]:
    """The (event id, attempt) pairs the workers gave back unbegun because their leases may
    have ended before a handler could begin them (their warnings, in `<worker>.stderr`)."""
    given_back: set[tuple[str, int]] = set()
    for path in sorted(logs.glob("*.stderr")):
        for line in path.read_text(errors="replace").splitlines():
            if NOT_BEGUN_AFTER_LAPSE in line:
                named = line.partition(NOT_BEGUN_AFTER_LAPSE)[0]
                given_back.update((id_, int(n)) for id_, n in _NAMED_ATTEMPT.findall(named))
    return given_back


def calls_by_event(calls: Sequence[Call]) -> dict[str, list[Call]]:
    """Each event's handler calls, in the order they were read."""
    by_event: dict[str, list[Call]] = {}
    for call in calls:
        by_event.setdefault(call.event_id, []).append(call)
    return by_event


class KilledWorkersEvents(NamedTuple):
    """What became of the events killed workers had begun (see late_after_kills)."""

    came_back: int
    late: int
    untimed: int
    """Of those that came back, the events whose next attempt no handler began (see
    late_after_kills): not judged against the bound."""
    latest_after_kill_ms: float
    """The latest next attempt's due time after its worker's kill (0 when none came back)."""
    latest_kill_ms: float | None
    """When the worker of that latest one was killed (epoch ms; None when none came back)."""
    latest_calls: list[str]
    """Every handler call of that latest one, timed from that kill, with its worker's own
    kill when that worker was killed too: what a late return is diagnosed from."""


def late_after_kills(
    calls: Sequence[Call], kills_ms: dict[str, float], lease_ms: float
) -> KilledWorkersEvents:
    """Of the events a killed worker had begun and that another attempt handled after the
    kill: how many, how many of those next attempts were due later than the bound after the
    kill, and the latest one's due time after its kill, with that kill's time (so that a
    late one can be placed against a server crash).

    A killed worker's events must be due again within one lease, whatever the handler
    timeout, as their next attempt. The bound adds a second lease, for a renewal the worker
    sent just before it died that a busy server ran after the kill (its lease then starts
    later), and the scheduling interval. Workers log handler calls, not claims, so a next
    attempt that no handler began (claimed by another worker killed before its handler
    began, or whose claim's reply a cut connection lost) leaves no due time to judge: the
    attempt handled after it was due when that claim's lease ended, which says when the
    claim came, not when the kill's lease ended. Such events are counted as untimed."""
    by_event = calls_by_event(calls)
    came_back = late = untimed = 0
    latest_ms = 0.0
    latest_kill_ms: float | None = None
    latest_event = ""
    bound_ms = 2 * lease_ms + SCHEDULING_INTERVAL * 1000
    for worker, killed_ms in kills_ms.items():
        begun = {call.event_id: call for call in calls if call.worker == worker}
        for event_id, last in begun.items():
            later = [
                call
                for call in by_event[event_id]
                if call.attempt > last.attempt and call.handled_ms >= killed_ms
            ]
            if later:
                came_back += 1
                if min(call.attempt for call in later) > last.attempt + 1:
                    untimed += 1
                    continue
                after_kill_ms = min(c.delivery_due_ms for c in later) - killed_ms
                if latest_kill_ms is None or after_kill_ms > latest_ms:
                    latest_ms, latest_kill_ms, latest_event = after_kill_ms, killed_ms, event_id
                late += after_kill_ms > bound_ms
    latest_calls = []
    if latest_kill_ms is not None:
        previous_attempt = None
        for call in sorted(by_event[latest_event], key=lambda call: call.handled_ms):
            if previous_attempt is not None and call.attempt > previous_attempt + 1:
                # Counted and spent, yet no handler began it: a worker claimed it and was
                # killed before its handler began (workers log calls, not claims), or the
                # claim's reply was lost with a cut connection or a failover. Its lease
                # came between.
                skipped = ", ".join(map(str, range(previous_attempt + 1, call.attempt)))
                latest_calls.append(
                    f"{latest_event} attempt {skipped}: no handler call (claimed by a worker "
                    "stopped before its handler began, or whose claim's reply was lost and "
                    "the call sent again did not reach the server within its lease)"
                )
            previous_attempt = call.attempt
            own_kill = kills_ms.get(call.worker)
            killed = (
                ""
                if own_kill is None
                else f", its worker killed {own_kill - latest_kill_ms:+,.0f} ms"
            )
            latest_calls.append(
                f"{latest_event} attempt {call.attempt} on {call.worker}: began "
                f"{call.handled_ms - latest_kill_ms:+,.0f} ms, due "
                f"{call.delivery_due_ms - latest_kill_ms:+,.0f} ms{killed}"
            )
    return KilledWorkersEvents(came_back, late, untimed, latest_ms, latest_kill_ms, latest_calls)


class UnbegunAttempts(NamedTuple):
    """Attempts counted and spent that no handler began (see unbegun_attempts)."""

    spent: int
    held_up: int
    """Of those, the ones their worker gave back, held up past their lease before it could
    begin them (see read_lapsed_not_begun)."""
    unexplained: int
    """Of those, the ones that no kill, no server crash and no such hold-up explains (must
    be 0)."""
    examples: list[str]
    """The first few unexplained ones, each with its event's handler calls."""


def unbegun_attempts(
    calls: Sequence[Call],
    kills_ms: dict[str, float],
    lease_ms: float,
    crash_ms: tuple[float, float] | None,
    lapsed_not_begun: set[tuple[str, int]] | None = None,
) -> UnbegunAttempts:
    """The attempts a claim spent while no handler began them: gaps in an event's attempt
    numbers, before its first handled attempt or between two. A worker killed after its
    claim and before its handler began leaves one; so does a claim whose reply was lost, if
    the call sent again cannot reach the server within its lease (the consumer then gives
    up), which the server's crash can cause. A lost reply must not leave one otherwise: the
    call sent again hands out what the claim took (claim receipts). So a gap is explained
    when a worker was killed while it could hold the attempt, or the server was down then.

    The attempt after a gap was due when the gap's lease ended, so that lease began (with
    the claim or the worker's last renewal) a lease earlier, at `began`. A worker holding
    it then was killed before its next renewal: within a renewal period after `began`, with
    half a lease of slack for a busy process, or up to a lease before it for a renewal sent
    before the kill that the server ran after it (the late counter's second lease). The
    server's crash explains a gap whose lease began from two leases before the crash to two
    leases after the server was back (the consumer tries again for a lease). An attempt in
    `lapsed_not_begun` (read_lapsed_not_begun) is explained by its worker: held up past its
    lease, it did not begin it, and another worker's dispatch had taken it again."""
    by_event = calls_by_event(calls)
    period_ms = lease_ms / RENEWALS_PER_LEASE
    kills = sorted(kills_ms.values())
    given_back = lapsed_not_begun or set()
    spent = held_up = unexplained = 0
    examples: list[str] = []
    for event_id, event_calls in by_event.items():
        due_by_attempt: dict[int, int] = {}
        for call in event_calls:
            due_by_attempt.setdefault(call.attempt, call.delivery_due_ms)
        previous = 0
        for attempt in sorted(due_by_attempt):
            skipped_attempts = range(previous + 1, attempt)
            worker_said = sum((event_id, skip) in given_back for skip in skipped_attempts)
            spent += len(skipped_attempts)
            held_up += worker_said
            if len(skipped_attempts) > worker_said:
                began = due_by_attempt[attempt] - lease_ms
                killed = any(
                    began - lease_ms <= kill <= began + period_ms + lease_ms / 2 for kill in kills
                )
                crashed = crash_ms is not None and (
                    crash_ms[0] - 2 * lease_ms <= began <= sum(crash_ms) + 2 * lease_ms
                )
                if not (killed or crashed):
                    unexplained += len(skipped_attempts) - worker_said
                    if len(examples) < 5:
                        history = ", ".join(
                            f"attempt {call.attempt} on {call.worker} due {call.delivery_due_ms}"
                            for call in sorted(event_calls, key=lambda call: call.attempt)
                        )
                        skipped = ", ".join(map(str, range(previous + 1, attempt)))
                        examples.append(
                            f"{event_id}: attempt {skipped} began no handler, its lease from "
                            f"{began:.0f}; calls: {history}"
                        )
            previous = attempt
    return UnbegunAttempts(spent, held_up, unexplained, examples)
