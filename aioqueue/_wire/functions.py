"""The Lua scripts as one Redis Function library (Redis 7+, Valkey), called with FCALL.

Why functions rather than EVAL: a user allowed EVAL can run any Lua, including `while true
do end`, which puts every client of the server in BUSY, and SCRIPT KILL needs more rights
than a service should have. With FCALL a service's ACL user runs only the library an
administrator loaded (`aioqueue functions load`); Redis keeps functions across restarts (RDB
and AOF) and copies them to replicas, which the script cache does not.

The library and its functions are named after a hash of their source, so services of two
versions run side by side during a deploy, each calling its own functions. A server without
functions (Redis 6) or a user without FCALL falls back to EVALSHA/EVAL.
"""

from __future__ import annotations

import hashlib
import weakref
from importlib import resources

from redis.exceptions import NoPermissionError, ResponseError

from aioqueue._transport.client import RedisClient, within_reply_timeout
from aioqueue._transport.recovery import logger
from aioqueue._transport.steps import Command, Steps

__all__ = ["LIBRARY", "PRELUDE_PARTS", "FunctionLibrary", "library_source", "prelude_source"]


# The shared helpers every script runs after, in this order (each part uses the ones before
# it): the queue's basics, its serial keys, the lease protocol. Their names start with `_`,
# which tells them from the scripts.
PRELUDE_PARTS = ("_prelude.lua", "_serial_keys.lua", "_leases.lua")


def prelude_source() -> str:
    """The shared helpers of every script (PRELUDE_PARTS, in order), as one text."""
    lua = resources.files("aioqueue._wire") / "lua"
    return "\n".join((lua / part).read_text() for part in PRELUDE_PARTS)


def _script_names() -> list[str]:
    lua = resources.files("aioqueue._wire") / "lua"
    return sorted(
        entry.name.removesuffix(".lua")
        for entry in lua.iterdir()
        if entry.name.endswith(".lua") and not entry.name.startswith("_")
    )


def library_source(names: list[str], library: str) -> str:
    """The library: the shared prelude once, then each script's body as a function of
    (KEYS, ARGV), so that the body runs unchanged."""
    lua = resources.files("aioqueue._wire") / "lua"
    parts = [f"#!lua name={library}", prelude_source()]
    for name in names:
        body = (lua / f"{name}.lua").read_text()
        parts.append(
            f"redis.register_function('{library}_{name}', function(KEYS, ARGV)\n{body}\nend)"
        )
    return "\n".join(parts) + "\n"


class FunctionLibrary:
    """The library of this version of aioqueue, and whether a client can call it."""

    def __init__(self) -> None:
        names = _script_names()
        digest = hashlib.sha1(library_source(names, "aioqueue").encode()).hexdigest()[:12]
        self.name = f"aioqueue_{digest}"
        self.scripts = tuple(names)
        """The scripts it holds, by name (`lua/<name>.lua`)."""
        self.source = library_source(names, self.name)
        # Per client: False once FCALL turned out unusable (no functions, or no right to
        # call or load them), so every later call goes straight to EVALSHA.
        # Keyed by any client, asyncio or blocking.
        self._usable: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()

    def function(self, script: str) -> str:
        return f"{self.name}_{script}"

    def usable(self, client: object) -> bool:
        return self._usable.get(client, True)

    def disable(self, client: object) -> None:
        """Sends `client`'s calls to EVALSHA/EVAL from now on."""
        self._usable[client] = False

    def load_command(self) -> Command:
        """FUNCTION LOAD REPLACE: idempotent (same name, same code); redis-py sends it to
        every primary of a cluster."""
        return ("FUNCTION LOAD", "REPLACE", self.source)

    async def load(self, client: RedisClient) -> None:
        await within_reply_timeout(client.execute_command(*self.load_command()))

    def recover(self, client: object, error: ResponseError) -> Steps[bool]:
        """After a failed FCALL: loads the library when it is missing (True: call again), or
        marks FCALL unusable for this client (False: use EVALSHA/EVAL). Re-raises an error
        that has nothing to do with functions."""
        message = str(error).lower()
        if "function not found" in message:
            try:
                yield self.load_command()
                return True
            except NoPermissionError:
                logger.error(
                    "the aioqueue function library %s is not loaded and this user may not "
                    "load it: run `aioqueue functions load` as an administrator (falling "
                    "back to EVALSHA/EVAL, which the documented ACL rule does not allow)",
                    self.name,
                )
        elif not (
            # The user may not run FCALL at all. A denial of a key inside a function is the
            # caller's error: EVALSHA would be denied the same key, and for a user allowed
            # only FCALL every later call would fail.
            (isinstance(error, NoPermissionError) and "'fcall'" in message)
            or "unknown command" in message
            or "unknown subcommand" in message
        ):
            raise error
        self.disable(client)
        return False


LIBRARY = FunctionLibrary()
