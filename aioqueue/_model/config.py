"""The service's settings, validated and frozen by the builder."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from .instrumentation import Instrumentation
from .metrics import Metrics
from .rate_limit import RateLimit
from .retry import RetryPolicy
from .serializer import Serializer

__all__ = ["LEASE_MARGIN", "ProducerConfig", "ServiceConfig"]

# Slack added to the handler timeout before an event's next attempt may start: it covers the
# round trips around a handler and a briefly blocked event loop, so a handler cut at its
# timeout has finished before the retry can be dispatched.
LEASE_MARGIN = 1.0


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of an EventService. Durations are in seconds."""

    prefix: str
    scheduling_interval: float
    scheduling_batch_size: int
    retry_attempts: int
    polling_timeout: float
    handler_timeout: float
    shutdown_grace: float
    enable_scheduling: bool
    retry_policy: RetryPolicy
    serializer: Serializer
    metrics: Metrics
    instrumentation: Instrumentation
    """Hooks around enqueue and handler calls (aioqueue.tracing)."""
    max_payload_bytes: int
    """Largest payload plus context (UTF-8 bytes) an enqueue accepts."""
    loop_blocking_threshold: float
    """Warn when the event loop stalls this long while a handler runs; 0 turns it off."""
    handler_threads: int
    """Most worker threads the service's sync (plain function) handlers use at once."""
    partitions: Mapping[str, int]
    """Event type wire name -> partition count, for the types that have more than one."""
    rate_limits: Mapping[str, RateLimit] = field(default_factory=dict)
    """Event type wire name -> the rate limit this service records for it, if any."""

    @property
    def lease_ms(self) -> int:
        """How long a delivered event is reserved before its pre-scheduled retry is due."""
        return math.ceil((self.handler_timeout + LEASE_MARGIN) * 1000)

    @property
    def ready_capacity(self) -> int:
        """Most envelopes a ready list holds; two batches keep consumers busy between ticks."""
        return 2 * self.scheduling_batch_size


@dataclass(frozen=True)
class ProducerConfig:
    """Settings of a SyncProducer: the part of a service's settings that writing events
    depends on, with the same meaning and defaults (see the builder)."""

    prefix: str
    serializer: Serializer
    metrics: Metrics
    """Receives `event_enqueued` after each enqueue."""
    instrumentation: Instrumentation
    """Its `enqueue_context` adds to the context of each event (aioqueue.tracing)."""
    max_payload_bytes: int
    partitions: Mapping[str, int]
    """Event type wire name -> partition count, for the types configured with one; any other
    type is written with the count the prefix's registry records (1 for a new type)."""
