"""What a chaos run's record says (chaos.py runs it, and hands the record here): the counters
and the lateness of its report, judged from the events it planned, the handler calls the
workers wrote, what Redis still held at the end, and when the faults came."""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from chaos_durable import DURABLE_PREFIX, DurableProducer
from chaos_flow import KEYED_PREFIX, LIMITED_PREFIX, FlowReport
from chaos_leases import Call, late_after_kills, unbegun_attempts
from chaos_report import SLICES, Chaos, Report, histogram, percentiles
from chaos_worker import TICK_PREFIX, TICK_SECONDS, ChaosEvent

__all__ = ["RunRecord", "judge"]


@dataclass(frozen=True)
class RunRecord:
    """What a chaos run leaves to judge once its workers have stopped."""

    topology: str
    events: Sequence[ChaosEvent]
    """The main type's events as planned, poisoned ones included."""
    poisoned: frozenset[str]
    first_due_ms: int
    scheduled: int
    """How many of `events` the producer's enqueue scheduled."""
    calls: list[Call]
    """Every handler call the workers wrote down, of every type."""
    torn_lines: int
    lapsed_not_begun: set[tuple[str, int]]
    """(event id, attempt) the workers gave back unbegun, their leases perhaps over."""
    pending_ids: set[str]
    """The main type's events still pending at the end."""
    dead_ids: set[str]
    flow: FlowReport
    durable: DurableProducer | None
    chaos: Chaos
    drained: bool
    started: float
    """When the run began (monotonic)."""


def judge(args: argparse.Namespace, record: RunRecord) -> Report:
    """The report of the run `record` describes, run with `args`."""
    calls, chaos, durable, events = record.calls, record.chaos, record.durable, record.events
    poisoned, first_due_ms = record.poisoned, record.first_due_ms
    pending_ids, dead_ids = record.pending_ids, record.dead_ids
    ticks = sorted({call.due_ms for call in calls if call.event_id.startswith(TICK_PREFIX)})
    durable_report = None
    if durable is not None:
        durable_report = durable.report(
            handed_out=(call[0] for call in calls),
            still_there=pending_ids | dead_ids,
            crash_ms=(chaos.server_restart_at_ms, chaos.server_down_seconds * 1000)
            if chaos.server_restarts
            else None,
        )
    flow_prefixes = (TICK_PREFIX, LIMITED_PREFIX, KEYED_PREFIX, DURABLE_PREFIX)
    calls = [call for call in calls if not call[0].startswith(flow_prefixes)]
    killed = late_after_kills(calls, chaos.kills_ms, args.lease * 1000)
    crash_ms = (
        (chaos.server_restart_at_ms, chaos.server_down_seconds * 1000)
        if chaos.server_restarts
        else None
    )
    unbegun = unbegun_attempts(
        calls, chaos.kills_ms, args.lease * 1000, crash_ms, record.lapsed_not_begun
    )
    tick_ms = round(TICK_SECONDS * 1000)
    expected_ticks = (ticks[-1] - ticks[0]) // tick_ms + 1 if ticks else 0
    expected = {event.id for event in events}
    healthy_calls = [call for call in calls if call[0] not in poisoned]
    per_id = Counter(call.event_id for call in healthy_calls)
    first: dict[str, float] = {}
    slices: list[list[float]] = [[] for _ in range(SLICES)]
    window_ms = args.window * 1000
    for event_id, due_ms, handled_ms, *_ in sorted(healthy_calls, key=lambda call: call[2]):
        if event_id not in first:
            first[event_id] = late = max(0.0, handled_ms - due_ms)
            index = int((due_ms - first_due_ms) / window_ms * SLICES)
            slices[min(SLICES - 1, max(0, index))].append(late)
    handed_out = {call.event_id for call in calls}
    # Still pending at the end (only when the drain timed out) is late, not lost.
    lost = (expected - poisoned - set(first) - dead_ids - pending_ids) | (
        poisoned - dead_ids - pending_ids
    )
    lateness = list(first.values())
    return Report(
        topology=record.topology,
        partitions=args.partitions,
        replicas=args.replicas,
        aof=args.aof,
        faults=args.faults,
        events=args.events,
        window_seconds=args.window,
        workers=args.workers,
        seed=args.seed,
        scheduled=record.scheduled,
        poisoned=len(poisoned),
        delivered=len(first),
        deliveries=len(healthy_calls),
        duplicated=sum(1 for count in per_id.values() if count > 1),
        lost=len(lost),
        dead=len(dead_ids),
        dead_unexpected=len(dead_ids - poisoned),
        dead_unhandled=len(dead_ids - handed_out),
        back_after_kill=killed.came_back,
        late_after_kill=killed.late,
        untimed_after_kill=killed.untimed,
        latest_after_kill_ms=killed.latest_after_kill_ms,
        latest_kill_after_crash_ms=None
        if killed.latest_kill_ms is None or not chaos.server_restarts
        else killed.latest_kill_ms - chaos.server_restart_at_ms,
        latest_after_kill_calls=killed.latest_calls,
        unbegun_spent=unbegun.spent,
        unbegun_held_up=unbegun.held_up,
        unbegun_unexplained=unbegun.unexplained,
        unbegun_examples=unbegun.examples,
        invented=len(handed_out - expected),
        pending_at_end=len(pending_ids),
        delivered_before_server_restart=len(
            {
                call.event_id
                for call in healthy_calls
                if call.handled_ms < chaos.server_restart_at_ms
            }
        ),
        lateness_ms=percentiles(lateness),
        lateness_histogram=histogram(lateness),
        lateness_by_slice=[
            {
                "from_s": round(index * args.window / SLICES, 1),
                **{k: v for k, v in percentiles(values).items() if k in ("p50", "p99", "max")},
            }
            for index, values in enumerate(slices)
        ],
        chaos=chaos,
        elapsed_seconds=round(time.monotonic() - record.started, 1),
        drained=record.drained,
        torn_lines=record.torn_lines,
        ticks_delivered=len(ticks),
        tick_gaps=expected_ticks - len(ticks),
        sync_workers=(args.workers + 1) // 3,
        batch_workers=args.workers // 3,
        flow=record.flow,
        durable=durable_report,
    )
