"""The files of the deployment kit (deploy/), shared by its tests
(tests/project/test_deploy_*.py): where each file is, the Kubernetes versions the manifests
promise, and the YAML documents in them."""

from __future__ import annotations

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
