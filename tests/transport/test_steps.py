"""Conversations written once as steps (aioqueue/_transport/steps.py) do the same on an asyncio
client and a blocking one, against a real server: the same writes, and the same recovery
when the server lacks the function library or the script."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from aioqueue._producing.enqueue_calls import EnqueueCall, EnqueueItem, WriteMode, scheduled_flags
from aioqueue._producing.writes import enqueue_steps
from aioqueue._transport.steps import run_steps, run_steps_sync
from aioqueue._wire.functions import LIBRARY
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import ENQUEUE
from aioqueue.testing import EmbeddedServer

KEYS = QueueKeys.for_type("steps", "Ping")
KEEP = WriteMode()  # an event already pending is kept


@pytest.fixture
def sync_client(redis_server: EmbeddedServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url)
    yield client
    client.close()


def item(event_id: str) -> EnqueueItem:
    return EnqueueItem(event_id, '{"n":1}', '{"k":"v"}', 60_000, absolute=False)


async def test_blocking_and_asyncio_enqueues_write_the_same_envelope(
    redis_client: AsyncRedis, sync_client: redis.Redis
) -> None:
    assert await run_steps(
        redis_client, enqueue_steps(redis_client, KEYS, "Ping", [item("a")], mode=KEEP)
    ) == [True]
    assert run_steps_sync(
        sync_client, enqueue_steps(sync_client, KEYS, "Ping", [item("b"), item("a")], mode=KEEP)
    ) == [True, False]  # a is pending already: kept
    stored = cast("dict[bytes, bytes]", await redis_client.hgetall(KEYS.events))
    # Versions differ (each enqueue takes the next); everything else is the same bytes.
    assert stored[b"a"].replace(b'"v":1', b'"v":2') == stored[b"b"]


async def test_a_missing_function_library_is_loaded_by_either_client(
    redis_client: AsyncRedis, sync_client: redis.Redis
) -> None:
    await redis_client.function_flush()
    run_steps_sync(sync_client, enqueue_steps(sync_client, KEYS, "Ping", [item("a")], mode=KEEP))
    assert LIBRARY.name in str(await redis_client.function_list())
    assert LIBRARY.usable(sync_client)


async def test_without_fcall_the_script_runs_by_sha_then_by_source(
    redis_client: AsyncRedis, sync_client: redis.Redis
) -> None:
    LIBRARY.disable(sync_client)  # as for a user without FCALL, or a server without functions
    await redis_client.script_flush()
    steps = enqueue_steps(sync_client, KEYS, "Ping", [item("a")], mode=KEEP)
    assert run_steps_sync(sync_client, steps) == [True]
    # The EVAL fallback taught the server the script: the next call goes by SHA.
    assert await redis_client.script_exists(ENQUEUE.sha) == [True]


@pytest.mark.parametrize("blocking", [False, True], ids=["asyncio", "blocking"])
async def test_calls_refused_inside_a_pipeline_are_run_again_on_their_own(
    redis_client: AsyncRedis, sync_client: redis.Redis, blocking: bool
) -> None:
    await redis_client.function_flush()  # every call of the pipeline is refused
    calls = [
        EnqueueCall(KEYS, "Ping", [item(f"{n}-a"), item(f"{n}-b")], KEEP).script_call()
        for n in range(3)
    ]
    client = sync_client if blocking else redis_client
    steps = ENQUEUE.pipelined_steps(client, calls)
    if blocking:
        replies = run_steps_sync(sync_client, steps)
    else:
        replies = await run_steps(redis_client, steps)
    assert [scheduled_flags(reply) for reply in replies] == [[True, True]] * 3
    assert await redis_client.zcard(KEYS.schedule) == 6


async def test_an_error_that_is_no_refusal_of_the_library_reaches_the_caller(
    redis_client: AsyncRedis,
) -> None:
    # The script refuses another type's keys; that error is the caller's, not a fallback's.
    steps = enqueue_steps(redis_client, KEYS, "Pong", [item("a")], mode=KEEP)
    with pytest.raises(redis.ResponseError, match="does not own key"):
        await run_steps(redis_client, steps)
    assert LIBRARY.usable(redis_client)
