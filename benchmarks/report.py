"""The driver's output: min/median/max per system and metric, the table, the issue's targets
checked against it, and the lateness chart."""

from __future__ import annotations

import pathlib
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common import CLUSTER_ROUNDS, JsonDict, percentile

# Suffix of the table row that shows aioqueue's second lateness measure (see README, "Clocks").
WALL_CLOCK_ROW = " (handler wall clock)"


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
)  # fmt: skip

# What issue 3 asks of aioqueue; see check_targets().
ISSUE_3_PEERS = ("arq", "saq")
LATENESS_P99_MS = 10.0
LATENESS_MAX_MS = 50.0
DRAIN_FACTOR = 10.0
ENQUEUE_FACTOR = 2.0
ENQUEUE_MANY_FACTOR = 10.0
MEMORY_FRACTION = 0.75
BACKLOG_RATIO = 0.8
# "No more than a few commands per second": read here as at most 5 round trips a second.
IDLE_ROUND_TRIPS = 5.0
# What issue 27 asks of aioqueue; see check_issue_27_targets().
BULLMQ_NODE = "BullMQ on Node"
ENQUEUE_VS_NODE_FACTOR = 2.0
ENQUEUE_MANY_RATE = 150_000.0
DRAIN_RATE = 40_000.0
DRAIN_VS_FASTEST_PEER = 15.0
LATENESS_P99_MS_27 = 5.0
# Bytes per pending event when issue 27 was filed: not to grow.
BYTES_PER_EVENT = 245.0
CLUSTER_ENQUEUE_FRACTION = 0.8
CLUSTER_LATENESS_FACTOR = 2.0
SINGLE_SERVER = "aioqueue, single server"
CLUSTER = "aioqueue, 3-master cluster"
CLUSTER_PARTITIONED = "aioqueue, 3-master cluster, partitions(Tick, 8)"
# The scenarios whose aioqueue runs count events handled; "0 lost" is judged over them.
DELIVERY_SCENARIOS = ("drain", "lateness", "backlog", "cluster")


Summary = dict[str, dict[str, dict[str, dict[str, float]]]]


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
        if labels is None:
            continue
        by_label = summary.get(metric.scenario, {}).get(metric.key, {})
        better = "higher" if metric.higher_is_better else "lower"
        title = metric.title.format(**meta["sizes"])
        entries.append(f"{title} [{metric.unit}, {better} is better]")
        for label in labels:
            ran = any(label in by_key for by_key in summary.get(metric.scenario, {}).values())
            entries.append(_row(metric, label, by_label.get(label), repeats, ran=ran))
            wall_clock = by_label.get(label + WALL_CLOCK_ROW)
            if wall_clock is not None:
                entries.append(_row(metric, label + WALL_CLOCK_ROW, wall_clock, repeats))
        if metric.compare:
            entries.extend(_ratio_rows(metric, by_label, labels, peers, ours))
    width = 2 + max([len(entry[0]) for entry in entries if isinstance(entry, tuple)] + [30])
    lines = [
        f"aioqueue and its peers on one valkey {meta['server']['valkey_version']} server, "
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
            lines.append(f"  {label:{width}}" + "".join(f"{cell:>12}" for cell in cells) + note)
    return "\n".join(line.rstrip() for line in lines)


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


def _row_stats(summary: Summary, scenario: str, key: str, label: str) -> Mapping[str, float] | None:
    return summary.get(scenario, {}).get(key, {}).get(label)


def _median(summary: Summary, scenario: str, key: str, label: str) -> float | None:
    found = _row_stats(summary, scenario, key, label)
    return None if found is None else found["median"]


def _not_measured(target: str) -> JsonDict:
    return {"target": target, "measured": "not measured", "met": None}


def _absolute(
    summary: Summary,
    target: str,
    scenario: str,
    key: str,
    limit: float,
    *,
    at_most: bool,
    label: str = "aioqueue",
) -> JsonDict:
    """`label`'s median against a fixed limit; `measured` also names the worst run."""
    found = _row_stats(summary, scenario, key, label)
    if found is None:
        return _not_measured(target)
    value, worst = found["median"], found["max" if at_most else "min"]
    met = value <= limit if at_most else value >= limit
    every_run = worst <= limit if at_most else worst >= limit
    note = "" if met == every_run else " (not in every run)" if met else " (in some runs)"
    measured = f"{value:,.2f} median, worst run {worst:,.2f}{note}"
    return {"target": target, "measured": measured, "met": met}


def _relative(
    summary: Summary,
    target: str,
    scenario: str,
    key: str,
    ours: str,
    peers: Sequence[str],
    factor: float,
    *,
    lower_is_better: bool,
) -> JsonDict:
    """`ours`' median against the best of `peers`' medians: met when `factor` times better."""
    value = _median(summary, scenario, key, ours)
    known = {label: _median(summary, scenario, key, label) for label in peers}
    found = {label: peer for label, peer in known.items() if peer is not None}
    if value is None or not found:
        return _not_measured(target)
    pick = min if lower_is_better else max
    best = pick(found, key=lambda label: found[label])
    ratio = found[best] / value if lower_is_better else value / found[best]
    measured = f"{value:,.2f} vs {best} {found[best]:,.2f}: {ratio:.2f}x better"
    return {"target": target, "measured": measured, "met": ratio >= factor}


def _against_row(
    summary: Summary,
    target: str,
    scenario: str,
    key: str,
    ours: str,
    baseline: str,
    limit: float,
    *,
    at_most: bool,
) -> JsonDict:
    """The ratio of two rows' medians (`ours` / `baseline`) against a limit."""
    value = _median(summary, scenario, key, ours)
    base = _median(summary, scenario, key, baseline)
    if value is None or base is None or base == 0:
        return _not_measured(target)
    ratio = value / base
    met = ratio <= limit if at_most else ratio >= limit
    measured = f"{value:,.2f} vs {base:,.2f}: {ratio:.2f}x"
    return {"target": target, "measured": measured, "met": met}


def check_targets(summary: Summary, runs: Sequence[JsonDict]) -> list[JsonDict]:
    """Issue 3's targets, then issue 27's, each entry marked with its `issue`.

    Every entry has `target`, `measured` (text) and `met` (True, False, or None when a row it
    needs is missing), each judged on the median over the runs.
    """
    return [
        *({"issue": 3, **check} for check in check_issue_3_targets(summary)),
        *({"issue": 27, **check} for check in check_issue_27_targets(summary, runs)),
    ]


def check_issue_3_targets(summary: Summary) -> list[JsonDict]:
    """Issue 3's targets for aioqueue, against arq and saq as the issue names them."""
    cpu_target = "lateness run: worker CPU s <= arq's at its default poll delay"
    cpu = _median(summary, "lateness", "worker_cpu_s", "aioqueue")
    arq_cpu = _median(summary, "lateness", "worker_cpu_s", "arq")
    if cpu is None or arq_cpu is None:
        cpu_check = _not_measured(cpu_target)
    else:
        measured = f"{cpu:.2f} vs arq {arq_cpu:.2f}: {cpu / arq_cpu:.2f}x arq's"
        cpu_check = {"target": cpu_target, "measured": measured, "met": cpu <= arq_cpu}
    return [
        _absolute(
            summary,
            f"lateness p99 <= {LATENESS_P99_MS:g} ms (server clock)",
            "lateness",
            "p99_ms",
            LATENESS_P99_MS,
            at_most=True,
        ),
        _absolute(
            summary,
            f"lateness max <= {LATENESS_MAX_MS:g} ms (server clock)",
            "lateness",
            "max_ms",
            LATENESS_MAX_MS,
            at_most=True,
        ),
        cpu_check,
        _relative(
            summary,
            f"drain s: >= {DRAIN_FACTOR:g}x faster than the faster of arq and saq",
            "drain",
            "seconds",
            "aioqueue",
            ("arq", "arq poll_delay=0", "saq"),
            DRAIN_FACTOR,
            lower_is_better=True,
        ),
        _relative(
            summary,
            f"enqueue/s, 32 in flight: >= {ENQUEUE_FACTOR:g}x the faster of arq and saq",
            "enqueue",
            "events_per_s",
            "aioqueue",
            ISSUE_3_PEERS,
            ENQUEUE_FACTOR,
            lower_is_better=False,
        ),
        _relative(
            summary,
            f"enqueue_many/s: >= {ENQUEUE_MANY_FACTOR:g}x the faster of arq and saq",
            "enqueue",
            "events_per_s",
            "aioqueue enqueue_many (100/call)",
            ISSUE_3_PEERS,
            ENQUEUE_MANY_FACTOR,
            lower_is_better=False,
        ),
        _relative(
            summary,
            f"bytes per pending event: <= {MEMORY_FRACTION:g} of the smaller of arq's and saq's",
            "memory",
            "bytes_per_event",
            "aioqueue",
            ISSUE_3_PEERS,
            1 / MEMORY_FRACTION,
            lower_is_better=True,
        ),
        _absolute(
            summary,
            f"backlog: drain rate ratio >= {BACKLOG_RATIO:g}",
            "backlog",
            "drain_ratio",
            BACKLOG_RATIO,
            at_most=False,
        ),
        _absolute(
            summary,
            f"backlog: dispatch rate ratio >= {BACKLOG_RATIO:g}",
            "backlog",
            "dispatch_ratio",
            BACKLOG_RATIO,
            at_most=False,
        ),
        _absolute(
            summary,
            f"idle: <= {IDLE_ROUND_TRIPS:g} commands sent per second",
            "idle",
            "round_trips_per_s",
            IDLE_ROUND_TRIPS,
            at_most=True,
        ),
    ]


def check_issue_27_targets(summary: Summary, runs: Sequence[JsonDict]) -> list[JsonDict]:
    """Issue 27's targets for aioqueue: against BullMQ on Node and every other peer, absolute
    rates, nothing lost, and the cluster scenario against the single server."""
    peers = sorted({run["row"] for run in runs if run["system"] not in ("aioqueue", "redis-py")})
    return [
        _relative(
            summary,
            f"enqueue/s, 32 in flight: >= {ENQUEUE_VS_NODE_FACTOR:g}x {BULLMQ_NODE}",
            "enqueue",
            "events_per_s",
            "aioqueue",
            (BULLMQ_NODE,),
            ENQUEUE_VS_NODE_FACTOR,
            lower_is_better=False,
        ),
        _absolute(
            summary,
            f"enqueue_many/s: >= {ENQUEUE_MANY_RATE:,.0f}",
            "enqueue",
            "events_per_s",
            ENQUEUE_MANY_RATE,
            at_most=False,
            label="aioqueue enqueue_many (100/call)",
        ),
        _absolute(
            summary,
            f"drain: >= {DRAIN_RATE:,.0f} events/s",
            "drain",
            "events_per_s",
            DRAIN_RATE,
            at_most=False,
        ),
        _relative(
            summary,
            f"drain: >= {DRAIN_VS_FASTEST_PEER:g}x the fastest peer",
            "drain",
            "events_per_s",
            "aioqueue",
            peers,
            DRAIN_VS_FASTEST_PEER,
            lower_is_better=False,
        ),
        _absolute(
            summary,
            f"lateness p99 <= {LATENESS_P99_MS_27:g} ms (server clock)",
            "lateness",
            "p99_ms",
            LATENESS_P99_MS_27,
            at_most=True,
        ),
        _absolute(
            summary,
            f"bytes per pending event <= {BYTES_PER_EVENT:g}",
            "memory",
            "bytes_per_event",
            BYTES_PER_EVENT,
            at_most=True,
        ),
        check_nothing_lost(runs),
        _against_row(
            summary,
            f"cluster enqueue/s >= {CLUSTER_ENQUEUE_FRACTION:.0%} of the single server's",
            "cluster",
            "enqueue_per_s",
            CLUSTER,
            SINGLE_SERVER,
            CLUSTER_ENQUEUE_FRACTION,
            at_most=False,
        ),
        _against_row(
            summary,
            "cluster enqueue/s with partitions(Tick, 8) >= without",
            "cluster",
            "enqueue_per_s",
            CLUSTER_PARTITIONED,
            CLUSTER,
            1.0,
            at_most=False,
        ),
        _against_row(
            summary,
            f"cluster lateness p99 <= {CLUSTER_LATENESS_FACTOR:g}x the single server's",
            "cluster",
            "p99_ms",
            CLUSTER,
            SINGLE_SERVER,
            CLUSTER_LATENESS_FACTOR,
            at_most=True,
        ),
        _against_row(
            summary,
            f"cluster lateness p99 with partitions(Tick, 8) <= {CLUSTER_LATENESS_FACTOR:g}x "
            "the single server's",
            "cluster",
            "p99_ms",
            CLUSTER_PARTITIONED,
            SINGLE_SERVER,
            CLUSTER_LATENESS_FACTOR,
            at_most=True,
        ),
    ]


def check_nothing_lost(runs: Sequence[JsonDict]) -> JsonDict:
    """0 lost: every aioqueue run that delivers events handled each of them.

    A run's `lost` (or `lost_small` / `lost_large`) counts the events of its range that no
    handler saw by the time the N-th delivery was reported. A failed run counts against the
    target: it cannot show that nothing was lost.
    """
    target = "0 events lost (" + ", ".join(DELIVERY_SCENARIOS) + ")"
    ours = [
        run for run in runs if run["system"] == "aioqueue" and run["scenario"] in DELIVERY_SCENARIOS
    ]
    if not ours:
        return _not_measured(target)
    failed = [run for run in ours if "error" in run["result"]]
    lost = sum(
        run["result"].get(key, 0)
        for run in ours
        if "error" not in run["result"]
        for key in ("lost", "lost_small", "lost_large")
    )
    measured = f"{lost} lost in {len(ours) - len(failed)} runs"
    if failed:
        measured += f"; {len(failed)} runs failed"
    return {"target": target, "measured": measured, "met": lost == 0 and not failed}


def render_targets(checks: Sequence[JsonDict]) -> str:
    """The checked targets as plain-text lines, a block per issue, after the table."""
    verdicts = {True: "met", False: "NOT MET", None: "?"}
    width = max(len(check["target"]) for check in checks)
    titles = {
        3: "issue 3 targets for aioqueue (medians over repeats; peers: arq and saq):",
        27: "issue 27 targets for aioqueue (medians over repeats; every peer):",
    }
    lines: list[str] = []
    for issue, title in titles.items():
        block = [check for check in checks if check.get("issue") == issue]
        if not block:
            continue
        if lines:
            lines.append("")
        lines.append(title)
        for check in block:
            verdict = verdicts[check["met"]]
            lines.append(f"  {verdict:8}{check['target']:{width}}  {check['measured']}")
    return "\n".join(lines)


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
        f"valkey {meta['server']['valkey_version']}; aioqueue on the server clock (Metrics), "
        "the peers on the machine's clock",
        fontsize="medium",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path
