"""The Kubernetes manifests of deploy/kubernetes/: they validate against the Kubernetes schemas
(kubernetes-validate, strict: a field Kubernetes does not know is an error) of the versions
in KUBERNETES_VERSIONS; their commands parse with the `aioqueue` command's own options, the
probes and the grace period fit the service's bounds, and the exporter's Host check and
token let Prometheus in. No server is started."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest

from aioqueue._cli import build_parser
from aioqueue._delivery.heartbeat import REMOVAL_TIMEOUT
from aioqueue._delivery.leases import HAND_BACK_TIMEOUT
from aioqueue._service.health import PING_BOUND
from aioqueue._service.health_server import LOOP_BOUND
from aioqueue.http import create_app
from aioqueue.http._guard import hosts_for_bind
from aioqueue.testing import free_port
from tests.support.deploy_kit import (
    EXPORTER_MANIFEST,
    KUBERNETES_VERSIONS,
    WORKER_MANIFEST,
    manifests,
    only,
)


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
    container(deployment)["livenessProbe"]["periodSecond"] = 10
    with pytest.raises(kubernetes_validate.ValidationError, match="periodSecond"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


# -- Kubernetes: the worker --------------------------------------------------------------------


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
