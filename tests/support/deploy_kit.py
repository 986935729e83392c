"""The files of the deployment kit (deploy/) and what reads them, shared by its tests
(tests/project/test_deploy_*.py): paths, the YAML documents, the containers' command lines
as Kubernetes expands them, the alerting rules."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

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


def alert_rules() -> list[dict[str, Any]]:
    with ALERTS.open() as file:
        groups = yaml.safe_load(file)["groups"]
    return [rule for group in groups for rule in group["rules"]]
