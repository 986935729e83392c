"""The chaos run's report: what the driver did, what the logs show, and how it is printed."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from chaos_durable import DurableReport
from chaos_flow import (
    RATE_PER_S,
    FlowReport,
)

# Report.topology: where the run's queues lived (chaos_topology.py).
SINGLE_SERVER = "single server"
CLUSTER = "3-master cluster"
SENTINEL = "Sentinel group"


@dataclass
class Chaos:
    """What the driver did, for the report."""

    worker_kills: int = 0
    worker_restarts: int = 0
    """Workers stopped with SIGTERM (and gone within the bound) and replaced."""
    worker_starts: int = 0
    worker_ready_seconds: list[float] = field(default_factory=list)
    server_restarts: int = 0
    server_down_seconds: float = 0.0
    server_restart_at_ms: float = 0.0
    connections_cut: int = 0
    connections_accepted: int = 0
    upstream_refused: int = 0
    kills_ms: dict[str, float] = field(default_factory=dict)
    """Worker name -> when it was SIGKILLed (epoch ms)."""


@dataclass
class Report:
    topology: str
    """SINGLE_SERVER, or CLUSTER (with its replicas, if any)."""
    partitions: int
    """Partitions of the main event type."""
    replicas: int
    """Replicas per master of the cluster (the crash is then a failover)."""
    aof: bool
    faults: bool
    events: int
    window_seconds: float
    workers: int
    seed: int
    scheduled: int
    poisoned: int
    delivered: int
    """Distinct healthy events handed to a handler at least once."""
    deliveries: int
    """Handler calls of healthy events, duplicates included."""
    duplicated: int
    """Healthy events handed to handlers more than once."""
    lost: int
    """Scheduled events never handed to a handler and not in the dead letters."""
    dead: int
    dead_unexpected: int
    """Dead letters that are not poisoned events."""
    dead_unhandled: int
    """Dead letters whose event no handler was ever handed (the lease protocol: must be 0)."""
    back_after_kill: int
    """Events a killed worker had begun that another attempt handled after the kill."""
    late_after_kill: int
    """Of those, the events whose next attempt was due later than two leases plus the
    scheduling interval after the kill (the lease protocol: must be 0)."""
    untimed_after_kill: int
    """Of those, the events whose next attempt no handler began, so that its due time is
    unknown: claimed by a worker stopped before its handler began, or whose claim's reply a
    cut connection lost (see late_after_kills in chaos.py)."""
    latest_after_kill_ms: float
    """The latest of those next attempts' due times after their kill."""
    latest_kill_after_crash_ms: float | None
    """When the worker of that latest one was killed, after the server's crash began
    (negative: before it); None without a crash or a return."""
    latest_after_kill_calls: list[str]
    """Every handler call of that latest one, timed from that kill (see late_after_kills)."""
    unbegun_spent: int
    """Attempts counted and spent that no handler began (see unbegun_attempts in
    chaos_leases.py)."""
    unbegun_held_up: int
    """Of those, the ones their worker gave back unbegun, held up past their lease before
    it could begin them (it logs them)."""
    unbegun_unexplained: int
    """Of those, the ones no kill, no server crash and no such hold-up explains (the claim
    receipts: must be 0)."""
    unbegun_examples: list[str]
    """The first few unexplained ones, with their events' handler calls."""
    invented: int
    """Ids handed to a handler that were never scheduled."""
    pending_at_end: int
    delivered_before_server_restart: int
    lateness_ms: dict[str, float]
    lateness_histogram: dict[str, int]
    lateness_by_slice: list[dict[str, float]]
    """p50 / p99 / max lateness of first deliveries, per tenth of the window by due time."""
    chaos: Chaos
    elapsed_seconds: float
    drained: bool
    torn_lines: int
    ticks_delivered: int
    """Distinct ticks of the recurring schedule handed to a handler."""
    tick_gaps: int
    """Ticks between the first and the last delivered one that never reached a handler."""
    sync_workers: int
    batch_workers: int
    """Worker slots whose handler is a plain function run in threads."""
    flow: FlowReport
    durable: DurableReport | None
    """The durable enqueues made through the chaos (with replicas), else None."""


def percentiles(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(fraction: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(fraction * len(ordered)))], 1)

    return {
        "p50": at(0.50),
        "p90": at(0.90),
        "p99": at(0.99),
        "p99.9": at(0.999),
        "max": round(ordered[-1], 1),
        "mean": round(statistics.fmean(ordered), 1),
    }


SLICES = 10
HISTOGRAM_EDGES_MS = (10, 50, 100, 500, 1000, 2000, 5000)


def histogram(values: Sequence[float]) -> dict[str, int]:
    counts = dict.fromkeys([f"<{edge} ms" for edge in HISTOGRAM_EDGES_MS], 0)
    counts[f">={HISTOGRAM_EDGES_MS[-1]} ms"] = 0
    for value in values:
        for edge in HISTOGRAM_EDGES_MS:
            if value < edge:
                counts[f"<{edge} ms"] += 1
                break
        else:
            counts[f">={HISTOGRAM_EDGES_MS[-1]} ms"] += 1
    return counts


def print_report(report: Report) -> None:
    chaos = report.chaos
    mode = "AOF on (appendfsync everysec)" if report.aof else "AOF off"
    if not report.faults:
        mode += ", NO FAULTS (baseline)"
    where = report.topology
    if report.partitions > 1:
        where += f", the main type in {report.partitions} partitions"
    print(
        f"chaos run on a {where}: {report.events:,} events due over "
        f"{report.window_seconds:g} s, {report.workers} workers, {mode}, seed {report.seed}"
    )
    single = report.topology == SINGLE_SERVER
    cuts = (
        f"{chaos.connections_cut} proxied connections reset of {chaos.connections_accepted}"
        if single
        else f"{chaos.connections_cut} client connections closed by the nodes"
    )
    crashed = "server" if single else "master"
    print(
        f"  chaos:       {chaos.worker_kills} worker SIGKILLs, {chaos.worker_restarts} "
        f"graceful restarts ({chaos.worker_starts} starts), "
        f"{cuts}, {chaos.server_restarts} {crashed} crash+restart "
        f"({chaos.server_down_seconds:.2f} s down)"
    )
    print(f"  scheduled:   {report.scheduled:,} ({report.poisoned} poisoned)")
    print(
        f"  delivered:   {report.delivered:,} healthy events, {report.deliveries:,} handler "
        f"calls ({report.delivered_before_server_restart:,} events before the server restart)"
    )
    print(f"  duplicated:  {report.duplicated:,} events handed out more than once")
    print(f"  lost:        {report.lost:,}")
    print(
        f"  ticks:       {report.ticks_delivered:,} of the recurring schedule, "
        f"{report.tick_gaps:,} missing between the first and the last"
    )
    print(
        f"  sync:        {report.sync_workers} of {report.workers} workers ran a plain-def "
        f"handler, {report.batch_workers} a batch handler"
    )
    flow = report.flow
    print(
        f"  flow:        {flow.limited_scheduled:,} rate-limited ({flow.rate_limit} per "
        f"{RATE_PER_S:g} s): {flow.limit_violations} limit violations; {flow.keyed_scheduled:,} "
        f"keyed ({flow.keyed_calls:,} calls): {flow.key_overlaps} overlapping calls of one key "
        f"({flow.key_overlaps_lease_ended} more beside a call that ran past its lease); "
        f"{flow.lost} lost; after the lost second of the server kill: "
        f"{flow.limit_violations_near_restart} violations, {flow.key_overlaps_near_restart} "
        "overlaps"
    )
    durable = report.durable
    if durable is not None:
        print(
            f"  durable:     {durable.acknowledged:,} enqueues acknowledged with "
            f"durability(replicas={durable.replicas}) at {durable.rate_per_s:g}/s "
            f"({durable.acknowledged_by_sync_producer:,} by the SyncProducer) "
            "(before / during / after the failover: "
            f"{' / '.join(map(str, durable.acknowledged_by_crash))}), "
            f"{durable.delivered:,} delivered, {durable.lost} lost, {durable.invented} "
            f"invented; tries refused {durable.refused}, failed otherwise {durable.failed}, "
            f"given up {durable.given_up}"
        )
    print(
        f"  dead:        {report.dead:,} ({report.dead_unexpected} not poisoned, "
        f"{report.dead_unhandled} never handed to a handler)"
    )
    crash = report.latest_kill_after_crash_ms
    that_kill = ""
    if crash is not None:
        # A kill before the crash is negative: said as "before", not as a negative "after".
        when = "after" if crash >= 0 else "before"
        that_kill = f" (that kill {abs(crash):,.0f} ms {when} the crash began)"
    print(
        f"  leases:      {report.back_after_kill} events of killed workers came back, "
        f"due at most {report.latest_after_kill_ms:,.0f} ms after the kill{that_kill}, "
        f"{report.late_after_kill} later than two leases plus the scheduling interval, "
        f"{report.untimed_after_kill} untimed (their next attempt began no handler)"
    )
    if report.late_after_kill:
        for line in report.latest_after_kill_calls:
            print(f"               {line}")
    print(
        f"  unbegun:     {report.unbegun_spent} attempts spent with no handler call "
        f"({report.unbegun_held_up} given back by a worker held up past their lease), "
        f"{report.unbegun_unexplained} not explained by a kill, the server's crash or that"
    )
    for line in report.unbegun_examples:
        print(f"               {line}")
    print(f"  invented:    {report.invented}")
    print(f"  pending:     {report.pending_at_end} at the end (drained: {report.drained})")
    lateness = "  ".join(f"{name} {value:g}" for name, value in report.lateness_ms.items())
    print(f"  lateness ms: {lateness}")
    buckets = "  ".join(f"{name}: {count:,}" for name, count in report.lateness_histogram.items())
    print(f"  histogram:   {buckets}")
    restart_s = ""
    if chaos.server_restarts:
        restart_s = f" (server restart at {report.window_seconds / 2:g} s)"
    print(f"  by due time{restart_s}, p50 / p99 ms:")
    print(
        "    "
        + "  ".join(
            f"{part['from_s']:g}s: {part['p50']:g}/{part['p99']:g}"
            if "p50" in part
            else f"{part['from_s']:g}s: none"
            for part in report.lateness_by_slice
        )
    )
    print(f"  elapsed:     {report.elapsed_seconds:g} s")
