"""EventService.builder(): collects settings, then validates and freezes them in build()."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

from aioqueue._model.checks import checked, int_in_range, refuse_partitioned_serial_key
from aioqueue._model.config import Durability, ServiceConfig
from aioqueue._model.durations import Duration, to_seconds
from aioqueue._model.errors import ConfigurationError
from aioqueue._model.event import Event, event_type_name
from aioqueue._model.rate_limit import RateLimit
from aioqueue._model.retry import ExponentialBackoff, RetryPolicy
from aioqueue._model.settings import (
    Setting,
    any_value,
    host,
    integer,
    port,
    seconds,
    settings_of,
)
from aioqueue._producing.settings import (
    INSTRUMENTATION,
    MAX_PAYLOAD_BYTES,
    METRICS,
    PREFIX,
    SERIALIZER,
)
from aioqueue._transport.call_gate import CONNECTIONS_NEEDED, check_room
from aioqueue._transport.client import (
    RedisClient,
    service_client_from_url,
    service_client_of_sentinels,
)
from aioqueue._transport.reaching import display_url
from aioqueue._transport.sentinel import sentinel_settings
from aioqueue._wire.keys import MAX_PARTITIONS

from .runtime import Runtime

# The builder and the service stay a pair (`EventService.builder()` is the one way in, as in
# the Java library this API follows), but only the service imports the builder at run time:
# the builder is handed the class to build (`_ServiceFactory`) and names EventService for the
# type checker alone, so the import graph stays a downward line from the service.
if TYPE_CHECKING:
    from .service import EventService

__all__ = ["EventServiceBuilder"]

# The threads of sync handlers, all handlers together. As many as anyio's own default pool:
# sync handlers mostly wait on a database, an HTTP API or SMTP (waiting releases the GIL), so
# tens of threads overlap well, while a backlog cannot start hundreds of threads each holding
# a connection. Raise it when the sync handlers' parallelism adds up to more.
DEFAULT_HANDLER_THREADS = 40


_ServiceFactory: TypeAlias = "Callable[[Runtime], EventService]"
"""The service class: made from the Runtime the builder set up (settings, connection)."""


class EventServiceBuilder:
    """Collects the settings of an EventService; `build()` checks them all at once.

    Get one from `EventService.builder()`. Each setting listed below is set by calling it
    with its value, `builder.lease(timedelta(seconds=10))`, and returns the builder, so calls
    chain; every duration takes a `timedelta` or seconds. A value out of range fails at
    `build()` with ConfigurationError naming the setting and the allowed range.
    """

    prefix = PREFIX
    """First part of every key (default "aioqueue"; 1-64 letters, digits and `_.:-`);
    services with different prefixes never see each other's events."""

    scheduling_interval = Setting[Duration, float](0.5, seconds(0.001, 3600))
    """How often the service looks at every queue it dispatches and consumes, in one
    pipelined call, for work no wake-up announced (default 0.5 s). An enqueue that brings the
    earliest due time forward wakes the dispatchers at once, so this bounds how late an event
    enqueued by another process without a wake-up can be."""

    scheduling_batch_size = Setting(100, integer(1, 10_000))
    """Most due events one dispatcher script call moves (default 100); a ready list holds at
    most two batches. A call moves about three claims of the handler's parallelism (at least
    16) when that is fewer, so that the server moves events while the handlers run instead
    of the handlers waiting for one long call."""

    retry_attempts = Setting(10, integer(1, 1_000_000))
    """Most times an event is handed to a handler before it goes to the dead letters
    (default 10)."""

    polling_timeout = Setting[Duration, float](1.0, seconds(0.01, 3600))
    """How often a paused type's consumer asks again whether the pause is over (default
    1 s)."""

    handler_timeout = Setting[Duration, float](30.0, seconds(0.001, 7 * 24 * 3600))
    """Handlers running longer are cut and count as failed (default 30 s); the worker
    enforces it, and a retry never starts while the handler runs."""

    lease = Setting[Duration, float](5.0, seconds(0.1, 3600))
    """How long an event a worker holds stays its own without a renewal (default 5 s, 0.1 s
    to 1 hour). A live worker renews everything it holds every third of this, in one call
    per queue, so a handler may run as long as its handler timeout; when a worker dies or
    loses Redis, its events are due again within this."""

    heartbeat = Setting[Duration, float](5.0, seconds(0.05, 300))
    """How often a service with handlers writes its record in the worker registry (default
    5 s): `aioqueue workers` lists it, and a worker that dies drops out of the list three
    heartbeats after its last. One script call per heartbeat, whatever the service handles."""

    shutdown_grace = Setting[Duration, float](10.0, seconds(0, 3600))
    """How long leaving `async with` waits for running handlers before cancelling them
    (default 10 s); a cancelled handler's event is given back, due now."""

    health_port = Setting[int | None, int | None](None, port)
    """Serves `GET /livez` and `GET /readyz` (200 or 503 with a JSON reason) and `GET
    /metrics` on this port while the service runs, from a thread of its own, for Kubernetes'
    probes (default None: no health port; 0 takes any free port). See the deploy guide."""

    health_host = Setting("0.0.0.0", host)
    """The address the health port listens on (default "0.0.0.0": every interface, as a
    probe from outside a container needs)."""

    max_payload_bytes = MAX_PAYLOAD_BYTES
    """Largest payload plus context an enqueue accepts (default 1 MiB); larger ones raise
    PayloadTooLargeError before anything is written."""

    loop_blocking_threshold = Setting[Duration, float](0.5, seconds(0, 3600))
    """Warn, naming the handler, when a handler blocks the event loop this long (default
    0.5 s; 0 turns the check off)."""

    handler_threads = Setting(DEFAULT_HANDLER_THREADS, integer(1, 10_000))
    """Most worker threads the sync (plain `def`) handlers of this service use at once, all
    handlers together (default 40). Each sync handler also stays within its own
    `parallelism`."""

    retry_policy = Setting[RetryPolicy, RetryPolicy](ExponentialBackoff(), any_value)
    """The delay before each retry (default `ExponentialBackoff(base=1, cap=3600,
    jitter=True)`); `FixedDelays([...])`, or any object with `delay(attempt) -> seconds`."""

    serializer = SERIALIZER
    """How payloads are encoded and decoded (default `JsonSerializer()`: typed JSON for
    dataclasses, msgspec Structs and pydantic models). Other producers and the operator
    tools read JSON, so replace it only with a serializer that writes JSON too."""

    metrics = METRICS
    """Receives a report of every enqueue, dispatch and handler call (default
    `NoMetrics()`); `aioqueue.prometheus.PrometheusMetrics()` exports them."""

    instrumentation = INSTRUMENTATION
    """Hooks around enqueue and handler calls (default `NoInstrumentation()`: none), e.g.
    `aioqueue.tracing.OpenTelemetryTracing()`, a W3C trace context that travels with each
    event."""

    def __init__(self, factory: _ServiceFactory) -> None:
        self._factory = factory
        self._values: dict[str, Any] = {}
        """What each setting (see the class attributes) was set to, by name."""
        self._client: RedisClient | None = None
        self._url: str | None = None
        # (sentinels, service_name, options), checked at build()
        self._sentinels: tuple[tuple[Any, ...], str, dict[str, Any]] | None = None
        self._enable_scheduling = True
        self._partitions: dict[str, int] = {}
        self._rate_limits: dict[str, tuple[int, Duration]] = {}
        self._durability: tuple[int, Duration] | None = None

    def client(self, client: RedisClient) -> EventServiceBuilder:
        """Uses a client you own (`redis.asyncio.Redis` or `RedisCluster`): the service
        never closes it. The service's calls each have their own 5 s deadline."""
        self._client, self._url, self._sentinels = client, None, None
        return self

    def url(self, url: str) -> EventServiceBuilder:
        """Connects to `url` (`redis://`, `rediss://`, `redis+cluster://`,
        `redis+sentinel://host:26379,host2:26379/mymaster`); the service closes this client
        when it shuts down. Query parameters are redis-py's (`?ssl_ca_certs=...`,
        `?socket_timeout=3`)."""
        self._url, self._client, self._sentinels = url, None, None
        return self

    def sentinel(
        self, sentinels: Iterable[tuple[str, int]], *, service_name: str, **options: Any
    ) -> EventServiceBuilder:
        """Connects to the primary that the sentinels at `sentinels` ((host, port) pairs)
        monitor as `service_name`, and to the promoted one after a failover; the service
        closes this client when it shuts down.

        `options` are redis-py connection options of the primary (`password=`, `username=`,
        `db=`, `ssl=True`, `ssl_ca_certs=`, ...); with a `sentinel_` prefix, the sentinels'
        own (`sentinel_password=`, `sentinel_username=`). With `ssl=True` the sentinels are
        reached over TLS too, with the primary's TLS options unless given their own.
        """
        # Checked at build(), like every setting; the tuple keeps an iterator for a rebuild.
        self._sentinels = (tuple(sentinels), service_name, dict(options))
        self._url, self._client = None, None
        return self

    def enable_scheduling(self, enabled: bool = True) -> EventServiceBuilder:
        """False: this service runs no dispatcher (it only produces, or only consumes)."""
        self._enable_scheduling = enabled
        return self

    def partitions(self, event_class: type[Event], partitions: int) -> EventServiceBuilder:
        """Spreads one event type over `partitions` hash tags (Redis Cluster slots).

        An event's partition follows from its id, so dedupe, replace and cancel by id keep
        working. Every service and producer of the type must use the same count; change it
        only on an empty queue.
        """
        refuse_partitioned_serial_key(event_class, partitions)
        self._partitions[event_type_name(event_class)] = partitions
        return self

    def rate_limit(
        self, event_class: type[Event], limit: int, *, per: Duration
    ) -> EventServiceBuilder:
        """At most `limit` handler calls of the type start in any window of `per`, summed
        over every service of the prefix (enforced inside the claim script, on the server's
        clock). The first service to start a handler with a limit records it in Redis; a
        service configured otherwise logs the difference and follows the recorded one
        (`aioqueue rate-limit TYPE` changes it). Not for partitioned types."""
        self._rate_limits[event_type_name(event_class)] = (limit, per)
        return self

    def durability(
        self, replicas: int = 1, timeout: Duration = timedelta(milliseconds=500)
    ) -> EventServiceBuilder:
        """`enqueue` and `enqueue_many` return only once `replicas` replicas have the events
        (`WAIT`), and the primary's AOF too where it has one (`WAITAOF`, Redis 7.2+ and
        Valkey), each within `timeout`; otherwise they raise DurabilityError: the events may
        exist, and enqueueing them again is safe. One confirmation per script call batch
        (per node on a cluster), not per event. Off by default: an enqueue returns once the
        primary has the events, and a failover can lose the last ones (see the guarantees)."""
        self._durability = (replicas, timeout)
        return self

    def build(self) -> EventService:
        """Validates every setting and returns the service; raises ConfigurationError."""
        declared = {setting.name: setting.value(self) for setting in settings_of(type(self))}
        config = ServiceConfig(
            **declared,
            enable_scheduling=bool(self._enable_scheduling),
            partitions=MappingProxyType(
                {
                    event_type: int_in_range(
                        f"partitions of {event_type}", count, 1, MAX_PARTITIONS
                    )
                    for event_type, count in self._partitions.items()
                }
            ),
            rate_limits=MappingProxyType(self._checked_rate_limits()),
            durability=None if self._durability is None else Durability.of(*self._durability),
        )
        if self._client is not None:
            check_room(self._client)
            return self._factory(Runtime(config, self._client, owns_client=False))
        if self._sentinels is not None:
            settings = checked(lambda s: sentinel_settings(*s), self._sentinels, "sentinel")
            client = service_client_of_sentinels(settings, CONNECTIONS_NEEDED)
            address = None  # the client names its sentinels and group
        elif self._url is not None:
            url = self._url
            client = checked(lambda u: service_client_from_url(u, CONNECTIONS_NEEDED), url, "url")
            address = display_url(url)
        else:
            raise ConfigurationError(
                "set a Redis connection with .client(...), .url(...) or .sentinel(...)"
            )
        check_room(client)  # a URL's own max_connections wins over the service's
        return self._factory(Runtime(config, client, owns_client=True, address=address))

    def _checked_rate_limits(self) -> dict[str, RateLimit]:
        limits = {}
        for event_type, (limit, per) in self._rate_limits.items():
            name = f"rate limit of {event_type}"
            if self._partitions.get(event_type, 1) > 1:
                raise ConfigurationError(
                    f"{name}: a partitioned type cannot be rate limited (each partition would "
                    "count its own starts)"
                )
            label = f"{name} per"
            seconds = checked(functools.partial(to_seconds, name=label), per, label)
            if not 0.001 <= seconds <= 24 * 3600:
                raise ConfigurationError(f"{name}: per must be 1 ms to 1 day, got {per!r}")
            count = int_in_range(f"{name} limit", limit, 1, 1_000_000)
            limits[event_type] = RateLimit(count, round(seconds * 1000))
        return limits
