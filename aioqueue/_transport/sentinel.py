"""Redis Sentinel: where a `redis+sentinel://` URL points, and a client of the primary that
follows it through failovers.

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service_name[/db][?options]
    rediss+sentinel://...    TLS to the primary, its replicas and the sentinels

The user and password are the primary's (and its replicas'). Query options are redis-py's
connection options (`socket_connect_timeout=2`, `ssl_ca_certs=/path/ca.crt`, ...); with a
`sentinel_` prefix they are the sentinels' own (`sentinel_password=...`,
`sentinel_username=...`, `sentinel_ssl_ca_certs=...`). Under TLS the sentinels get the
primary's TLS options unless given their own. A sentinel without a port listens on 26379.

redis-py does the failover work: each new connection asks the sentinels for the primary's
address, and a connection to a primary that became a replica fails with a ConnectionError
(READONLY) and reconnects. The service's loops already back off and retry on connection
errors, so after a failover they reach the promoted primary without a restart.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
import redis.sentinel
from redis.asyncio import Redis
from redis.asyncio.connection import URL_QUERY_ARGUMENT_PARSERS, to_bool
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry as SyncRetry

__all__ = [
    "DEFAULT_SENTINEL_PORT",
    "SENTINEL_SCHEMES",
    "SentinelPrimary",
    "SentinelSettings",
    "SyncSentinelPrimary",
    "is_sentinel_url",
    "parse_sentinel_url",
    "sentinel_client",
    "sentinel_settings",
    "sync_sentinel_client",
]

SENTINEL_SCHEMES = ("redis+sentinel://", "rediss+sentinel://")
DEFAULT_SENTINEL_PORT = 26379
# Seconds a sentinel has to accept a connection and to answer. It answers from memory, so a
# sentinel that takes longer is gone or frozen, and the next one is asked; without a limit a
# frozen sentinel (SIGSTOP, a hung VM) would hold every reconnection of the service.
SENTINEL_TIMEOUT = 1.0
_SENTINEL_PREFIX = "sentinel_"
# What `Redis(...)` takes, less what names the server (the sentinels name the primary).
_OPTIONS = frozenset(inspect.signature(Redis.__init__).parameters) - {
    "self",
    "host",
    "port",
    "connection_pool",
    "unix_socket_path",
    "single_connection_client",
    "auto_close_connection_pool",
}


@dataclass(frozen=True)
class SentinelSettings:
    """Where the sentinels are, which primary to ask them for, and how to connect to both."""

    sentinels: tuple[tuple[str, int], ...]
    service_name: str
    primary_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """redis-py connection options for the primary."""
    sentinel_options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """redis-py connection options for the sentinels."""

    def __repr__(self) -> str:
        # No options: they may hold passwords.
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"SentinelSettings({hosts}/{self.service_name})"


def is_sentinel_url(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEMES)


def sentinel_settings(
    sentinels: Iterable[tuple[str, int]], service_name: str, options: Mapping[str, Any]
) -> SentinelSettings:
    """Checks and splits the options of `EventServiceBuilder.sentinel`: names with the
    `sentinel_` prefix are the sentinels', the others the primary's. Raises ValueError."""
    addresses = tuple((str(host), _port(port)) for host, port in sentinels)
    if not addresses:
        raise ValueError("give at least one sentinel as (host, port)")
    if not isinstance(service_name, str) or not service_name:
        raise ValueError(f"service_name must name the monitored primary, got {service_name!r}")
    primary: dict[str, Any] = {}
    sentinel: dict[str, Any] = {}
    for name, value in options.items():
        base = name.removeprefix(_SENTINEL_PREFIX)
        if base not in _OPTIONS:
            raise ValueError(f"unknown connection option {name!r}")
        (sentinel if name.startswith(_SENTINEL_PREFIX) else primary)[base] = value
    if primary.get("ssl") and "ssl" not in sentinel:
        # One deployment, one CA: sentinels behind TLS take the primary's TLS settings
        # (those they are not given their own of).
        for name, value in primary.items():
            if name.startswith("ssl"):
                sentinel.setdefault(name, value)
    for side, chosen in (("", primary), (_SENTINEL_PREFIX, sentinel)):
        tls_options = [name for name in chosen if name.startswith("ssl_")]
        if tls_options and not chosen.get("ssl"):
            # A plain connection would refuse them only when it first connects.
            raise ValueError(f"{side}{tls_options[0]} needs {side}ssl=True (or rediss+sentinel)")
    for name in ("socket_timeout", "socket_connect_timeout"):
        sentinel.setdefault(name, SENTINEL_TIMEOUT)
    return SentinelSettings(
        addresses, service_name, MappingProxyType(primary), MappingProxyType(sentinel)
    )


def parse_sentinel_url(url: str) -> SentinelSettings:
    """The settings a `redis+sentinel://` or `rediss+sentinel://` URL describes (see the
    module's docstring); raises ValueError."""
    if not is_sentinel_url(url):
        raise ValueError(f"a Sentinel URL starts with {' or '.join(SENTINEL_SCHEMES)}")
    parts = urlsplit(url)
    credentials, _, hosts = parts.netloc.rpartition("@")
    path = [unquote(piece) for piece in parts.path.split("/") if piece]
    if not path or len(path) > 2:
        raise ValueError(
            "a Sentinel URL names the monitored primary, and may add a database: "
            "redis+sentinel://host:26379/mymaster[/0]"
        )
    options: dict[str, Any] = {}
    if parts.scheme == "rediss+sentinel":
        options["ssl"] = True
    if credentials:
        username, has_password, password = credentials.partition(":")
        if username:
            options["username"] = unquote(username)
        if has_password and password:
            options["password"] = unquote(password)
    if len(path) == 2:
        options["db"] = _converted("db", path[1])
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        options[name] = _converted(name, value)
    return sentinel_settings(
        [_address(host) for host in hosts.split(",") if host], path[0], options
    )


class _Sentinels(Sentinel):
    """redis-py's Sentinel, asking for the primary one lookup at a time.

    Its discover_master moves the sentinel that answered to the front of its list, by the
    index where it found it before awaiting the answer. Two lookups at once (after a failover
    every connection of a service reconnects together, and under load a slow sentinel sends
    lookups on to the next) can swap by an index the other lookup has made stale: one
    sentinel is then in the list twice and another not at all. That one is never asked
    again, so the service can no longer find the primary through it, and its connections are
    never closed, as closing walks the list. redis-py 8.1 has no fix (its pull request 4331
    reworks that order). A sentinel answers from memory, so lookups in turn cost a round trip
    each; and closing closes every sentinel's client, whatever the list holds.
    """

    def __init__(self, sentinels: list[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(sentinels, **kwargs)  # type: ignore[no-untyped-call]
        self.every_client: tuple[Redis, ...] = tuple(self.sentinels)
        self._lookup = asyncio.Lock()

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        async with self._lookup:
            address: tuple[str, int] = await super().discover_master(service_name)
            return address

    async def aclose(self) -> None:
        self.sentinels = list(self.every_client)
        await super().aclose()


class _SyncSentinels(redis.sentinel.Sentinel):
    """The blocking _Sentinels: a SyncProducer's threads look the primary up in turn."""

    def __init__(self, sentinels: list[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(sentinels, **kwargs)  # type: ignore[no-untyped-call]
        self.every_client: tuple[redis.Redis, ...] = tuple(self.sentinels)
        self._lookup = threading.Lock()

    def discover_master(self, service_name: str) -> tuple[str, int]:
        with self._lookup:
            address: tuple[str, int] = super().discover_master(service_name)  # type: ignore[no-untyped-call]
            return address


class SentinelPrimary(Redis):
    """A client of the primary the sentinels name, found again after every failover.

    Closing it also closes its connections to the sentinels.
    """

    _sentinel: _Sentinels | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            if self._sentinel is not None:
                await self._sentinel.aclose()


def sentinel_client(settings: SentinelSettings, **defaults: Any) -> SentinelPrimary:
    """A client of the primary; `defaults` are options the settings may override."""
    sentinel = _Sentinels(
        list(settings.sentinels),
        # Asking the next sentinel is the retry: redis-py's default would try each one 4
        # times with backoff, so a refused password took 11 s to report with three sentinels.
        sentinel_kwargs={"retry": Retry(NoBackoff(), 0), **settings.sentinel_options},
    )
    client: SentinelPrimary = sentinel.master_for(
        settings.service_name,
        redis_class=SentinelPrimary,
        **{**defaults, **settings.primary_options},
    )
    client._sentinel = sentinel
    return client


class SyncSentinelPrimary(redis.Redis):
    """The blocking SentinelPrimary (for producers without an event loop)."""

    _sentinel: _SyncSentinels | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._sentinel is not None:
                for sentinel in self._sentinel.every_client:
                    sentinel.close()


def sync_sentinel_client(settings: SentinelSettings, **defaults: Any) -> SyncSentinelPrimary:
    """A blocking client of the primary, as sentinel_client makes an asyncio one."""
    sentinel = _SyncSentinels(
        list(settings.sentinels),
        sentinel_kwargs={"retry": SyncRetry(NoBackoff(), 0), **settings.sentinel_options},
    )
    client: SyncSentinelPrimary = sentinel.master_for(  # type: ignore[no-untyped-call]
        settings.service_name,
        redis_class=SyncSentinelPrimary,
        **{**defaults, **settings.primary_options},
    )
    client._sentinel = sentinel
    return client


def _port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(f"a sentinel's port must be an integer from 1 to 65535, got {port!r}")
    return port


def _address(text: str) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port`."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.partition(":")
    if not host:
        raise ValueError(f"a sentinel address needs a host, got {text!r}")
    if not port:
        return unquote(host), DEFAULT_SENTINEL_PORT
    if not port.isdigit():
        raise ValueError(f"invalid port in sentinel address {text!r}")
    return unquote(host), _port(int(port))


def _converted(name: str, value: str) -> Any:
    """A query value as redis-py's own URL parsing converts it (numbers, booleans)."""
    base = name.removeprefix(_SENTINEL_PREFIX)
    convert = to_bool if base == "ssl" else URL_QUERY_ARGUMENT_PARSERS.get(base)
    if convert is None:
        return value
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"invalid value for {name!r} in the URL: {value!r}") from exc
