"""How a benchmark target is judged against a run's summary (the median over its repeats of
each row): against a fixed limit, against the best of the peers, or against another row. Each
judgement is a record of `target`, `measured` (text) and `met` (True, False, or None when a
row it needs is missing); targets.py says which targets each issue set."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from common import JsonDict
from report import Summary


def row_stats(summary: Summary, scenario: str, key: str, label: str) -> Mapping[str, float] | None:
    return summary.get(scenario, {}).get(key, {}).get(label)


def row_median(summary: Summary, scenario: str, key: str, label: str) -> float | None:
    found = row_stats(summary, scenario, key, label)
    return None if found is None else found["median"]


def not_measured(target: str) -> JsonDict:
    return {"target": target, "measured": "not measured", "met": None}


def against_limit(
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
    found = row_stats(summary, scenario, key, label)
    if found is None:
        return not_measured(target)
    value, worst = found["median"], found["max" if at_most else "min"]
    met = value <= limit if at_most else value >= limit
    every_run = worst <= limit if at_most else worst >= limit
    note = "" if met == every_run else " (not in every run)" if met else " (in some runs)"
    measured = f"{value:,.2f} median, worst run {worst:,.2f}{note}"
    return {"target": target, "measured": measured, "met": met}


def against_best_peer(
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
    value = row_median(summary, scenario, key, ours)
    known = {label: row_median(summary, scenario, key, label) for label in peers}
    found = {label: peer for label, peer in known.items() if peer is not None}
    if value is None or not found:
        return not_measured(target)
    pick = min if lower_is_better else max
    best = pick(found, key=lambda label: found[label])
    ratio = found[best] / value if lower_is_better else value / found[best]
    measured = f"{value:,.2f} vs {best} {found[best]:,.2f}: {ratio:.2f}x better"
    return {"target": target, "measured": measured, "met": ratio >= factor}


def against_row(
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
    value = row_median(summary, scenario, key, ours)
    base = row_median(summary, scenario, key, baseline)
    if value is None or base is None or base == 0:
        return not_measured(target)
    ratio = value / base
    met = ratio <= limit if at_most else ratio >= limit
    measured = f"{value:,.2f} vs {base:,.2f}: {ratio:.2f}x"
    return {"target": target, "measured": measured, "met": met}
