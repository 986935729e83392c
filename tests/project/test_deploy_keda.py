"""The KEDA ScaledObject of deploy/keda/: it validates against a schema of KEDA's documented
fields (below: why not the CRD's own) and scales the worker Deployment on series
aioqueue.prometheus emits."""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.support.deploy_kit import (
    KUBERNETES_VERSIONS,
    SCALED_OBJECT,
    WORKER_MANIFEST,
    documents,
    only,
)
from tests.support.promql import emitted_series, selectors, unknown_series

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
