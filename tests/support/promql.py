"""What a PromQL expression reads (metric names, labels, label values) against what
aioqueue.prometheus really emits: the deployment kit's dashboard, alerts and KEDA triggers
are checked with it (tests/project/test_deploy_*.py)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry

from aioqueue._admin.stats import QueueStats
from aioqueue._model.metrics import Outcome
from aioqueue._model.workers import Worker, WorkerHandler, WorkerState
from aioqueue.prometheus import PrometheusMetrics

# Labels Prometheus adds to every scraped series (the target's, and those the jobs of
# scrape-configs.yml relabel), and the series it makes itself for each target.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod"})
SCRAPE_SERIES = {"up": frozenset(TARGET_LABELS)}

# Words of PromQL that are not metric names: aggregations (which may be followed by
# `by (...)` rather than by their parenthesis), operators, modifiers, literals.
PROMQL_WORDS = frozenset({
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end",
})  # fmt: skip
SELECTOR = re.compile(r"(?<![\w:$])([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}")
MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(\s*\()?")


def selectors(expr: str) -> tuple[set[str], list[tuple[str | None, list[tuple[str, str, str]]]]]:
    """The metric names a PromQL expression reads, and each `{...}` selector with the name
    in front of it (None for a bare `{__name__=...}`) and its matchers (label, op, value)."""
    found: list[tuple[str | None, list[tuple[str, str, str]]]] = []

    def record(match: re.Match[str]) -> str:
        body = match[2]
        matchers = [(m[1], m[2], m[3]) for m in MATCHER.finditer(body)]
        assert "".join(m[0] for m in MATCHER.finditer(body)) == body, f"unread: {body!r}"
        found.append((match[1], matchers))
        return f" {match[1] or ''} "

    rest = SELECTOR.sub(record, expr)
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # ranges and subqueries: [5m], [$__rate_interval]
    rest = LABEL_LIST.sub(" ", rest)
    assert '"' not in rest, f"a string outside a selector: {expr!r}"
    names = {
        match[1]
        for match in IDENTIFIER.finditer(rest)
        if match[2] is None and match[1] not in PROMQL_WORDS
    }
    return names, found


def emitted_series() -> dict[str, dict[str, set[str]]]:
    """Every sample name aioqueue.prometheus emits once each metric has seen a value, with
    each of its labels and the values they took, plus the series Prometheus makes itself."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry=registry)
    metrics.event_enqueued("PaymentCheck", scheduled=True)
    metrics.event_enqueued("PaymentCheck", scheduled=False)
    metrics.events_dispatched("PaymentCheck", 3)
    outcomes: tuple[Outcome, ...] = ("ok", "failed", "dead")
    for outcome in outcomes:
        metrics.event_handled("PaymentCheck", outcome, duration=0.02, lateness=0.004)
    queue = QueueStats("PaymentCheck", 1, 10, 2, 1, 1, 3, 0.5)
    worker = Worker(
        id="host:1:ab",
        host="host",
        pid=1,
        version="0",
        started_at=datetime.now(timezone.utc),
        beat_at=datetime.now(timezone.utc),
        heartbeat=5.0,
        state=WorkerState.RUNNING,
        handlers=(WorkerHandler("PaymentCheck", 1, 0),),
    )
    metrics.set_queue_depths([queue])
    metrics.set_live_workers([queue], [worker])
    metrics.redis_up.set(1)
    series: dict[str, dict[str, set[str]]] = {
        name: {label: set() for label in labels} for name, labels in SCRAPE_SERIES.items()
    }
    for family in registry.collect():
        for sample in family.samples:
            labels = series.setdefault(sample.name, {label: set() for label in TARGET_LABELS})
            for label, value in sample.labels.items():
                labels.setdefault(label, set()).add(value)
    return series


# Labels whose values aioqueue.prometheus takes from a closed set, all of which the series
# above take: `aioqueue_queue_events{state}`, `aioqueue_events_handled_total{outcome}` and
# `aioqueue_events_enqueued_total{result}`.
CLOSED_LABELS = frozenset({"state", "outcome", "result"})


def unknown_series(expr: str, series: dict[str, dict[str, set[str]]]) -> list[str]:
    """What `expr` reads that aioqueue does not emit: metric names, labels, label values."""
    names, found = selectors(expr)
    problems = [f"no metric {name}" for name in sorted(names - set(series))]
    for name, matchers in found:
        labels = series.get(name or "", {})
        for label, operator, value in matchers:
            if name is None or name not in series:
                continue
            if label not in labels:
                problems.append(f"{name} has no label {label}")
            elif label in CLOSED_LABELS and operator in {"=", "=~"}:
                # Each value (or alternative of a regex of alternatives) must be one the
                # label takes.
                wanted = value.split("|") if operator == "=~" else [value]
                problems += [
                    f"{name}{{{label}}} is never {each!r}"
                    for each in wanted
                    if each not in labels[label]
                ]
    return problems
