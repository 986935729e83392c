"""OpenTelemetry tracing across the delay (`pip install 'aioqueue-redis[otel]'`).

    service = EventService.builder().url(url).instrumentation(OpenTelemetryTracing()).build()

Enqueueing inside a span stores that span's W3C `traceparent` (and `tracestate`) in the
event's context; the handler then runs inside a CONSUMER span `handle <type>` whose parent is
that span, so one trace covers the code that scheduled the event, however long ago, and the
handler that ran it. A context that already has a `traceparent` is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

try:
    from opentelemetry import trace
    from opentelemetry.trace import Span, SpanKind, Status, StatusCode, TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "aioqueue.tracing needs opentelemetry-api: pip install 'aioqueue-redis[otel]'"
    ) from exc

from aioqueue._model.instrumentation import HandlingScope

__all__ = ["OpenTelemetryTracing"]

_TRACEPARENT = "traceparent"


class _SpanScope:
    def __init__(self, span: Span) -> None:
        self._span = span

    def finished(self, error: str | None) -> None:
        if error is None:
            self._span.set_status(Status(StatusCode.OK))
        else:
            self._span.set_status(Status(StatusCode.ERROR, error))
            self._span.set_attribute("error.type", error.split(":", 1)[0])


class OpenTelemetryTracing:
    """An `Instrumentation` that carries the trace context through the event's context:
    give it to the builder's `.instrumentation(...)`.

    Spans come from `tracer_provider`, or from OpenTelemetry's global provider.
    """

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer("aioqueue", tracer_provider=tracer_provider)
        self._propagator = TraceContextTextMapPropagator()

    def enqueue_context(self, context: Mapping[str, str] | None) -> Mapping[str, str] | None:
        """The context with the current span's `traceparent` (and `tracestate`) added;
        unchanged outside a span, or when it already has a `traceparent`."""
        if context is not None and _TRACEPARENT in context:
            return context
        carrier = dict(context or {})
        self._propagator.inject(carrier)
        # Outside any span nothing is injected: keep the caller's context as it was.
        return carrier if _TRACEPARENT in carrier else context

    def handling(
        self, event_type: str, event_id: str, attempt: int, context: Mapping[str, str]
    ) -> AbstractContextManager[HandlingScope]:
        """A CONSUMER span `handle <type>`, child of the span the event was enqueued in,
        with the messaging attributes and the attempt; a failed attempt sets its status
        to ERROR."""
        return self._handling(event_type, event_id, attempt, context)

    @contextmanager
    def _handling(
        self, event_type: str, event_id: str, attempt: int, context: Mapping[str, str]
    ) -> Iterator[HandlingScope]:
        parent = self._propagator.extract(dict(context))
        with self._tracer.start_as_current_span(
            f"handle {event_type}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "aioqueue",
                "messaging.operation.type": "process",
                "messaging.destination.name": event_type,
                "messaging.message.id": event_id,
                "aioqueue.attempt": attempt,
            },
        ) as span:
            yield _SpanScope(span)
