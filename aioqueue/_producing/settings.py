"""The settings every producer takes (a service's builder and SyncProducer alike), declared
once here: their names, defaults and checks. The builder documents them as its own."""

from __future__ import annotations

from aioqueue._model.checks import DEFAULT_MAX_PAYLOAD_BYTES, MAX_PAYLOAD_BYTES_LIMIT, checked
from aioqueue._model.instrumentation import Instrumentation, NoInstrumentation
from aioqueue._model.metrics import Metrics, NoMetrics
from aioqueue._model.serializer import JsonSerializer, Serializer
from aioqueue._model.settings import Setting, any_value, integer
from aioqueue._wire.keys import validate_prefix

__all__ = ["INSTRUMENTATION", "MAX_PAYLOAD_BYTES", "METRICS", "PREFIX", "SERIALIZER"]


def _prefix(name: str, value: str) -> str:
    return checked(validate_prefix, value, name)


PREFIX = Setting("aioqueue", _prefix, name="prefix")
MAX_PAYLOAD_BYTES = Setting(
    DEFAULT_MAX_PAYLOAD_BYTES, integer(1, MAX_PAYLOAD_BYTES_LIMIT), name="max_payload_bytes"
)
SERIALIZER = Setting[Serializer, Serializer](JsonSerializer(), any_value, name="serializer")
METRICS = Setting[Metrics, Metrics](NoMetrics(), any_value, name="metrics")
INSTRUMENTATION = Setting[Instrumentation, Instrumentation](
    NoInstrumentation(), any_value, name="instrumentation"
)
