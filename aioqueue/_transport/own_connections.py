"""The connection classes of the asyncio clients aioqueue makes itself.

Each is the client's own class (plain, TLS, Unix socket, Sentinel-managed) with two mixins:
commands packed in C (packing.py) and a connection the server closed noticed before it is
used (closed_connections.py). Clients a caller passes in are left as they are: aioqueue does
not change an object it does not own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio.cluster import RedisCluster

from aioqueue._transport.closed_connections import ReconnectsWhenClosed
from aioqueue._transport.packing import HiredisPacking

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["own_connections"]

C = TypeVar("C", "Redis", RedisCluster)

# One subclass per connection class, made on first use.
_own_classes: dict[type[Any], type[Any]] = {}


def own_connections(client: C) -> C:
    """Makes `client`'s new connections aioqueue's (a client aioqueue made itself, before it
    connects); returns it."""
    if isinstance(client, RedisCluster):
        # Nodes found later are made from the manager's arguments; the startup nodes exist.
        manager_kwargs = client.nodes_manager.connection_kwargs
        manager_kwargs["connection_class"] = _own_class(manager_kwargs["connection_class"])
        for node in client.nodes_manager.startup_nodes.values():
            node.connection_class = _own_class(node.connection_class)
    else:
        pool = client.connection_pool
        pool.connection_class = _own_class(pool.connection_class)
    return client


def _own_class(connection_class: type[Any]) -> type[Any]:
    if issubclass(connection_class, HiredisPacking):
        return connection_class
    own = _own_classes.get(connection_class)
    if own is None:
        own = _own_classes[connection_class] = type(
            f"Aioqueue{connection_class.__name__}",
            (HiredisPacking, ReconnectsWhenClosed, connection_class),
            {},
        )
    return own
