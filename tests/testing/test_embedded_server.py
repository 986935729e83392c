from __future__ import annotations

import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
from collections.abc import Callable

import pytest
import redis.asyncio as redis

from aioqueue.testing import (
    EmbeddedServer,
    ServerNotFoundError,
    find_server_binary,
    free_port,
)

# The type of the `server_factory` fixture from conftest.py.
ServerFactory = Callable[..., EmbeddedServer]

KEY = b"aioqueue:test:durable"


async def write_durably(server: EmbeddedServer) -> None:
    async with redis.Redis.from_url(server.url) as client:
        # With fsync on every write, the key is on disk once SET is acknowledged, so a
        # SIGKILL right after cannot lose it unless the AOF is not replayed.
        await client.config_set("appendfsync", "always")
        assert await client.set(KEY, b"kept")


async def read_key(server: EmbeddedServer) -> bytes | None:
    async with redis.Redis.from_url(server.url) as client:
        value = await client.get(KEY)
        # decode_responses is off, so a str here would be a client misconfiguration.
        assert value is None or isinstance(value, bytes)
        return value


async def test_session_server_answers_ping(
    redis_server: EmbeddedServer, redis_client: redis.Redis
) -> None:
    assert await redis_client.ping() is True
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}"
    info = await redis_client.info("server")
    assert info["process_id"] == redis_server.pid
    assert info["tcp_port"] == redis_server.port


def test_find_server_binary_returns_an_executable() -> None:
    binary = find_server_binary()
    assert binary.name in {"valkey-server", "redis-server"}
    assert binary.is_file()
    assert os.access(binary, os.X_OK)
    assert issubclass(ServerNotFoundError, RuntimeError)


def test_free_port_and_its_cluster_bus_port_can_be_bound() -> None:
    port = free_port()
    assert 0 < port <= 65535 - 10000
    with socket.socket() as server_socket, socket.socket() as bus_socket:
        server_socket.bind(("127.0.0.1", port))
        bus_socket.bind(("127.0.0.1", port + 10000))


def test_free_port_never_gives_a_process_the_same_port_twice() -> None:
    """Servers made before any of them starts (a primary and its replica) each get a port of
    their own: the kernel's pick is only free now, and once gave a replica its primary's."""
    ports = [free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)


async def test_restart_keeps_appendonly_data_on_the_same_port(
    server_factory: ServerFactory,
) -> None:
    server = server_factory(appendonly=True)
    port, pid_before = server.port, server.pid
    await write_durably(server)

    server.restart()

    assert server.port == port
    assert server.pid not in (None, pid_before)
    assert await read_key(server) == b"kept"


async def test_kill_then_start_replays_the_aof(server_factory: ServerFactory) -> None:
    server = server_factory(appendonly=True)
    await write_durably(server)

    server.kill()
    assert server.pid is None
    assert server.directory.is_dir()
    server.start()

    assert await read_key(server) == b"kept"


async def test_kill_without_appendonly_loses_data(server_factory: ServerFactory) -> None:
    # The control for the AOF tests: without appendonly nothing survives a crash.
    server = server_factory(appendonly=False)
    await write_durably(server)

    server.kill()
    server.start()

    assert await read_key(server) is None


def test_stop_is_idempotent_and_removes_the_owned_directory() -> None:
    server = EmbeddedServer()
    server.start()
    pid = server.pid
    assert pid is not None
    assert (server.directory / "server.log").is_file()

    server.stop()
    server.stop()

    assert server.pid is None
    assert not server.directory.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_stop_keeps_a_directory_it_was_given(tmp_path: pathlib.Path) -> None:
    with EmbeddedServer(directory=tmp_path / "data") as server:
        assert server.pid is not None
    assert server.pid is None
    assert (tmp_path / "data" / "server.log").is_file()


def test_failed_start_reports_the_server_log() -> None:
    server = EmbeddedServer(extra_args=["--no-such-directive", "1"])
    try:
        with pytest.raises(RuntimeError, match="no-such-directive"):
            server.start(timeout=5.0)
        assert server.pid is None
    finally:
        server.stop()
    assert not server.directory.exists()


async def test_a_start_on_a_port_another_server_holds_fails_rather_than_pass_for_started(
    server_factory: ServerFactory,
) -> None:
    """A server started on a port another one holds (its port given to a stranger while it
    was down, and started again on it) cannot bind, and the stranger answers PING in its
    place: the start must fail, not return as if the stranger were this server (it did,
    whenever the stranger answered before the new process had exited)."""
    holder = server_factory()
    async with redis.Redis.from_url(holder.url) as client:
        await client.set(KEY, b"the holder's")
    latecomer = EmbeddedServer(port=holder.port, binary=holder.binary)
    try:
        with pytest.raises(
            RuntimeError, match=f"exited with code 1 before answering on port {holder.port}"
        ) as failed:
            latecomer.start(timeout=10.0)
        assert "Address already in use" in str(failed.value)  # the log's tail says why
        assert latecomer.pid is None
    finally:
        latecomer.stop()
    assert await read_key(holder) == b"the holder's"


# A process that owns a server and would stop it on a normal exit, but gets SIGTERM instead:
# no `finally`, `__exit__` or atexit hook runs. It prints the pids to watch and waits.
OWNER_SCRIPT = """
import sys, time
from aioqueue.testing import EmbeddedServer
with EmbeddedServer() as server:
    print(server.pid, server._watch._process.pid, server.port, server.directory, flush=True)
    time.sleep(60)
"""


def test_a_server_whose_owner_gets_sigterm_is_gone_within_5_s() -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_SCRIPT], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        server_pid, watch_pid, port, directory = owner.stdout.readline().split()
        # A pidfd becomes readable when its process ends, reaped or not: nothing is polled.
        # Opened before the signal, so that neither pid can be reused unnoticed meanwhile.
        server_fd, watch_fd = os.pidfd_open(int(server_pid)), os.pidfd_open(int(watch_pid))
        owner.send_signal(signal.SIGTERM)
        assert owner.wait(5) == -signal.SIGTERM
        readable, _, _ = select.select([server_fd], [], [], 5)
        assert readable, f"server {server_pid} still runs 5 s after its owner got SIGTERM"
        # The watch removes the server's temporary directory once the server is gone.
        readable, _, _ = select.select([watch_fd], [], [], 5)
        assert readable
        os.close(server_fd)
        os.close(watch_fd)
    finally:
        owner.kill()
        owner.wait()
        if owner.stdout is not None:
            owner.stdout.close()
    assert not pathlib.Path(directory).exists()
    with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
        probe.connect(("127.0.0.1", int(port)))


def test_a_stopped_server_leaves_no_watch_behind() -> None:
    """stop() ends the watch itself: a watch left running could signal a stranger once the
    server's pid is reused."""
    server = EmbeddedServer()
    server.start()
    assert server._watch is not None
    watch = server._watch._process
    server.stop()
    assert watch.poll() is not None
    assert server._watch is None
