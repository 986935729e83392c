"""The Prometheus files of deploy/prometheus/: the scrape jobs keep the pods and the Service
the manifests make, and the alerting rules pass `promtool check rules` and their unit tests
(`promtool test rules`), which fire and stay quiet for every alert, reading only series
aioqueue.prometheus emits. promtool runs on files (tests/support/promtool.py finds or
unpacks it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.deploy_kit import (
    ALERT_TESTS,
    ALERTS,
    EXPORTER_MANIFEST,
    SCRAPE_CONFIGS,
    WORKER_MANIFEST,
    only,
)
from tests.support.promql import emitted_series, unknown_series
from tests.support.promtool import promtool

# -- Prometheus: the scrape jobs ---------------------------------------------------------------


def scrape_jobs() -> dict[str, dict[str, Any]]:
    with SCRAPE_CONFIGS.open() as file:
        config = yaml.safe_load(file)
    return {job["job_name"]: job for job in config["scrape_configs"]}


def kept(job: dict[str, Any]) -> dict[str, str]:
    """The source labels a job keeps targets by, and the value each must have."""
    found: dict[str, str] = {}
    for rule in job["relabel_configs"]:
        if rule.get("action") == "keep":
            values = rule["regex"].split(";")
            found.update(zip(rule["source_labels"], values, strict=True))
    return found


def meta_name(text: str) -> str:
    """A label or annotation name as Kubernetes service discovery writes it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", text)


def test_the_worker_job_keeps_the_worker_pods_by_their_labels_and_annotations() -> None:
    worker_pod = only(WORKER_MANIFEST, "Deployment")["spec"]["template"]["metadata"]
    exporter_pod = only(EXPORTER_MANIFEST, "Deployment")["spec"]["template"]["metadata"]
    job = scrape_jobs()["aioqueue-workers"]
    [discovery] = job["kubernetes_sd_configs"]
    assert discovery["role"] == "pod"

    def keeps(pod: dict[str, Any]) -> bool:
        meta = {
            **{f"__meta_kubernetes_pod_label_{meta_name(k)}": v for k, v in pod["labels"].items()},
            **{
                f"__meta_kubernetes_pod_annotation_{meta_name(k)}": v
                for k, v in pod.get("annotations", {}).items()
            },
        }
        return all(re.fullmatch(value, meta.get(label, "")) for label, value in kept(job).items())

    assert keeps(worker_pod)
    assert not keeps(exporter_pod), "the exporter needs the token: its own job scrapes it"
    # The annotations the job reads the port and path from.
    sources = {label for rule in job["relabel_configs"] for label in rule["source_labels"]}
    for annotation in ("prometheus.io/port", "prometheus.io/path"):
        assert f"__meta_kubernetes_pod_annotation_{meta_name(annotation)}" in sources
        assert annotation in worker_pod["annotations"]


def test_the_exporter_job_keeps_the_exporter_service_and_sends_the_token() -> None:
    job = scrape_jobs()["aioqueue-exporter"]
    service = only(EXPORTER_MANIFEST, "Service")
    [port] = service["spec"]["ports"]
    assert kept(job) == {
        "__meta_kubernetes_service_name": service["metadata"]["name"],
        "__meta_kubernetes_endpoint_port_name": port["name"],
    }
    assert job["authorization"]["type"] == "Bearer"
    assert job["authorization"]["credentials_file"]
    assert job.get("metrics_path", "/metrics") == "/metrics"


def test_the_jobs_the_alerts_name_are_the_scrape_jobs() -> None:
    named = set(re.findall(r'job="([^"]+)"', ALERTS.read_text()))
    assert named == {"aioqueue-exporter"}
    assert named <= set(scrape_jobs())


# -- Prometheus: the alerting rules ------------------------------------------------------------


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool()), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def alert_rules() -> list[dict[str, Any]]:
    with ALERTS.open() as file:
        groups = yaml.safe_load(file)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    result = run_promtool("check", "rules", ALERTS.name, cwd=ALERTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_the_rules_pass_their_unit_tests() -> None:
    result = run_promtool("test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_unit_tests_fail_when_an_alert_changes(tmp_path: Path) -> None:
    """The unit tests can fail: with the lateness bound raised, the late type is not
    reported where the tests expect it."""
    shutil.copy(ALERT_TESTS, tmp_path)
    rules = ALERTS.read_text()
    assert rules.count(") > 5\n") == 1
    (tmp_path / ALERTS.name).write_text(rules.replace(") > 5\n", ") > 20\n"))
    result = run_promtool("test", "rules", ALERT_TESTS.name, cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "alertname: AioqueueDeliveryLate" in result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    with ALERT_TESTS.open() as file:
        unit_tests = yaml.safe_load(file)
    assert unit_tests["rule_files"] == [ALERTS.name]
    cases = [case for test in unit_tests["tests"] for case in test["alert_rule_test"]]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    alerts = {rule["alert"] for rule in alert_rules()}
    assert alerts == {
        "AioqueueNoLiveWorker",
        "AioqueueDeliveryLate",
        "AioqueueEventsOverdue",
        "AioqueueDeadLettersGrowing",
        "AioqueueRedisUnreachable",
        "AioqueueExporterDown",
    }
    assert firing == alerts
    assert quiet == alerts
    for rule in alert_rules():
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_every_alert_reads_series_the_exporter_emits() -> None:
    series = emitted_series()
    problems = {rule["alert"]: unknown_series(rule["expr"], series) for rule in alert_rules()}
    assert {alert: found for alert, found in problems.items() if found} == {}
