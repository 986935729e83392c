"""A connection kept for calls one after another (aioqueue/_transport/held_connection.py): it
behaves as redis-py's client does when the connection breaks, when Redis refuses a call and
when a reply is late, and it goes back to the pool."""

from __future__ import annotations

import os
import signal

import anyio
import pytest
import redis.exceptions
from redis.asyncio import Redis

import aioqueue._transport.client
from aioqueue._transport.client import service_client_from_url
from aioqueue._transport.held_connection import HeldConnection
from aioqueue._transport.steps import Steps, run_steps
from aioqueue.testing import EmbeddedCluster
from tests.conftest import ServerFactory
from tests.support.common import wait_until


async def _client_id(held: HeldConnection) -> int:
    return int(await held.execute("CLIENT", "ID"))


async def test_calls_share_one_connection_which_goes_back_to_the_pool(
    server_factory: ServerFactory,
) -> None:
    client = service_client_from_url(server_factory().url)
    assert isinstance(client, Redis)
    held = HeldConnection(client)
    try:
        assert held.holds_a_connection
        first = await _client_id(held)
        assert [await _client_id(held) for _ in range(3)] == [first] * 3
        assert len(client.connection_pool._in_use_connections) == 1  # held, not returned
        await held.release()
        assert not client.connection_pool._in_use_connections
        assert int(await client.execute_command("CLIENT", "ID")) == first  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()


async def test_a_release_during_a_conversation_sends_the_rest_through_the_pool(
    server_factory: ServerFactory,
) -> None:
    """A service that closes while an enqueue's conversation is under way (several steps:
    the library loaded, then the call) releases the connection during one step: that step
    ends on it, the rest goes out on the client's pool instead of failing."""
    client = service_client_from_url(server_factory().url)
    assert isinstance(client, Redis)
    held = HeldConnection(client)
    first_answered = anyio.Event()

    def steps() -> Steps[bytes]:
        yield ("SET", "k", "v")
        first_answered.set()
        yield ("SET", "k", "w")  # under way when the release comes
        return bytes((yield ("GET", "k")))

    async def release_during_the_second_step() -> None:
        await first_answered.wait()
        await held.release()

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(release_during_the_second_step)
            assert await run_steps(client, steps(), held) == b"w"
        assert not held.holds_a_connection
        assert not client.connection_pool._in_use_connections  # given back, none kept
    finally:
        await client.aclose()


async def test_a_connection_killed_while_idle_costs_one_call_at_most(
    server_factory: ServerFactory,
) -> None:
    """As with redis-py's own client: the pool's check before a call (ensure_connection)
    replaces a connection the server closed; redis-py 8 leaves that check out unless
    maintenance notifications are off, and then the one call that meets the closed socket
    fails, and the connection connects again for the next."""
    client = service_client_from_url(server_factory().url)
    held = HeldConnection(client)
    try:
        first = await _client_id(held)
        assert await client.client_kill_filter(_id=str(first)) == 1
        connection = held._connection
        assert connection is not None

        async def close_seen() -> bool:  # by this process's event loop, as an idle one would
            return bool(await connection.can_read())

        await wait_until(close_seen)
        try:
            second = await _client_id(held)
        except redis.exceptions.ConnectionError:
            second = await _client_id(held)
        assert second != first
        assert await held.execute("SET", "k", "v")
        assert await held.execute("GET", "k") == b"v"
    finally:
        await held.release()
        await client.aclose()


async def test_a_refusal_raises_and_leaves_the_connection_in_use(
    server_factory: ServerFactory,
) -> None:
    client = service_client_from_url(server_factory().url)
    held = HeldConnection(client)
    try:
        first = await _client_id(held)
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            await held.execute("NO-SUCH-COMMAND")
        assert await _client_id(held) == first
    finally:
        await held.release()
        await client.aclose()


async def test_a_late_reply_fails_the_call_and_is_never_read_as_the_next_ones(
    server_factory: ServerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadline that cuts a call off mid-reply drops the connection: on a kept one, the
    late reply would otherwise answer the next call."""
    server = server_factory()
    assert server.pid is not None
    client = service_client_from_url(server.url)
    held = HeldConnection(client)
    try:
        await held.execute("SET", "k", "first")
        first = await _client_id(held)
        monkeypatch.setattr(aioqueue._transport.client, "REPLY_TIMEOUT", 0.3)
        os.kill(server.pid, signal.SIGSTOP)
        try:
            with pytest.raises(redis.exceptions.TimeoutError):
                await held.execute("GET", "k")
        finally:
            os.kill(server.pid, signal.SIGCONT)
        monkeypatch.undo()
        assert await held.execute("SET", "k", "second")
        assert await held.execute("GET", "k") == b"second"
        assert await _client_id(held) != first
    finally:
        await held.release()
        await client.aclose()


async def test_on_a_cluster_steps_take_the_clients_routing(redis_cluster: EmbeddedCluster) -> None:
    """A cluster's calls go where their keys are: nothing to hold, run_steps routes them."""
    client = service_client_from_url(redis_cluster.url)
    held = HeldConnection(client)

    def steps() -> Steps[object]:
        yield ("SET", "{a}k", "v")
        return (yield ("GET", "{a}k"))

    try:
        assert not held.holds_a_connection
        assert await run_steps(client, steps(), held) == b"v"
    finally:
        await held.release()
        await client.aclose()
