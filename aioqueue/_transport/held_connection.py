"""A connection one caller keeps for script calls it makes one after another.

A consumer's taker claims, waits for the reply, claims again; each lane of a producer's
coalescer flushes one batch at a time. Through redis-py's client each such call takes a
connection from the pool and gives it back (a lock, observability hooks, the retry wrapper
around both): about 13 µs of the 70 µs of Python a claim cost; with the reply deadline now
asyncio's timeout (8 µs against anyio's 14, see client.py), a claim costs about 40. A
HeldConnection takes one connection of the client's pool on first use and sends each call on
it directly, with the connection's own retry policy, and checks it before each call as the
pool checks a connection it hands out, so the wire and the error semantics stay redis-py's.

On Redis Cluster a call's node depends on its keys, so there is nothing to hold: calls go
through the client's routing as before (`holds_a_connection` is False), as do calls after
`release()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

from aioqueue._transport.client import RedisClient, is_cluster, within_reply_timeout

__all__ = ["HeldConnection"]


class HeldConnection:
    """One connection of `client`'s pool, for calls that never overlap (see above).

    Calls must not overlap: the owner awaits each one before it sends the next. `release()`
    gives the connection back, after the call under way if there is one; closing the client
    closes it too.
    """

    __slots__ = ("_calling", "_client", "_connection", "_released")

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._connection: AbstractConnection | None = None
        self._calling = False
        self._released = False

    @property
    def holds_a_connection(self) -> bool:
        """Whether calls go out on the held connection: not on a cluster, and not once
        released (a conversation the release overtook takes the client's pool for the rest
        of its steps)."""
        return not self._released and not is_cluster(self._client)

    async def execute(self, *command: str | int | bytes) -> Any:
        """Sends one command and returns its reply (a refusal raises its ResponseError, and
        leaves the connection in use); fails with redis.exceptions.TimeoutError if Redis does
        not answer within REPLY_TIMEOUT."""
        if self._released:
            raise RuntimeError("a released HeldConnection takes no more calls")
        self._calling = True
        try:
            return await within_reply_timeout(self._execute(command))
        finally:
            self._calling = False
            if self._released:  # released during the call: given back now that it is over
                await self._give_back()

    async def execute_pipeline(
        self, commands: Sequence[tuple[str | int | bytes, ...]], *, blocking: float = 0.0
    ) -> list[Any]:
        """Sends `commands` in one round trip and returns their replies, each refusal (its
        ResponseError) in its command's place; the deadline is REPLY_TIMEOUT plus
        `blocking` (a WAIT's)."""
        if self._released:
            raise RuntimeError("a released HeldConnection takes no more calls")
        self._calling = True
        try:
            replies: list[Any] = await within_reply_timeout(
                self._execute(commands, self._exchange_many), blocking=blocking
            )
            return replies
        finally:
            self._calling = False
            if self._released:
                await self._give_back()

    async def _execute(self, command: Any, exchange: Any = None) -> Any:
        pool = self._client.connection_pool  # type: ignore[union-attr]
        connection = self._connection
        if connection is None:
            connection = self._connection = await pool.get_connection()
        else:
            # The pool's own check of a connection it hands out: connected again if it was
            # dropped (a Sentinel-managed one asks the sentinels where the primary is now),
            # and replaced if the server closed it, or it holds data, while it sat idle.
            await pool.ensure_connection(connection)
        run = exchange or self._exchange
        # The connection disconnects itself on any error but a refusal (and on cancellation,
        # which may leave a reply half read); the retry then connects it again.
        return await connection.retry.call_with_retry(
            lambda: run(connection, command),
            lambda error: connection.disconnect(error=error),
        )

    @staticmethod
    async def _exchange(
        connection: AbstractConnection, command: tuple[str | int | bytes, ...]
    ) -> Any:
        await connection.send_packed_command(connection.pack_command(*command))
        return await connection.read_response()

    @staticmethod
    async def _exchange_many(
        connection: AbstractConnection, commands: Sequence[tuple[str | int | bytes, ...]]
    ) -> list[Any]:
        await connection.send_packed_command(connection.pack_commands(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await connection.read_response())
            except ResponseError as refusal:  # read whole: the next reply follows it
                replies.append(refusal)
        return replies

    async def release(self) -> None:
        """Gives the connection back to the pool, at once or, during a call, when the call
        is over (a connection back in the pool may be handed to anyone); no call after."""
        self._released = True
        if not self._calling:
            await self._give_back()

    async def _give_back(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            # Shielded: called while its owner stops, when a cancellation may be under way.
            with anyio.CancelScope(shield=True):
                await self._client.connection_pool.release(connection)  # type: ignore[union-attr]
