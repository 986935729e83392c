"""Connecting through Redis Sentinel: the `redis+sentinel://` URL, the builder's `.sentinel()`,
the CLI and the HTTP server, with passwords on the servers and on the sentinels.

Failover itself is in test_sentinel_failover.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import anyio
import pytest
import redis.asyncio as redis
from redis.exceptions import AuthenticationError, ConnectionError, ResponseError

from aioqueue import ConfigurationError, EventService, FixedDelays
from aioqueue._transport.client import client_from_url, sync_client_from_url
from aioqueue._transport.sentinel import (
    SENTINEL_TIMEOUT,
    SentinelPrimary,
    SentinelSettings,
    SyncSentinelPrimary,
    parse_sentinel_url,
    sentinel_client,
    sentinel_settings,
    sync_sentinel_client,
)
from aioqueue.testing import EmbeddedSentinel, free_port
from tests.support.common import PaymentCheck, Recorder
from tests.support.ops import api_client, run_cli, serve
from tests.support.tls import Certificates, tls_capable_binary

DATA_PASSWORD = "data p@ss/word"  # characters a URL must escape
SENTINEL_PASSWORD = "sentinel-secret"

# -- the URL and the options, no server needed -------------------------------------------------


def test_a_sentinel_url_names_the_sentinels_the_primary_and_every_option() -> None:
    settings = parse_sentinel_url(
        "redis+sentinel://app:p%40ss@s1.example:26380,s2.example,[::1]:26381/mymaster/2"
        "?socket_connect_timeout=2&client_name=worker"
        "&sentinel_username=watcher&sentinel_password=s%3Dcret"
    )
    assert settings.sentinels == (("s1.example", 26380), ("s2.example", 26379), ("::1", 26381))
    assert settings.service_name == "mymaster"
    assert dict(settings.primary_options) == {
        "username": "app",
        "password": "p@ss",
        "db": 2,
        "socket_connect_timeout": 2.0,
        "client_name": "worker",
    }
    # A sentinel that does not answer within a second is skipped for the next one.
    assert dict(settings.sentinel_options) == {
        "username": "watcher",
        "password": "s=cret",
        "socket_timeout": SENTINEL_TIMEOUT,
        "socket_connect_timeout": SENTINEL_TIMEOUT,
    }
    assert "p@ss" not in repr(settings)
    assert "cret" not in repr(settings)


def test_rediss_reaches_the_sentinels_over_tls_too_with_the_primary_s_options() -> None:
    shared = parse_sentinel_url(
        "rediss+sentinel://h:1/m?ssl_ca_certs=/ca.crt&ssl_check_hostname=no"
    )
    assert shared.primary_options["ssl"] is True
    assert shared.primary_options["ssl_check_hostname"] is False
    for name in ("ssl", "ssl_ca_certs", "ssl_check_hostname"):
        assert shared.sentinel_options[name] == shared.primary_options[name]
    own = parse_sentinel_url(
        "rediss+sentinel://h:1/m?ssl_ca_certs=/ca.crt&sentinel_ssl_ca_certs=/sentinel-ca.crt"
    )
    assert own.sentinel_options["ssl_ca_certs"] == "/sentinel-ca.crt"
    plain_sentinels = parse_sentinel_url("rediss+sentinel://h:1/m?sentinel_ssl=false")
    assert plain_sentinels.sentinel_options["ssl"] is False
    assert "ssl_ca_certs" not in plain_sentinels.sentinel_options


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel://h:26379", "names the monitored primary"),
        ("redis+sentinel://h:26379/m/0/extra", "names the monitored primary"),
        ("redis+sentinel://h:port/m", "invalid port"),
        ("redis+sentinel://h:70000/m", "from 1 to 65535"),
        ("redis+sentinel:///m", "at least one sentinel"),
        ("redis+sentinel://h/m?pasword=x", "unknown connection option 'pasword'"),
        ("redis+sentinel://h/m?ssl_ca_certs=/ca.crt", "ssl_ca_certs needs ssl=True"),
        ("redis+sentinel://h/m?sentinel_ssl_ca_certs=/ca", "sentinel_ssl_ca_certs needs sentinel_"),
        ("redis+sentinel://h/m/zero", "invalid value for 'db'"),
    ],
)
def test_a_bad_sentinel_url_is_refused_saying_what_is_wrong(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_sentinel_url(url)


@pytest.mark.parametrize(
    ("sentinels", "service_name", "options", "problem"),
    [
        ([], "m", {}, "at least one sentinel"),
        ([("h", "26379")], "m", {}, "from 1 to 65535"),
        ([("h", 26379)], "", {}, "service_name must name"),
        ([("h", 26379)], "m", {"sentinel_pasword": "x"}, "unknown connection option"),
    ],
)
def test_the_builder_refuses_bad_sentinel_settings_at_build(
    sentinels: list[tuple[str, Any]], service_name: str, options: dict[str, Any], problem: str
) -> None:
    builder = EventService.builder().sentinel(sentinels, service_name=service_name, **options)
    with pytest.raises(ConfigurationError, match=f"invalid sentinel: .*{problem}"):
        builder.build()


def test_sentinel_options_split_between_the_primary_and_the_sentinels() -> None:
    settings = sentinel_settings(
        iter([("h", 1)]),
        "m",
        {"password": "a", "sentinel_password": "b", "sentinel_socket_timeout": 0.2},
    )
    assert dict(settings.primary_options) == {"password": "a"}
    assert settings.sentinel_options["password"] == "b"
    assert settings.sentinel_options["socket_timeout"] == 0.2


# -- a live group, with passwords ----------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded_group() -> Iterator[EmbeddedSentinel]:
    """A primary and a replica that require a password, and sentinels that require another."""
    with EmbeddedSentinel(password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD) as group:
        yield group


async def flushed(group: EmbeddedSentinel) -> None:
    async with redis.Redis.from_url(group.primary().url) as primary:
        await primary.flushall()


async def sentinel_connections(group: EmbeddedSentinel) -> int:
    """Clients connected to the sentinels, less the admin connection asking."""
    total = 0
    for host, port in group.addresses:
        async with redis.Redis(host=host, port=port, password=SENTINEL_PASSWORD) as admin:
            total += int((await admin.info("clients"))["connected_clients"]) - 1
    return total


def fast(builder: Any) -> EventService:
    service: EventService = (
        builder.scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(1.0)
        .shutdown_grace(2.0)
        .retry_policy(FixedDelays([0.05]))
        .build()
    )
    return service


@pytest.mark.parametrize("form", ["builder", "url"])
async def test_a_service_connects_through_the_sentinels_and_closes_what_it_opened(
    guarded_group: EmbeddedSentinel, form: str
) -> None:
    """Both forms deliver an event through the primary the sentinels name, with the servers'
    password and the sentinels' own; closing the service also closes its connections to
    the sentinels (redis-py's Sentinel object is not closed with the client it made)."""
    group = guarded_group
    await flushed(group)
    before = await sentinel_connections(group)
    builder = EventService.builder()
    if form == "builder":
        builder = builder.sentinel(
            group.addresses,
            service_name=group.service_name,
            password=DATA_PASSWORD,
            sentinel_password=SENTINEL_PASSWORD,
        )
    else:
        builder = builder.url(group.url)
    recorder = Recorder()
    async with fast(builder) as service:
        service.add_handler(PaymentCheck, recorder)
        assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
        [delivery] = await recorder.wait_for(1)
        assert await sentinel_connections(group) > before
    assert delivery.event == PaymentCheck(id="p-1", order_id=1)
    assert await sentinel_connections(group) == before


async def test_a_wrong_password_for_the_sentinels_or_the_primary_is_refused(
    guarded_group: EmbeddedSentinel,
) -> None:
    group = guarded_group
    without_sentinel_password = group.url.partition("?")[0]
    async with client_from_url(without_sentinel_password) as client:
        assert isinstance(client, SentinelPrimary)
        # Every sentinel refuses the question, so no primary is found; each is asked once
        # (redis-py's default retries took 11 s to say so with three sentinels).
        started = time.monotonic()
        with pytest.raises(ConnectionError, match="No master found"):
            await client.ping()
        assert time.monotonic() - started < 5
    wrong_data_password = group.url.replace("data%20p", "data%20q", 1)
    assert wrong_data_password != group.url
    async with client_from_url(wrong_data_password) as client:
        with pytest.raises((AuthenticationError, ResponseError)):
            await client.ping()


async def test_a_blocking_client_finds_the_primary_and_closes_what_it_opened(
    guarded_group: EmbeddedSentinel,
) -> None:
    """The blocking client (for producers without an event loop, and Spark tasks) takes the
    same URL, and closing it closes its connections to the sentinels too."""
    group = guarded_group
    before = await sentinel_connections(group)
    client = sync_client_from_url(group.url)
    assert isinstance(client, SyncSentinelPrimary)
    try:
        assert client.set("sync-probe", "1")
        assert await sentinel_connections(group) > before
        assert client.connection_pool.connection_kwargs["password"] == DATA_PASSWORD
    finally:
        client.close()
    assert await sentinel_connections(group) == before
    async with redis.Redis.from_url(group.primary().url) as primary:
        assert await primary.get("sync-probe") == b"1"


def sentinels_past_a_refusing_one(group: EmbeddedSentinel) -> SentinelSettings:
    """The group's sentinels behind an address that refuses connections: every lookup asks
    past the head of the list, where concurrent lookups reorder it."""
    refusing = (group.host, free_port())
    return sentinel_settings(
        [refusing, *group.addresses],
        group.service_name,
        {"password": DATA_PASSWORD, "sentinel_password": SENTINEL_PASSWORD},
    )


async def test_concurrent_primary_lookups_keep_every_sentinel_and_close_them_all(
    guarded_group: EmbeddedSentinel,
) -> None:
    """Lookups at once (as after a failover, when every connection reconnects) find the
    primary, and leave each sentinel in the list once: redis-py's own Sentinel can swap by a
    stale index, drop a sentinel for good and leave its connections open. Closing the client
    closes every sentinel's connections."""
    group = guarded_group
    before = await sentinel_connections(group)
    client = sentinel_client(sentinels_past_a_refusing_one(group))
    sentinels = client._sentinel
    assert sentinels is not None
    primary = group.primary()
    try:
        addresses = await asyncio.gather(
            *(sentinels.discover_master(group.service_name) for _ in range(30))
        )
        assert set(addresses) == {(primary.host, primary.port)}
        assert sorted(map(id, sentinels.sentinels)) == sorted(map(id, sentinels.every_client))
        assert await sentinel_connections(group) > before
    finally:
        await client.aclose()
    assert await sentinel_connections(group) == before


async def test_concurrent_lookups_from_threads_keep_every_sentinel(
    guarded_group: EmbeddedSentinel,
) -> None:
    """The blocking client's lookups from several threads (a SyncProducer's) as well."""
    group = guarded_group
    before = await sentinel_connections(group)
    client = sync_sentinel_client(sentinels_past_a_refusing_one(group))
    sentinels = client._sentinel
    assert sentinels is not None
    primary = group.primary()
    try:

        def look_up() -> tuple[str, int]:
            assert sentinels is not None
            return sentinels.discover_master(group.service_name)

        with ThreadPoolExecutor(8) as pool:
            addresses = await anyio.to_thread.run_sync(
                lambda: list(pool.map(lambda _: look_up(), range(40)))
            )
        assert set(addresses) == {(primary.host, primary.port)}
        assert sorted(map(id, sentinels.sentinels)) == sorted(map(id, sentinels.every_client))
    finally:
        client.close()
    assert await sentinel_connections(group) == before


async def test_the_cli_and_the_http_server_take_a_sentinel_url(
    guarded_group: EmbeddedSentinel,
) -> None:
    group = guarded_group
    await flushed(group)
    env = {"AIOQUEUE_URL": group.url}
    # Nothing declared the type on this fresh group: the HTTP server is its first producer.
    with serve(group.url, "--allow-undeclared-types") as app:
        async with api_client(app.base_url) as http:
            body = {
                "type": "PaymentCheck",
                "id": "p-http",
                "delay": 3600,
                "payload": {"order_id": 7},
            }
            assert (await http.post("/events", json=body)).status_code == 201
            [stats] = (await http.get("/stats")).json()["types"]
    assert (stats["type"], stats["pending"]) == ("PaymentCheck", 1)
    listed = await run_cli("events", "list", "PaymentCheck", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [event["id"] for event in listed.json()["events"]] == ["p-http"]
    # Error messages name the URL without its passwords.
    unreachable = await run_cli("stats", env={"AIOQUEUE_URL": "redis+sentinel://:pw@127.0.0.1:1/m"})
    assert unreachable.returncode == 1
    assert "cannot reach redis+sentinel://:***@127.0.0.1:1/m" in unreachable.stderr


async def test_a_service_reaches_primary_and_sentinels_over_tls_only(
    certificates: Certificates,
) -> None:
    """`rediss+sentinel://` with the CA: the sentinels and the primary speak only TLS, and an
    event goes the whole way; a client that trusts another CA finds no primary."""
    files = certificates.files
    binary = tls_capable_binary(files)
    group = EmbeddedSentinel(tls=files, sentinel_password=SENTINEL_PASSWORD, binary=binary)
    await anyio.to_thread.run_sync(group.start)
    try:
        assert group.url.startswith("rediss+sentinel://")
        recorder = Recorder()
        async with fast(EventService.builder().url(group.url)) as service:
            service.add_handler(PaymentCheck, recorder)
            assert await service.enqueue(PaymentCheck(id="p-tls", order_id=1), 0)
            [delivery] = await recorder.wait_for(1)
        assert delivery.event.id == "p-tls"
        stranger = group.url.replace(quote(str(files.ca), safe=""), str(certificates.other_ca))
        async with client_from_url(stranger) as client:
            with pytest.raises(ConnectionError, match="No master found"):
                await client.ping()
    finally:
        await anyio.to_thread.run_sync(group.stop)


@pytest.mark.backends("sentinel")
async def test_the_sentinel_backend_reaches_a_replicated_primary_through_its_sentinels(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The suite's "sentinel" backend (tests/conftest.py) is what its name says: the tests
    marked with it talk to a primary with a replica, found through the sentinels."""
    assert redis_url.startswith("redis+sentinel://")
    assert isinstance(redis_client, SentinelPrimary)
    replication = await redis_client.info("replication")
    assert replication["role"] == "master"
    assert replication["connected_slaves"] == 1
