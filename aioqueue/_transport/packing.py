"""Commands packed in C, by hiredis, for the asyncio clients aioqueue makes.

redis-py packs commands with hiredis's C packer on its blocking clients, but its asyncio
connections pack every argument in Python: for an enqueue script call (five arguments per
event) that was the largest single cost of an enqueue, about 2.5 µs of the client's time per
event. The same bytes come out of hiredis.pack_command, which the `hiredis` extra of redis
(one of aioqueue's dependencies) installs; own_connections.py gives the clients aioqueue
makes connections that do.
"""

from __future__ import annotations

import sys
from typing import Any

import hiredis
from redis.exceptions import DataError

__all__ = ["HiredisPacking"]


class HiredisPacking:
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
