"""Clients aioqueue makes from a URL pack commands in C (aioqueue/_transport/packing.py): the
same bytes as redis-py's own packer, on a single server and on a cluster."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.exceptions import DataError
from redis.typing import EncodableT

from aioqueue._transport.client import RedisClient, client_from_url
from aioqueue._transport.own_connections import own_connections

COMMANDS: list[tuple[EncodableT, ...]] = [
    ("SET", "k", "v"),
    ("FCALL", "lib_enqueue", 2, "a", "b", "0", "Tick", "e-1", '{"n":1}', "{}", "delay", 0),
    ("FUNCTION LOAD", "REPLACE", "#!lua name=x\n"),
    ("ZADD", "z", 1.5, b"member"),
    ("HSET", "h", "caf\u00e9", "\U0001f600" * 3),
    ("SET", "big", "x" * 100_000),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: str(command[0]))
def test_the_bytes_are_redis_pys_own(command: tuple[EncodableT, ...]) -> None:
    python_packed = b"".join(Connection().pack_command(*command))
    connection_class = own_connections(Redis()).connection_pool.connection_class
    assert b"".join(connection_class().pack_command(*command)) == python_packed


def test_buffers_are_sent_as_bytes_and_other_values_refused_as_redis_py_does() -> None:
    connection = own_connections(Redis()).connection_pool.connection_class()
    packed = connection.pack_command("SET", memoryview(b"k"), bytearray(b"v"))
    assert b"".join(packed) == b"".join(Connection().pack_command("SET", b"k", b"v"))
    with pytest.raises(DataError):
        connection.pack_command("SET", "k", object())  # type: ignore[arg-type]


@pytest.mark.backends("standalone", "cluster")
async def test_a_client_made_from_a_url_packs_in_c_and_works(redis_url: str) -> None:
    client: RedisClient = client_from_url(redis_url)
    try:
        if isinstance(client, RedisCluster):
            await client.initialize()
            classes: set[type] = {node.connection_class for node in client.get_nodes()}
        else:
            classes = {client.connection_pool.connection_class}
        assert all(cls.__name__.startswith("Aioqueue") for cls in classes)
        await client.set("packing:{k}", memoryview(b"\x00\xff"))
        assert await client.get("packing:{k}") == b"\x00\xff"
    finally:
        await client.aclose()
