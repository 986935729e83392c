"""The service's settings, validated and frozen by the builder."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .checks import int_in_range
from .durations import Duration, to_seconds
from .errors import ConfigurationError
from .instrumentation import Instrumentation
from .metrics import Metrics
from .rate_limit import RateLimit
from .retry import RetryPolicy
from .serializer import Serializer

__all__ = ["Durability", "ProducerConfig", "ServiceConfig"]

# WAIT takes at most this many replicas in any deployment anyone runs; a larger number is a
# unit mistake (milliseconds given as replicas), and would make every enqueue time out.
MAX_DURABLE_REPLICAS = 100
# A write waits this long at most for its confirmation: beyond a minute, a caller is better
# told that the replicas are not keeping up.
MAX_DURABILITY_TIMEOUT = 60.0


@dataclass(frozen=True)
class Durability:
    """How an enqueue is confirmed before it returns: by `replicas` replicas (`WAIT`), and by
    the primary's own AOF where it has one (`WAITAOF`), each within `timeout` seconds."""

    replicas: int
    timeout: float

    @classmethod
    def of(cls, replicas: int, timeout: Duration) -> Durability:
        """Checks the values as the builder takes them; raises ConfigurationError."""
        int_in_range("durability replicas", replicas, 1, MAX_DURABLE_REPLICAS)
        try:
            seconds = to_seconds(timeout, "durability timeout")
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"invalid durability timeout: {exc}") from exc
        if not 0.001 <= seconds <= MAX_DURABILITY_TIMEOUT:
            raise ConfigurationError(
                f"durability timeout must be between 1 ms and {MAX_DURABILITY_TIMEOUT:g} s, "
                f"got {timeout!r}"
            )
        return cls(replicas, seconds)

    @classmethod
    def checked(cls, durability: Durability | None) -> Durability | None:
        """A setting passed as a value (SyncProducer, Spark), checked as `of` checks the
        builder's; raises ConfigurationError."""
        if durability is None:
            return None
        if not isinstance(durability, Durability):
            raise ConfigurationError(
                f"durability must be an aioqueue.Durability, not {type(durability).__name__}"
            )
        return cls.of(durability.replicas, durability.timeout)

    @property
    def timeout_ms(self) -> int:
        """The timeout as WAIT and WAITAOF take it (whole milliseconds, at least 1: 0 would
        mean waiting forever)."""
        return max(1, round(self.timeout * 1000))


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of an EventService, as the builder checked them; durations in seconds. Each
    setting's meaning, default and range are declared once, on EventServiceBuilder, under
    the same name; the builder test holds the two together."""

    prefix: str
    scheduling_interval: float
    scheduling_batch_size: int
    retry_attempts: int
    polling_timeout: float
    handler_timeout: float
    lease: float
    heartbeat: float
    shutdown_grace: float
    health_port: int | None
    health_host: str
    max_payload_bytes: int
    loop_blocking_threshold: float
    handler_threads: int
    retry_policy: RetryPolicy
    serializer: Serializer
    metrics: Metrics
    instrumentation: Instrumentation
    enable_scheduling: bool
    partitions: Mapping[str, int]
    """Event type wire name -> partition count, for the types that have more than one."""
    rate_limits: Mapping[str, RateLimit]
    """Event type wire name -> the rate limit this service records for it, if any."""
    durability: Durability | None
    """How enqueues are confirmed before they return; None: as soon as the primary has them."""

    @property
    def lease_ms(self) -> int:
        """The lease in whole milliseconds, as the scripts take it."""
        return math.ceil(self.lease * 1000)


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
    durability: Durability | None = None
    """When set, each enqueue returns only once replicas confirmed it (see the builder's
    `durability`)."""
