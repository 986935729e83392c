"""A type's serial key as recorded in Redis (the `serial_field` key in the type's hash tag):
the payload field whose value dispatch.lua serialises, for every service of the prefix."""

from __future__ import annotations

from aioqueue._transport.call_gate import gated_call
from aioqueue._transport.client import RedisClient
from aioqueue._transport.recovery import logger
from aioqueue._transport.steps import Steps, run_steps
from aioqueue._wire.envelope import text
from aioqueue._wire.keys import QueueLayout

__all__ = ["read_serial_field", "record_serial_field", "record_serial_field_steps"]


async def read_serial_field(client: RedisClient, layout: QueueLayout) -> str | None:
    """The payload field the type's events are serialised on, or None."""
    recorded = await gated_call(client, lambda: client.get(layout.all_keys[0].serial_field))
    return None if recorded is None else text(recorded)


async def record_serial_field(client: RedisClient, layout: QueueLayout, wanted: str) -> str:
    """Records `wanted` unless a field is recorded already (see record_serial_field_steps)."""
    return await run_steps(client, record_serial_field_steps(layout, wanted))


def record_serial_field_steps(layout: QueueLayout, wanted: str) -> Steps[str]:
    """Records `wanted` unless a field is recorded already; returns the one in force, and logs
    when that is not `wanted` (the recorded one wins: every service must serialise on the same
    field, or two of them could run events of one key at once)."""
    keys = layout.all_keys[0]
    if (yield ("SET", keys.serial_field, wanted, "NX")):
        return wanted
    stored = yield ("GET", keys.serial_field)
    recorded = None if stored is None else text(stored)
    if recorded is not None and recorded != wanted:
        logger.warning(
            "%s sets __serial_key__ = %r here, but %r is recorded in Redis and holds for every "
            "service; delete the key %s to change it, with no service of the type running",
            layout.event_type,
            wanted,
            recorded,
            keys.serial_field,
        )
    return recorded or wanted
