"""The deployment kit of deploy/: each file is checked against what reads it.

- The Kubernetes manifests validate against the Kubernetes schemas (kubernetes-validate,
  strict: a field Kubernetes does not know is an error) of the versions in
  KUBERNETES_VERSIONS; their commands parse with the `aioqueue` command's own options, the
  probes and the grace period fit the service's bounds, and the exporter's Host check and
  token let Prometheus in.
- The KEDA ScaledObject validates against a schema of KEDA's documented fields (below: why
  not the CRD's own) and scales the worker Deployment.
- The alerting rules pass `promtool check rules` and their unit tests (`promtool test
  rules`), which fire and stay quiet for every alert.
- Every metric a PromQL query names (the dashboard's panels and variables, the alerts, the
  KEDA triggers) is a series aioqueue.prometheus really emits, with the labels it has.

No server is started: promtool runs on files (tests/support/promtool.py finds or unpacks it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from aioqueue._admin.stats import QueueStats
from aioqueue._cli import build_parser
from aioqueue._delivery.heartbeat import REMOVAL_TIMEOUT
from aioqueue._delivery.leases import HAND_BACK_TIMEOUT
from aioqueue._model.metrics import Outcome
from aioqueue._model.workers import Worker, WorkerHandler, WorkerState
from aioqueue._service.health import PING_BOUND
from aioqueue._service.health_server import LOOP_BOUND
from aioqueue.http import create_app
from aioqueue.http._guard import hosts_for_bind
from aioqueue.prometheus import QUEUE_STATES, PrometheusMetrics
from aioqueue.testing import free_port
from tests.support.promtool import promtool

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
WORKER_MANIFEST = KUBERNETES / "worker.yaml"
EXPORTER_MANIFEST = KUBERNETES / "exporter.yaml"
SCALED_OBJECT = DEPLOY / "keda" / "scaledobject.yaml"
SCRAPE_CONFIGS = DEPLOY / "prometheus" / "scrape-configs.yml"
ALERTS = DEPLOY / "prometheus" / "aioqueue-alerts.yml"
ALERT_TESTS = DEPLOY / "prometheus" / "aioqueue-alerts.test.yml"
DASHBOARD = DEPLOY / "grafana" / "aioqueue-dashboard.json"

# The oldest Kubernetes the manifests promise to work on, and a recent one; the deploy page
# names both.
KUBERNETES_VERSIONS = ("1.29", "1.35")
# Labels Prometheus adds to every scraped series (the target's, and those the jobs of
# scrape-configs.yml relabel), and the series it makes itself for each target.
TARGET_LABELS = frozenset({"job", "instance", "namespace", "pod"})
SCRAPE_SERIES = {"up": frozenset(TARGET_LABELS)}


def documents(path: Path) -> list[dict[str, Any]]:
    with path.open() as file:
        return [document for document in yaml.safe_load_all(file) if document]


def only(path: Path, kind: str) -> dict[str, Any]:
    [found] = [document for document in documents(path) if document["kind"] == kind]
    return found


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [
        (path, document)
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for document in documents(path)
    ]


# -- Kubernetes: the schemas -------------------------------------------------------------------


def test_the_kit_has_the_manifests_it_documents() -> None:
    kinds = {(path.name, document["kind"]) for path, document in manifests()}
    assert kinds == {
        ("worker.yaml", "Deployment"),
        ("worker.yaml", "PodDisruptionBudget"),
        ("exporter.yaml", "Deployment"),
        ("exporter.yaml", "Service"),
    }


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "manifest",
    manifests(),
    ids=lambda item: f"{item[0].name}:{item[1]['kind']}",
)
def test_the_manifest_validates_against_the_kubernetes_schema(
    manifest: tuple[Path, dict[str, Any]], version: str
) -> None:
    _, document = manifest
    validated = kubernetes_validate.validate(document, version, strict=True)
    assert validated == version


def test_the_strict_schema_refuses_a_misspelt_field() -> None:
    """The validation above can fail: a probe setting Kubernetes does not know is an error
    (applied without strict field validation, it would be dropped and the probe would run on
    its defaults)."""
    deployment = only(WORKER_MANIFEST, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    container["livenessProbe"]["periodSecond"] = 10
    with pytest.raises(kubernetes_validate.ValidationError, match="periodSecond"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


# -- Kubernetes: the worker --------------------------------------------------------------------


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only_container] = deployment["spec"]["template"]["spec"]["containers"]
    assert isinstance(only_container, dict)
    return only_container


def command_line(of: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    """The container's command and args, with `$(NAME)` expanded as Kubernetes does."""
    words = [*of["command"], *of["args"]]

    def expand(word: str) -> str:
        return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: (env or {})[m[1]], word)

    return [expand(str(word)) for word in words]


def test_the_worker_runs_the_documented_command_with_options_the_cli_accepts() -> None:
    worker = container(only(WORKER_MANIFEST, "Deployment"))
    program, *arguments = command_line(worker)
    assert program == "aioqueue"
    args = build_parser().parse_args(arguments)
    assert args.command == "worker"
    assert args.factory == "app.jobs:create_service"
    assert args.health_port == 8081
    assert args.processes == 1
    assert args.shutdown_grace is not None, "the grace is spelt out next to the period"


def test_the_worker_reads_its_redis_url_from_the_secret() -> None:
    worker = container(only(WORKER_MANIFEST, "Deployment"))
    env = {item["name"]: item for item in worker["env"]}
    assert env["AIOQUEUE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "aioqueue", "key": "url"}
    assert "value" not in env["AIOQUEUE_URL"]


def test_the_probes_ask_the_health_port_and_wait_longer_than_its_bounds() -> None:
    deployment = only(WORKER_MANIFEST, "Deployment")
    worker = container(deployment)
    health_port = build_parser().parse_args(command_line(worker)[1:]).health_port
    [port] = [p for p in worker["ports"] if p["name"] == "health"]
    assert port["containerPort"] == health_port
    probes = {name: worker[name] for name in ("startupProbe", "livenessProbe", "readinessProbe")}
    for probe in probes.values():
        assert probe["httpGet"]["port"] == "health"
    assert probes["startupProbe"]["httpGet"]["path"] == "/livez"
    assert probes["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert probes["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # /livez answers within the loop's bound; /readyz within that plus the PING's. A probe
    # that gives up sooner reads a slow answer as a failure.
    assert probes["livenessProbe"]["timeoutSeconds"] > LOOP_BOUND
    assert probes["startupProbe"]["timeoutSeconds"] > LOOP_BOUND
    assert probes["readinessProbe"]["timeoutSeconds"] > LOOP_BOUND + PING_BOUND
    # A restart takes more than one missed answer.
    assert probes["livenessProbe"]["failureThreshold"] >= 3
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(health_port)
    assert annotations["prometheus.io/path"] == "/metrics"


def test_the_termination_grace_period_outlasts_the_whole_shutdown() -> None:
    """SIGTERM, then the shutdown grace for running handlers, then the cut-off handlers'
    events given back and what no handler began (each hand-back bounded, twice when Redis
    hangs), then leaving the registry: all before Kubernetes' SIGKILL."""
    deployment = only(WORKER_MANIFEST, "Deployment")
    grace = build_parser().parse_args(command_line(container(deployment))[1:]).shutdown_grace
    period = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    whole_shutdown = grace + 2 * HAND_BACK_TIMEOUT + REMOVAL_TIMEOUT
    assert period > whole_shutdown, (period, whole_shutdown)
    # The manifest's comment says so, with the same numbers.
    text = WORKER_MANIFEST.read_text()
    assert f"--shutdown-grace {grace:g}" in text
    assert f"Keep this at least --shutdown-grace + {period - grace:g}" in text


def test_the_disruption_budget_and_the_rollout_keep_workers_running() -> None:
    deployment = only(WORKER_MANIFEST, "Deployment")
    budget = only(WORKER_MANIFEST, "PodDisruptionBudget")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_every_container_asks_for_resources_and_runs_unprivileged() -> None:
    for path, document in manifests():
        if document["kind"] != "Deployment":
            continue
        pod = document["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, path.name
        for each in pod["containers"]:
            assert {"cpu", "memory"} <= set(each["resources"]["requests"]), path.name
            assert "memory" in each["resources"]["limits"], path.name
            assert each["securityContext"]["allowPrivilegeEscalation"] is False, path.name


# -- Kubernetes: the exporter ------------------------------------------------------------------

POD_ENV = {"POD_IP": "10.1.2.3", "POD_NAMESPACE": "shop"}


def exporter_command() -> list[str]:
    return command_line(container(only(EXPORTER_MANIFEST, "Deployment")), POD_ENV)


def test_the_exporter_runs_serve_with_the_token_from_the_secret() -> None:
    exporter = container(only(EXPORTER_MANIFEST, "Deployment"))
    program, *arguments = exporter_command()
    assert program == "aioqueue"
    args = build_parser().parse_args(arguments)
    assert args.command == "serve"
    assert not args.insecure, "the API can write: it serves the pod's address with a token"
    env = {item["name"]: item for item in exporter["env"]}
    assert env["AIOQUEUE_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "aioqueue",
        "key": "token",
    }
    assert env["AIOQUEUE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "aioqueue", "key": "url"}
    # Every $(NAME) in the args is one Kubernetes can expand: an env entry of the container.
    named = {m for word in exporter["args"] for m in re.findall(r"\$\((\w+)\)", str(word))}
    assert named == set(POD_ENV)
    assert named <= set(env)
    service = only(EXPORTER_MANIFEST, "Service")
    [port] = exporter["ports"]
    [service_port] = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"] == "http"
    assert port["containerPort"] == args.port


@pytest.fixture
def exporter_app() -> tuple[Any, str]:
    """The app `aioqueue serve` builds from the manifest's options and env (as run_serve
    does), on a Redis that does not answer, and the token it wants."""
    exporter = container(only(EXPORTER_MANIFEST, "Deployment"))
    args = build_parser().parse_args(exporter_command()[1:])
    env = {item["name"]: item.get("value") for item in exporter["env"]}
    token = "t" * 32
    app = create_app(
        url=f"redis://127.0.0.1:{free_port()}",
        prefix=env["AIOQUEUE_PREFIX"],
        token=token,
        allowed_hosts=hosts_for_bind(args.host, args.port, args.allow_host),
    )
    return app, token


async def scrape(app: Any, host: str, token: str | None) -> httpx.Response:
    headers = {"Host": host}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://exporter") as http:
            return await http.get("/metrics", headers=headers)


@pytest.mark.parametrize(
    "host",
    [
        # What Prometheus sends when it scrapes the pod found through the Service's endpoints.
        "10.1.2.3:8000",
        # What people and port-forwards through the Service send.
        "aioqueue-exporter:8000",
        "aioqueue-exporter.shop.svc:8000",
    ],
)
async def test_prometheus_gets_the_metrics_through_the_host_check(
    exporter_app: tuple[Any, str], host: str
) -> None:
    app, token = exporter_app
    response = await scrape(app, host, token)
    assert response.status_code == 200, response.text
    # Redis does not answer: still 200, with the gauge the Redis alert reads.
    assert "aioqueue_redis_up 0.0" in response.text


async def test_the_exporter_refuses_a_scrape_without_the_token_or_from_another_host(
    exporter_app: tuple[Any, str],
) -> None:
    app, token = exporter_app
    assert (await scrape(app, "10.1.2.3:8000", None)).status_code == 401
    assert (await scrape(app, "10.9.9.9:8000", token)).status_code == 403


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


# -- PromQL: every metric named is one the exporter emits --------------------------------------

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


def test_the_promql_reader_finds_names_and_matchers() -> None:
    names, found = selectors(
        'sum by (type, le) (rate(foo_bucket{type=~"$type", state="a|b"}[5m])) / on (type) '
        "group_left bar_total > bool 3e2 offset 5m or vector(0) and max(baz) without (pod)"
    )
    assert names == {"foo_bucket", "bar_total", "baz"}
    assert found == [("foo_bucket", [("type", "=~", "$type"), ("state", "=", "a|b")])]


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


def test_every_alert_reads_series_the_exporter_emits() -> None:
    series = emitted_series()
    problems = {rule["alert"]: unknown_series(rule["expr"], series) for rule in alert_rules()}
    assert {alert: found for alert, found in problems.items() if found} == {}


# -- KEDA --------------------------------------------------------------------------------------

# KEDA's ScaledObject CRD is not in kubernetes-validate, and no package on the index ships
# its openAPI schema (cloudcoil-models-keda ships pydantic models generated from it, which
# accept unknown fields). This schema is written from KEDA's documented fields: the
# ScaledObject specification (keda.sh/docs/2.x/reference/scaledobject-spec) and the
# Prometheus scaler's trigger metadata (keda.sh/docs/2.x/scalers/prometheus). Unknown
# fields are errors, as a misspelt one would be ignored by KEDA. The HPA behaviour under
# `advanced` is Kubernetes' own type, checked with Kubernetes' schema below.
_INT_FROM_0 = {"type": "integer", "minimum": 0}
_STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
_PROMETHEUS_METADATA = {
    "type": "object",
    "required": ["serverAddress", "query", "threshold"],
    "propertyNames": {
        "enum": [
            "serverAddress", "query", "queryParameters", "threshold", "activationThreshold",
            "namespace", "customHeaders", "ignoreNullValues", "unsafeSsl", "timeout",
            "authModes", "awsRegion", "identityOwner",
        ]
    },
    "properties": {
        "serverAddress": {"type": "string", "pattern": r"^https?://[^\s/]+"},
        "query": {"type": "string", "minLength": 1},
        "threshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
        "activationThreshold": {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"},
        "ignoreNullValues": {"enum": ["true", "false"]},
        "unsafeSsl": {"enum": ["true", "false"]},
    },
}  # fmt: skip
SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "namespace": {"type": "string"},
                "labels": _STRINGS,
                "annotations": _STRINGS,
            },
        },
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": _INT_FROM_0,
                "initialCooldownPeriod": _INT_FROM_0,
                "idleReplicaCount": _INT_FROM_0,
                "minReplicaCount": _INT_FROM_0,
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {
                    "type": "object",
                    "required": ["failureThreshold", "replicas"],
                    "additionalProperties": False,
                    "properties": {
                        "failureThreshold": _INT_FROM_0,
                        "replicas": _INT_FROM_0,
                        "behavior": {
                            "enum": [
                                "static",
                                "currentReplicas",
                                "currentReplicasIfHigher",
                                "currentReplicasIfLower",
                            ]
                        },
                    },
                },
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {"type": "object"},
                            },
                        },
                        "scalingModifiers": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "formula": {"type": "string"},
                                "target": {"type": "string"},
                                "activationTarget": {"type": "string"},
                                "metricType": {"enum": ["AverageValue", "Value"]},
                            },
                        },
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": {
                                "type": "object",
                                "required": ["name"],
                                "additionalProperties": False,
                                "properties": {
                                    "name": {"type": "string"},
                                    "kind": {
                                        "enum": [
                                            "TriggerAuthentication",
                                            "ClusterTriggerAuthentication",
                                        ]
                                    },
                                },
                            },
                            "metadata": _STRINGS,
                        },
                        "if": {"properties": {"type": {"const": "prometheus"}}},
                        "then": {"properties": {"metadata": _PROMETHEUS_METADATA}},
                    },
                },
            },
        },
    },
}


def validate_scaled_object(scaled_object: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(SCALED_OBJECT_SCHEMA)
    jsonschema.Draft202012Validator(SCALED_OBJECT_SCHEMA).validate(scaled_object)
    spec = scaled_object["spec"]
    # What KEDA's admission webhook checks beyond the schema.
    if spec.get("minReplicaCount", 0) > spec.get("maxReplicaCount", 100):
        raise ValueError("minReplicaCount is above maxReplicaCount")
    if "fallback" in spec and any(t.get("metricType") != "AverageValue" for t in spec["triggers"]):
        # KEDA before 2.17 takes a fallback only when every trigger is AverageValue.
        raise ValueError("a fallback needs every trigger's metricType to be AverageValue")
    behavior = spec.get("advanced", {}).get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:
        # KEDA hands it to the HPA it makes: Kubernetes' autoscaling/v2 type.
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": scaled_object["metadata"]["name"]},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                "maxReplicas": spec.get("maxReplicaCount", 100),
                "behavior": behavior,
            },
        }
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(hpa, version, strict=True)


def scaled_object() -> dict[str, Any]:
    [document] = documents(SCALED_OBJECT)
    return document


def test_the_scaled_object_validates_against_kedas_documented_fields() -> None:
    validate_scaled_object(scaled_object())


@pytest.mark.parametrize(
    ("path", "value", "error"),
    [
        (("spec", "pollingIntervall"), 15, "'pollingIntervall' was unexpected"),
        (("spec", "triggers", 0, "metadata", "treshold"), "100", "'treshold' is not one of"),
        (("spec", "triggers", 0, "metadata", "threshold"), 100, "100 is not of type 'string'"),
        (("spec", "minReplicaCount"), 20, "minReplicaCount is above maxReplicaCount"),
        (("spec", "triggers", 1, "metricType"), "Value", "a fallback needs every trigger"),
        (("spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown",
          "stabilizationWindowSecond"), 300, "'stabilizationWindowSecond' was unexpected"),
    ],
    ids=["spec-typo", "metadata-typo", "threshold-not-a-string", "min-above-max",
         "fallback-with-value", "hpa-behavior-typo"],
)  # fmt: skip
def test_the_scaled_object_check_refuses_a_mistake(
    path: tuple[str | int, ...], value: Any, error: str
) -> None:
    broken = scaled_object()
    *parents, last = path
    holder: Any = broken
    for key in parents:
        holder = holder[key]
    holder[last] = value
    with pytest.raises(
        (jsonschema.ValidationError, kubernetes_validate.ValidationError, ValueError),
        match=re.escape(error),
    ):
        validate_scaled_object(broken)


def test_keda_scales_the_worker_deployment_on_series_the_exporter_emits() -> None:
    spec = scaled_object()["spec"]
    worker = only(WORKER_MANIFEST, "Deployment")
    target = spec["scaleTargetRef"]
    assert (target.get("apiVersion", "apps/v1"), target.get("kind", "Deployment")) == (
        worker["apiVersion"],
        worker["kind"],
    )
    assert target["name"] == worker["metadata"]["name"]
    series = emitted_series()
    queries = [trigger["metadata"]["query"] for trigger in spec["triggers"]]
    assert {name for query in queries for name in selectors(query)[0]} == {
        "aioqueue_queue_events",
        "aioqueue_queue_oldest_overdue_seconds",
    }
    assert [problem for query in queries for problem in unknown_series(query, series)] == []
