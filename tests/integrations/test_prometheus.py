"""aioqueue.prometheus: the Metrics protocol on prometheus_client, and the queue gauges."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest
import redis.asyncio as redis
from prometheus_client import CollectorRegistry

from aioqueue import Event, EventServiceBuilder
from aioqueue._admin.stats import read_stats
from aioqueue.prometheus import PrometheusMetrics
from tests.support.common import Recorder

Builder = Callable[[], EventServiceBuilder]


@dataclass
class Charge(Event):
    id: str
    outcome: str


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_service_reports_enqueues_dispatches_and_outcomes(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    def outcome(event: Event) -> bool:
        assert isinstance(event, Charge)
        if event.outcome == "raise":
            raise RuntimeError("declined")
        return event.outcome == "ok"

    recorder = Recorder(outcome=outcome)
    service = service_builder().metrics(metrics).retry_attempts(2).build()
    async with service:
        for i in range(3):
            await service.enqueue(Charge(id=f"ok-{i}", outcome="ok"), 0)
        await service.enqueue(Charge(id="ok-0", outcome="ok"), 0)  # kept: already pending
        await service.enqueue(Charge(id="bad", outcome="raise"), 0)
        # Added after the enqueues, so that ok-0 is surely still pending at its second one.
        service.add_handler(Charge, recorder, parallelism=4)
        # 3 successes + 2 attempts of "bad" (the second one kills it).
        await recorder.wait_for(5)

    labels = {"type": "Charge"}
    assert sample(registry, "aioqueue_events_enqueued_total", result="scheduled", **labels) == 4
    assert sample(registry, "aioqueue_events_enqueued_total", result="kept", **labels) == 1
    assert sample(registry, "aioqueue_events_dispatched_total", **labels) == 5
    assert sample(registry, "aioqueue_events_handled_total", outcome="ok", **labels) == 3
    assert sample(registry, "aioqueue_events_handled_total", outcome="failed", **labels) == 1
    assert sample(registry, "aioqueue_events_handled_total", outcome="dead", **labels) == 1
    assert sample(registry, "aioqueue_handler_duration_seconds_count", **labels) == 5
    assert sample(registry, "aioqueue_delivery_lateness_seconds_count", **labels) == 5
    assert sample(registry, "aioqueue_delivery_lateness_seconds_bucket", le="+Inf", **labels) == 5


async def test_queue_gauges_match_redis(
    service_builder: Builder, redis_client: redis.Redis
) -> None:
    service = service_builder().build()
    async with service:
        for i in range(4):
            await service.enqueue(Charge(id=f"c-{i}", outcome="ok"), timedelta(hours=1))
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    await metrics.refresh_queue_depths(redis_client, "aioqueue")
    [charges] = (await read_stats(redis_client, "aioqueue")).queues
    for state in ("pending", "due_now", "ready", "in_flight", "dead"):
        gauge = sample(registry, "aioqueue_queue_events", type="Charge", state=state)
        assert gauge == getattr(charges, state), state
    assert sample(registry, "aioqueue_queue_events", type="Charge", state="pending") == 4
    assert sample(registry, "aioqueue_queue_oldest_overdue_seconds", type="Charge") == 0


def test_missing_extra_names_the_install_command() -> None:
    code = (
        "import sys; sys.modules['prometheus_client'] = None\n"
        "try:\n    import aioqueue.prometheus\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "pip install 'aioqueue-redis[prometheus]'" in result.stdout, result.stderr


async def test_metrics_route_without_the_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    from aioqueue.http import create_app

    # As if prometheus_client were not installed: importing it raises ImportError.
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    app = create_app(url=redis_url)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        response = await http.get("/metrics")
    assert response.status_code == 501
    assert "pip install 'aioqueue-redis[prometheus]'" in response.json()["error"]
