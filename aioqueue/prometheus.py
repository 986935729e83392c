"""Prometheus metrics for aioqueue (`pip install 'aioqueue-redis[prometheus]'`).

    metrics = PrometheusMetrics()
    service = EventService.builder().url(url).metrics(metrics).build()
    ...
    await metrics.refresh_queue_depths(client, "aioqueue")   # before each scrape, or on a timer

Metric names (all labelled by `type`, the event type's wire name):

- `aioqueue_events_enqueued_total{type, result="scheduled"|"kept"}`
- `aioqueue_events_dispatched_total{type}`
- `aioqueue_events_handled_total{type, outcome="ok"|"failed"|"dead"}`
- `aioqueue_handler_duration_seconds{type}` (histogram)
- `aioqueue_delivery_lateness_seconds{type}` (histogram, server clock)
- `aioqueue_queue_events{type, state="pending"|"due_now"|"ready"|"in_flight"|"dead"}` (gauge)
- `aioqueue_queue_oldest_overdue_seconds{type}` (gauge)
- `aioqueue_queue_live_workers{type}` (gauge: running workers with a handler for the type,
  from the worker registry)
- `aioqueue_redis_up` (gauge, no labels: 1 when the last refresh read Redis, 0 when it could
  not)

The queue gauges describe Redis, not this process, so they are set from `aioqueue stats`'
numbers and the worker registry by `refresh_queue_depths` (the HTTP API's `/metrics` calls
it on every scrape, and still answers, with `aioqueue_redis_up 0`, when Redis does not).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

try:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "aioqueue.prometheus needs prometheus_client: pip install 'aioqueue-redis[prometheus]'"
    ) from exc

from aioqueue._admin.stats import QueueStats, read_stats
from aioqueue._model.metrics import Outcome
from aioqueue._model.workers import Worker, WorkerState
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import REDIS_ERRORS
from aioqueue._wire.workers import read_workers

__all__ = ["DURATION_BUCKETS", "LATENESS_BUCKETS", "QUEUE_STATES", "PrometheusMetrics"]

DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
"""Bucket bounds, in seconds, of `aioqueue_handler_duration_seconds`."""
# Lateness is milliseconds when all is well and minutes when workers fall behind.
LATENESS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 15, 60, 300, 1800)
"""Bucket bounds, in seconds, of `aioqueue_delivery_lateness_seconds`."""
QUEUE_STATES = ("pending", "due_now", "ready", "in_flight", "dead")
"""The `state` label values of `aioqueue_queue_events`: the counts `aioqueue stats` shows."""


class PrometheusMetrics:
    """A `Metrics` implementation on prometheus_client: give it to the builder's
    `.metrics(...)`.

    Pass `registry` to keep the metrics apart from prometheus_client's global registry (one
    per test, or per app); `namespace` is the first part of every metric's name.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, namespace: str = "aioqueue"
    ) -> None:
        # prometheus_client's default registry is used when `registry` is left out.
        kwargs: dict[str, Any] = {"namespace": namespace}
        if registry is not None:
            kwargs["registry"] = registry
        self.enqueued = Counter(
            "events_enqueued", "Enqueue calls by outcome", ["type", "result"], **kwargs
        )
        self.dispatched = Counter(
            "events_dispatched", "Due events moved to the ready list", ["type"], **kwargs
        )
        self.handled = Counter(
            "events_handled", "Handler attempts by outcome", ["type", "outcome"], **kwargs
        )
        self.duration = Histogram(
            "handler_duration_seconds",
            "How long handlers ran",
            ["type"],
            buckets=DURATION_BUCKETS,
            **kwargs,
        )
        self.lateness = Histogram(
            "delivery_lateness_seconds",
            "Server time at claim minus due time",
            ["type"],
            buckets=LATENESS_BUCKETS,
            **kwargs,
        )
        self.queue_events = Gauge(
            "queue_events",
            "Events per queue state (see aioqueue stats)",
            ["type", "state"],
            **kwargs,
        )
        self.oldest_overdue = Gauge(
            "queue_oldest_overdue_seconds",
            "How long the most overdue event waits",
            ["type"],
            **kwargs,
        )
        self.live_workers = Gauge(
            "queue_live_workers",
            "Running workers with a handler for the type (the worker registry)",
            ["type"],
            **kwargs,
        )
        self.redis_up = Gauge(
            "redis_up", "1 when the last refresh of the queue gauges read Redis, else 0", **kwargs
        )

    # -- the Metrics protocol ----------------------------------------------------------------

    def event_enqueued(self, event_type: str, *, scheduled: bool) -> None:
        """Counts an enqueue in `aioqueue_events_enqueued_total{result="scheduled"|"kept"}`."""
        self.enqueued.labels(event_type, "scheduled" if scheduled else "kept").inc()

    def events_dispatched(self, event_type: str, count: int) -> None:
        """Adds `count` to `aioqueue_events_dispatched_total`."""
        self.dispatched.labels(event_type).inc(count)

    def event_handled(
        self, event_type: str, outcome: Outcome, *, duration: float, lateness: float
    ) -> None:
        """Counts a handler call by outcome and observes its duration and its lateness."""
        self.handled.labels(event_type, outcome).inc()
        self.duration.labels(event_type).observe(duration)
        self.lateness.labels(event_type).observe(lateness)

    # -- queue depths ------------------------------------------------------------------------

    def set_queue_depths(self, queues: Sequence[QueueStats]) -> None:
        """Sets the queue gauges from stats (types missing from `queues` keep their values)."""
        for queue in queues:
            for state in QUEUE_STATES:
                self.queue_events.labels(queue.event_type, state).set(getattr(queue, state))
            self.oldest_overdue.labels(queue.event_type).set(queue.oldest_overdue)

    def set_live_workers(self, queues: Sequence[QueueStats], workers: Sequence[Worker]) -> None:
        """Sets `aioqueue_queue_live_workers` of each queue from the live `workers`."""
        running = [worker for worker in workers if worker.state is WorkerState.RUNNING]
        for queue in queues:
            count = sum(1 for worker in running if worker.handles(queue.event_type))
            self.live_workers.labels(queue.event_type).set(count)

    async def refresh_queue_depths(
        self, client: RedisClient, prefix: str, event_types: Sequence[str] = ()
    ) -> None:
        """Reads the queues and the live workers of `prefix` from Redis and sets the gauges;
        when Redis cannot be read, sets `aioqueue_redis_up` to 0 and raises."""
        try:
            snapshot = await read_stats(client, prefix, event_types)
            listed = await read_workers(client, prefix)
        except REDIS_ERRORS:
            self.redis_up.set(0)
            raise
        self.redis_up.set(1)
        self.set_queue_depths(snapshot.queues)
        self.set_live_workers(snapshot.queues, listed.workers)
