"""aioqueue.tracing: the enqueuing span's trace continues in the handler, across the delay."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from aioqueue import Event, EventServiceBuilder, event_context
from aioqueue.tracing import OpenTelemetryTracing
from tests.support.common import wait_until

Builder = Callable[[], EventServiceBuilder]


@dataclass
class Shipment(Event):
    id: str
    fail_first: bool = False


def tracing() -> tuple[TracerProvider, InMemorySpanExporter]:
    # A provider of the test's own: the global one stays untouched.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


async def test_handler_span_continues_the_enqueuing_trace(service_builder: Builder) -> None:
    provider, exporter = tracing()
    tracer = provider.get_tracer("shop")
    seen: list[tuple[int, int, dict[str, str]]] = []
    done = anyio.Event()

    async def ship(event: Shipment) -> bool:
        context = trace.get_current_span().get_span_context()
        seen.append((context.trace_id, context.span_id, dict(event_context.get())))
        if event.fail_first and len(seen) == 1:
            return False
        done.set()
        return True

    service = service_builder().instrumentation(OpenTelemetryTracing(provider)).build()
    async with service:
        service.add_handler(Shipment, ship)
        with tracer.start_as_current_span("checkout") as checkout:
            await service.enqueue(Shipment(id="s-1", fail_first=True), 0.05, context={"k": "v"})
        with anyio.fail_after(10):
            await done.wait()

    origin = checkout.get_span_context()
    spans = [span for span in exporter.get_finished_spans() if span.name == "handle Shipment"]
    assert len(spans) == 2  # the failed attempt and its retry
    for span in spans:
        assert span.context is not None
        assert span.parent is not None
        assert span.context.trace_id == origin.trace_id
        assert span.parent.span_id == origin.span_id
        assert span.kind is SpanKind.CONSUMER
        assert span.attributes is not None
        assert span.attributes["messaging.destination.name"] == "Shipment"
        assert span.attributes["messaging.message.id"] == "s-1"
    assert [span.attributes and span.attributes["aioqueue.attempt"] for span in spans] == [1, 2]
    assert [span.status.status_code for span in spans] == [StatusCode.ERROR, StatusCode.OK]
    assert "returned False" in (spans[0].status.description or "")
    # The handler ran inside its span, and the context it read carries the traceparent.
    trace_id, span_id, context = seen[0]
    assert trace_id == origin.trace_id
    assert span_id == spans[0].context.span_id
    assert context["k"] == "v"
    assert context["traceparent"].startswith(f"00-{origin.trace_id:032x}-{origin.span_id:016x}-")


async def test_without_a_span_the_context_is_left_alone(service_builder: Builder) -> None:
    provider, exporter = tracing()
    contexts: list[dict[str, str]] = []
    done = anyio.Event()

    async def ship(event: Shipment) -> bool:
        contexts.append(dict(event_context.get()))
        done.set()
        return True

    service = service_builder().instrumentation(OpenTelemetryTracing(provider)).build()
    async with service:
        service.add_handler(Shipment, ship)
        await service.enqueue(Shipment(id="s-2"), 0)
        with anyio.fail_after(10):
            await done.wait()
    assert contexts == [{}]
    [span] = exporter.get_finished_spans()
    assert span.parent is None  # a new trace starts at the handler


def test_missing_extra_names_the_install_command() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "try:\n    import aioqueue.tracing\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'aioqueue-redis[otel]'" in result.stdout, result.stderr


async def test_a_handler_cut_off_by_its_timeout_ends_its_span_as_a_failed_attempt(
    service_builder: Builder,
) -> None:
    provider, exporter = tracing()

    async def hang(event: Shipment) -> bool:
        await anyio.sleep_forever()
        return True

    builder = service_builder().handler_timeout(0.2).retry_attempts(1)
    service = builder.instrumentation(OpenTelemetryTracing(provider)).build()
    async with service:
        service.add_handler(Shipment, hang)
        await service.enqueue(Shipment(id="s-1"), 0)

        async def dead() -> bool:
            return bool(await service.dead_letters(Shipment))

        await wait_until(dead)

    [span] = [span for span in exporter.get_finished_spans() if span.name == "handle Shipment"]
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None
    assert span.status.description == "the handler did not finish within 0.2 s on attempt 1"
    assert not [event for event in span.events if event.name == "exception"]
