"""Noticing, before anything is sent, that the server closed a connection while it sat idle.

redis-py's asyncio pool checks each connection it hands out (`ensure_connection`) and
connects again one that the server closed. redis-py 8 skips that check while maintenance
notifications are enabled, as they are by default ("auto"), since a push notification
waiting to be read looks to it like data left over. So after a server restart (or an idle
timeout) the pool handed out connections the server had closed, and the first command on
each failed with "Connection closed by server": for an enqueue, an error raised in the
caller's code although the server was back. The check here looks only for end of file on
the connection's stream, which no notification can look like, and connects again before
anything is sent, so nothing can be sent twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis.asyncio.connection import AbstractConnection as _Connection
else:
    _Connection = object

__all__ = ["ReconnectsWhenClosed"]


class ReconnectsWhenClosed(_Connection):
    """Mixin for an asyncio connection class: before a command is sent, a connection whose
    stream has reached end of file is dropped and connected again. In send_packed_command,
    which every path takes (the pool's, a HeldConnection's, a cluster node's, pipelines),
    rather than in connect(), which a cluster node never calls on a connection it holds."""

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        reader = self._reader
        if reader is not None and reader.at_eof():
            await self.disconnect()
            # The class's own connect: a Sentinel-managed connection asks the sentinels
            # where the primary is now (redis-py's send would connect to the old address).
            await self.connect()  # type: ignore[no-untyped-call]
        await super().send_packed_command(command, check_health)
