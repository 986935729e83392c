"""The Lua scripts (aioqueue/_wire/lua/*.lua), run by SHA with a fallback to EVAL."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any, NamedTuple

from redis.exceptions import NoScriptError, ResponseError

from aioqueue._transport.client import RedisClient, SyncRedisClient
from aioqueue._transport.held_connection import HeldConnection
from aioqueue._transport.steps import Command, Pipeline, Steps, run_steps, run_steps_sync
from aioqueue._wire.functions import LIBRARY, prelude_source

__all__ = ["LuaScript", "ScriptCall", "script_source"]


def script_source(name: str) -> str:
    """The full source of a script: the shared helpers (functions.PRELUDE_PARTS) followed by
    `lua/<name>.lua`.

    This is the one definition of the queue's behaviour; other producers (Spark, other
    languages) run exactly this text.
    """
    lua = resources.files("aioqueue._wire") / "lua"
    return prelude_source() + "\n" + (lua / f"{name}.lua").read_text()


class ScriptCall(NamedTuple):
    """One call of a script: its keys and its arguments (see the script's header)."""

    keys: Sequence[str]
    args: Sequence[str | int | bytes]


class LuaScript:
    """A script, run as its function of the aioqueue library (FCALL, loaded on first use when
    missing), else by SHA with a fallback to EVAL when the server doesn't know it; on an
    asyncio client (`run`) or a blocking one (`run_sync`), by the same steps.

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
        self,
        client: RedisClient,
        keys: Sequence[str],
        args: Sequence[str | int | bytes],
        held: HeldConnection | None = None,
    ) -> Any:
        """Runs the script (on `held`, a connection of `client` its caller keeps, if given);
        fails with redis.exceptions.TimeoutError if Redis does not answer within
        REPLY_TIMEOUT."""
        return await run_steps(client, self.steps(client, keys, args), held)

    def run_sync(
        self, client: SyncRedisClient, keys: Sequence[str], args: Sequence[str | int | bytes]
    ) -> Any:
        """Runs the script on a blocking client."""
        return run_steps_sync(client, self.steps(client, keys, args))

    def steps(
        self, client: object, keys: Sequence[str], args: Sequence[str | int | bytes]
    ) -> Steps[Any]:
        """The script's call on `client`: its function first (see functions.py); once that
        is known not to work for this client, the script by SHA, then its source."""
        if LIBRARY.usable(client):
            call = ("FCALL", self.function, len(keys), *keys, *args)
            try:
                return (yield call)
            except ResponseError as exc:
                if (yield from LIBRARY.recover(client, exc)):
                    return (yield call)
        try:
            return (yield ("EVALSHA", self.sha, len(keys), *keys, *args))
        except NoScriptError:
            return (yield ("EVAL", self.source, len(keys), *keys, *args))

    def pipelined_steps(
        self,
        client: object,
        calls: Sequence[ScriptCall],
    ) -> Steps[list[Any]]:
        """Several calls of the script, (keys, args) each, in one pipeline; a call refused
        there (a server that lacks the library or the script) is run again on its own, with
        the fallbacks of `steps` (raising a refusal there)."""
        replies = yield Pipeline([self.call(client, keys, args) for keys, args in calls])
        results = []
        for (keys, args), call_reply in zip(calls, replies, strict=True):
            if isinstance(call_reply, ResponseError):
                call_reply = yield from self.steps(client, keys, args)
            elif isinstance(call_reply, BaseException):
                raise call_reply
            results.append(call_reply)
        return results

    def pipelined_outcomes(
        self,
        client: object,
        calls: Sequence[ScriptCall],
    ) -> Steps[list[Any]]:
        """Several calls of the script in one pipeline, as pipelined_steps, but each call's
        refusal (once it failed again on its own) is its outcome, in its place, rather than
        raised: one queue the server refuses does not fail the others' calls."""
        replies = yield Pipeline([self.call(client, keys, args) for keys, args in calls])
        outcomes: list[Any] = []
        for (keys, args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, ResponseError):
                try:
                    reply = yield from self.steps(client, keys, args)
                except ResponseError as refusal:
                    reply = refusal
            elif isinstance(reply, BaseException):
                raise reply
            outcomes.append(reply)
        return outcomes

    def call(
        self, client: object, keys: Sequence[str], args: Sequence[str | int | bytes]
    ) -> Command:
        """The command that calls the script for a pipeline: FCALL where the library is
        usable on `client`, else EVALSHA (a refusal there falls back like `steps`)."""
        if LIBRARY.usable(client):
            return ("FCALL", self.function, len(keys), *keys, *args)
        return ("EVALSHA", self.sha, len(keys), *keys, *args)

    def __repr__(self) -> str:
        return f"LuaScript({self.name!r}, sha={self.sha[:10]})"


# The scripts of the queue store (store.py) and the enqueue, which two modules build calls
# of; every other script is declared beside the one module that runs it.
ENQUEUE = LuaScript("enqueue")
DISPATCH = LuaScript("dispatch")
CLAIM = LuaScript("claim")
ACKNOWLEDGE = LuaScript("acknowledge")
FAIL = LuaScript("fail")
REQUEUE = LuaScript("requeue")
RENEW = LuaScript("renew")
PEEK = LuaScript("peek")
HAND_BACK = LuaScript("hand_back")
