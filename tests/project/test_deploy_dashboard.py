"""The Grafana dashboard of deploy/grafana/: every query of its panels and variables reads
series aioqueue.prometheus really emits, with the labels and values it has, and it shows
every part the deploy page lists; and the PromQL reader those checks (and the alerts' and
KEDA's) rely on finds what it should and catches what it should."""

from __future__ import annotations

import json
import re
from typing import Any

from aioqueue.prometheus import QUEUE_STATES
from tests.support.deploy_kit import DASHBOARD
from tests.support.promql import emitted_series, selectors, unknown_series


def test_the_promql_reader_finds_names_and_matchers() -> None:
    names, found = selectors(
        'sum by (type, le) (rate(foo_bucket{type=~"$type", state="a|b"}[5m])) / on (type) '
        "group_left bar_total > bool 3e2 offset 5m or vector(0) and max(baz) without (pod)"
    )
    assert names == {"foo_bucket", "bar_total", "baz"}
    assert found == [("foo_bucket", [("type", "=~", "$type"), ("state", "=", "a|b")])]


def test_the_exporter_emits_what_the_kit_reads() -> None:
    """The list the checks below compare with is the real one (with the suffixes that
    prometheus_client adds), not empty and not a guess."""
    series = emitted_series()
    assert {
        "aioqueue_events_handled_total",
        "aioqueue_delivery_lateness_seconds_bucket",
        "aioqueue_handler_duration_seconds_sum",
        "aioqueue_handler_duration_seconds_count",
        "aioqueue_queue_events",
        "aioqueue_queue_oldest_overdue_seconds",
        "aioqueue_queue_live_workers",
        "aioqueue_redis_up",
    } <= set(series)
    assert series["aioqueue_queue_events"]["state"] == set(QUEUE_STATES)
    assert series["aioqueue_events_handled_total"]["outcome"] == {"ok", "failed", "dead"}
    assert "aioqueue_handler_duration_seconds" not in series


def test_the_series_check_catches_a_wrong_name_label_or_value() -> None:
    series = emitted_series()
    assert unknown_series('aioqueue_queue_events{state="due_now"}', series) == []
    assert unknown_series(
        'rate(aioqueue_events_handled{outcome="ok"}[5m]) + aioqueue_queue_events{state="due"}'
        ' + aioqueue_redis_up{type="x"} + aioqueue_handler_duration_seconds_bucket',
        series,
    ) == [
        "no metric aioqueue_events_handled",
        "aioqueue_queue_events{state} is never 'due'",
        "aioqueue_redis_up has no label type",
    ]


def dashboard() -> dict[str, Any]:
    with DASHBOARD.open() as file:
        loaded: dict[str, Any] = json.load(file)
    return loaded


def panels() -> list[dict[str, Any]]:
    found = []
    for panel in dashboard()["panels"]:
        found.append(panel)
        found += panel.get("panels", [])  # a collapsed row holds its panels
    return found


def dashboard_queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    queries = [
        (f"panel {panel['title']!r} {target['refId']}", target["expr"])
        for panel in panels()
        for target in panel.get("targets", [])
    ]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            text = query["query"] if isinstance(query, dict) else query
            label_values = re.fullmatch(r"label_values\(\s*(.+?)\s*,\s*(\w+)\s*\)", text)
            assert label_values is not None, text
            # The label the variable lists must be one of the metric's.
            selector = label_values[1]
            queries.append(
                (f"variable {variable['name']}", f'{selector}{{{label_values[2]}=~".+"}}')
            )
    return queries


def test_every_dashboard_query_reads_series_the_exporter_emits() -> None:
    series = emitted_series()
    queries = dashboard_queries()
    assert len(queries) >= 10
    problems = {where: unknown_series(expr, series) for where, expr in queries}
    assert {where: found for where, found in problems.items() if found} == {}


def test_the_dashboard_shows_every_part_the_deploy_page_lists() -> None:
    read = set().union(*(selectors(expr)[0] for _, expr in dashboard_queries()))
    assert {
        "aioqueue_queue_events",
        "aioqueue_queue_oldest_overdue_seconds",
        "aioqueue_queue_live_workers",
        "aioqueue_events_handled_total",
        "aioqueue_delivery_lateness_seconds_bucket",
        "aioqueue_handler_duration_seconds_bucket",
        "aioqueue_redis_up",
    } <= read
    expressions = " ".join(expr for _, expr in dashboard_queries())
    assert "histogram_quantile(0.5," in expressions
    assert "histogram_quantile(0.99," in expressions
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids))
    # Every panel and query reads the dashboard's data source variable, so that importing
    # the file asks for a Prometheus instead of naming one that does not exist.
    for panel in panels():
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])
