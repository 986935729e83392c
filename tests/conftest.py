"""Fixtures that start real servers on free ports and clean up what they made.

`redis_url`, `redis_client` and `service_builder` serve one of two backends, chosen by the
`redis_backend` fixture: the session's standalone server ("standalone"), or the session's
3-master Redis Cluster ("cluster"). A test runs on the standalone server unless it (or its
module) is marked `@pytest.mark.backends("standalone", "cluster")`, which runs it once per
backend, with test ids ending in [standalone] and [cluster].
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from aioqueue import EventService, EventServiceBuilder, FixedDelays
from aioqueue._engine.client import RedisClient, client_from_url
from aioqueue._engine.scripts import LuaScript
from aioqueue._engine.steps import Steps
from aioqueue.testing import EmbeddedCluster, EmbeddedServer

ServerFactory = Callable[..., EmbeddedServer]

BACKENDS = ("standalone", "cluster")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'backends(*names): run the test once per named backend, of "standalone" and '
        '"cluster" (unmarked: "standalone" only)',
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes `redis_backend` for tests marked with `backends(...)`."""
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is None or "redis_backend" not in metafunc.fixturenames:
        return
    if not marker.args or not set(marker.args) <= set(BACKENDS):
        raise pytest.UsageError(f"backends() takes names from {BACKENDS}, got {marker.args}")
    metafunc.parametrize("redis_backend", marker.args, indirect=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedServer]:
    """One server shared by the whole session."""
    with EmbeddedServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[EmbeddedCluster]:
    """One 3-master cluster (no replicas) shared by the whole session, started on first use."""
    with EmbeddedCluster(masters=3) as cluster:
        yield cluster


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    """Which server this run of the test uses: "standalone" (the default) or "cluster"."""
    backend: str = getattr(request, "param", "standalone")
    return backend


@pytest.fixture
def redis_url(redis_backend: str, request: pytest.FixtureRequest) -> str:
    """The session server's `redis://` URL, or the session cluster's `redis+cluster://` one."""
    if redis_backend == "cluster":
        cluster: EmbeddedCluster = request.getfixturevalue("redis_cluster")
        return cluster.url
    server: EmbeddedServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[RedisClient]:
    """A client of the session server or cluster, whose data is flushed before the test."""
    client = client_from_url(redis_url)
    if isinstance(client, RedisCluster):
        # Concurrent first commands on a cluster client that has not loaded its slot map
        # yet can run twice: load it before the test starts any.
        await client.initialize()
        await client.flushall(target_nodes=RedisCluster.PRIMARIES)
    else:
        await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture
def server_factory() -> Iterator[ServerFactory]:
    """Start servers of their own (e.g. `appendonly=True`); all are stopped at teardown."""
    servers: list[EmbeddedServer] = []

    def make(**kwargs: Any) -> EmbeddedServer:
        server = EmbeddedServer(**kwargs)
        # Registered before start so that a failed start still gets its directory removed.
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def service_builder(redis_client: RedisClient) -> Callable[[], EventServiceBuilder]:
    """Builders on the (flushed) session server or cluster with settings that keep tests fast."""

    def make() -> EventServiceBuilder:
        return (
            EventService.builder()
            .client(redis_client)
            .scheduling_interval(0.05)
            .polling_timeout(0.2)
            .handler_timeout(1.0)
            .shutdown_grace(2.0)
            .retry_policy(FixedDelays([0.05]))
        )

    return make


@dataclass(frozen=True)
class ScriptCall:
    script: str
    keys: list[str]
    args: list[str | int | bytes]


@pytest.fixture
def script_calls(monkeypatch: pytest.MonkeyPatch) -> list[ScriptCall]:
    """Every Lua script call the test's services make, in order (pipelined ones included:
    every call is built by LuaScript.steps or LuaScript.pipelined_steps)."""
    calls: list[ScriptCall] = []
    original_steps = LuaScript.steps
    original_pipelined = LuaScript.pipelined_steps

    def recording_steps(
        script: LuaScript, client: object, keys: Sequence[str], args: Sequence[str | int | bytes]
    ) -> Steps[Any]:
        calls.append(ScriptCall(script.name, list(keys), list(args)))
        return original_steps(script, client, keys, args)

    def recording_pipelined(
        script: LuaScript,
        client: object,
        pipelined: Sequence[tuple[Sequence[str], Sequence[str | int | bytes]]],
    ) -> Steps[list[Any]]:
        calls.extend(ScriptCall(script.name, list(keys), list(args)) for keys, args in pipelined)
        return original_pipelined(script, client, pipelined)

    monkeypatch.setattr(LuaScript, "steps", recording_steps)
    monkeypatch.setattr(LuaScript, "pipelined_steps", recording_pipelined)
    return calls


pytest_plugins = [
    "tests.spark_fixtures",
    "tests.spark_standalone",
    "tests.browser_support",
    "aioqueue.pytest_plugin",
]
