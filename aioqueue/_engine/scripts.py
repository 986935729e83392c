"""The Lua scripts (aioqueue/_engine/lua/*.lua), run by SHA with a fallback to EVAL."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, ResponseError

from .client import RedisClient, ensure_slot_map, within_reply_timeout
from .functions import LIBRARY

__all__ = ["LuaScript", "script_source"]


def script_source(name: str) -> str:
    """The full source of a script: the shared prelude followed by `lua/<name>.lua`.

    This is the one definition of the queue's behaviour; other producers (Spark, other
    languages) run exactly this text.
    """
    lua = resources.files("aioqueue._engine") / "lua"
    return (lua / "_prelude.lua").read_text() + "\n" + (lua / f"{name}.lua").read_text()


class LuaScript:
    """A script, run as its function of the aioqueue library (FCALL, loaded on first use when
    missing), else by SHA with a fallback to EVAL when the server doesn't know it.

    EVAL (rather than SCRIPT LOAD) is the fallback because it is routed by the script's keys,
    so on a cluster it also teaches the right node the script.
    """

    __slots__ = ("function", "name", "sha", "source")

    def __init__(self, name: str) -> None:
        self.name = name
        self.source = script_source(name)
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()
        self.function = LIBRARY.function(name)

    async def run(
        self, client: RedisClient, keys: list[str], args: Sequence[str | int | bytes]
    ) -> Any:
        """Runs the script; fails with redis.exceptions.TimeoutError if Redis does not answer
        within REPLY_TIMEOUT."""
        return await within_reply_timeout(self._run(client, keys, args))

    async def _run(
        self, client: RedisClient, keys: list[str], args: Sequence[str | int | bytes]
    ) -> Any:
        await ensure_slot_map(client)
        # Its function first (see functions.py); once that is known not to work for this
        # client, the script by SHA.
        if LIBRARY.usable(client):
            try:
                return await client.fcall(self.function, len(keys), *keys, *args)
            except ResponseError as exc:
                if await LIBRARY.recover(client, exc):
                    return await client.fcall(self.function, len(keys), *keys, *args)
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            return await client.eval(self.source, len(keys), *keys, *args)

    def __repr__(self) -> str:
        return f"LuaScript({self.name!r}, sha={self.sha[:10]})"


ENQUEUE = LuaScript("enqueue")
DISPATCH = LuaScript("dispatch")
CLAIM = LuaScript("claim")
ACKNOWLEDGE = LuaScript("acknowledge")
FAIL = LuaScript("fail")
CANCEL = LuaScript("cancel")
REQUEUE = LuaScript("requeue")
EXTEND_LEASE = LuaScript("extend_lease")
