"""Redis conversations written once, run on an asyncio client or a blocking one.

What aioqueue says to Redis to write an event (record its type, publish its schema, run the
enqueue script, fall back from FCALL to EVALSHA to EVAL) is the same whether the caller is an
EventService on an event loop or a Django view on a WSGI thread. So it is written once, as a
generator of steps that yields each command and receives its reply (the "sans-I/O" style of
h11 and hyper-h2), and two small drivers run such generators: `run_steps` on a
redis.asyncio client, `run_steps_sync` on a redis-py client. A command that Redis refuses
is thrown into the generator at the `yield` that sent it, so the conversation itself decides
what a refusal means (load the library, take the other script path, or fail).

A step is a command tuple (`("HGET", key, field)`; redis-py splits a two-word name such as
"FUNCTION LOAD"), or a `Pipeline` of commands sent in one round trip, whose replies come
back as a list with each refusal in its command's place.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import anyio
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.exceptions import ResponseError

from .client import RedisClient, SyncRedisClient, ensure_slot_map, within_reply_timeout

__all__ = [
    "Command",
    "Pipeline",
    "Steps",
    "run_steps",
    "run_steps_sync",
]

R = TypeVar("R")

Command: TypeAlias = "tuple[str | int | bytes, ...]"
"""One Redis command: its name, then its arguments."""


@dataclass(frozen=True, slots=True)
class Pipeline:
    """Commands sent together: one round trip on a single server. On a cluster they go out
    at once, each to the node of its keys (redis-py's cluster pipelines refuse scripts)."""

    commands: Sequence[Command]


Step: TypeAlias = "Command | Pipeline"
Steps: TypeAlias = "Generator[Step, Any, R]"
"""A conversation with Redis that returns R: it yields steps and receives their replies."""


async def run_steps(client: RedisClient, steps: Steps[R]) -> R:
    """Runs `steps` on an asyncio client; each reply has REPLY_TIMEOUT (see client.py)."""
    await ensure_slot_map(client)
    reply: Any = None
    refusal: ResponseError | None = None
    try:
        while True:
            try:
                step = steps.send(reply) if refusal is None else steps.throw(refusal)
            except StopIteration as finished:
                result: R = finished.value
                return result
            refusal = None
            try:
                if isinstance(step, Pipeline):
                    reply = await _pipeline(client, step.commands)
                else:
                    reply = await within_reply_timeout(client.execute_command(*step))
            except ResponseError as exc:
                refusal = exc
    finally:
        steps.close()


def run_steps_sync(client: SyncRedisClient, steps: Steps[R]) -> R:
    """Runs `steps` on a blocking client (its socket timeout bounds each reply)."""
    reply: Any = None
    refusal: ResponseError | None = None
    try:
        while True:
            try:
                step = steps.send(reply) if refusal is None else steps.throw(refusal)
            except StopIteration as finished:
                result: R = finished.value
                return result
            refusal = None
            try:
                if isinstance(step, Pipeline):
                    reply = _pipeline_sync(client, step.commands)
                else:
                    reply = client.execute_command(*step)  # type: ignore[no-untyped-call]
            except ResponseError as exc:
                refusal = exc
    finally:
        steps.close()


async def _pipeline(client: RedisClient, commands: Sequence[Command]) -> list[Any]:
    if isinstance(client, RedisCluster):
        replies: list[Any] = [None] * len(commands)

        async def send(index: int, command: Command) -> None:
            try:
                replies[index] = await within_reply_timeout(client.execute_command(*command))
            except ResponseError as exc:
                replies[index] = exc

        async with anyio.create_task_group() as in_flight:
            for index, command in enumerate(commands):
                in_flight.start_soon(send, index, command)
        return replies
    async with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        return await within_reply_timeout(pipe.execute(raise_on_error=False))


def _pipeline_sync(client: SyncRedisClient, commands: Sequence[Command]) -> list[Any]:
    if isinstance(client, SyncRedisCluster):
        replies: list[Any] = []
        for command in commands:
            try:
                replies.append(client.execute_command(*command))  # type: ignore[no-untyped-call]
            except ResponseError as exc:
                replies.append(exc)
        return replies
    with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        return pipe.execute(raise_on_error=False)
