"""Commands packed in C, by hiredis, for the asyncio clients aioqueue makes.

redis-py packs commands with hiredis's C packer on its blocking clients, but its asyncio
connections pack every argument in Python: for an enqueue script call (five arguments per
event) that was the largest single cost of an enqueue, about 2.5 µs of the client's time per
event. The same bytes come out of hiredis.pack_command, which the `hiredis` extra of redis
(one of aioqueue's dependencies) installs. Clients a caller passes in are left as they are:
aioqueue does not change an object it does not own.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import DataError

if TYPE_CHECKING:
    from redis.asyncio import Redis

import hiredis

__all__ = ["pack_commands_in_c"]

C = TypeVar("C", "Redis", RedisCluster)


class _HiredisPacking:
    """Mixin for an asyncio connection class: pack_command as redis-py's blocking
    connections do it (redis.connection.HiredisRespSerializer)."""

    def pack_command(self, *args: Any) -> list[bytes]:
        # A command name with spaces ("FUNCTION LOAD") is several arguments on the wire.
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        try:
            return [hiredis.pack_command(args)]
        except TypeError:
            # hiredis takes str, bytes, int and float; redis-py also sends buffers, as bytes.
            if not any(isinstance(arg, bytearray | memoryview) for arg in args):
                _, value, traceback = sys.exc_info()
                raise DataError(value).with_traceback(traceback) from None
            return self.pack_command(
                *(bytes(arg) if isinstance(arg, bytearray | memoryview) else arg for arg in args)
            )


# One subclass per connection class (plain, TLS, Unix socket), made on first use.
_packing_classes: dict[type[Any], type[Any]] = {}


def _with_hiredis_packing(connection_class: type[Any]) -> type[Any]:
    if issubclass(connection_class, _HiredisPacking):
        return connection_class
    packing = _packing_classes.get(connection_class)
    if packing is None:
        name = f"HiredisPacking{connection_class.__name__}"
        packing = _packing_classes[connection_class] = type(
            name, (_HiredisPacking, connection_class), {}
        )
    return packing


def pack_commands_in_c(client: C) -> C:
    """Makes `client`'s new connections pack commands with hiredis (a client aioqueue made
    itself, before it connects); returns it."""
    if isinstance(client, RedisCluster):
        # Nodes found later are made from the manager's arguments; the startup nodes exist.
        manager_kwargs = client.nodes_manager.connection_kwargs
        manager_kwargs["connection_class"] = _with_hiredis_packing(
            manager_kwargs["connection_class"]
        )
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_class = _with_hiredis_packing(node.connection_class)
    else:
        pool = client.connection_pool
        pool.connection_class = _with_hiredis_packing(pool.connection_class)
    return client
