"""SyncProducer where blocking programs run it: shared by many threads, inherited across
fork, without an event loop, bounded in time when Redis stops answering, and closing only
the client it made."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
import redis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import TimeoutError as RedisTimeoutError

from aioqueue import EventServiceBuilder, ServiceStateError, SyncProducer
from aioqueue._producing.enqueue_calls import WriteMode
from aioqueue._transport.client import RedisClient
from aioqueue._wire.keys import QueueKeys, QueueLayout
from tests.conftest import ServerFactory
from tests.support.common import (
    PaymentCheck,
    Recorder,
    drained,
    queue_key,
    wait_until,
    wait_until_sync,
)

Builder = Callable[[], EventServiceBuilder]
ROOT = Path(__file__).resolve().parents[2]

THREADS = 8
PER_THREAD = 250


@pytest.mark.backends("standalone", "cluster")
@pytest.mark.timeout(120)
async def test_threads_sharing_one_producer_have_every_event_delivered_once(
    redis_url: str, service_builder: Builder, redis_client: RedisClient
) -> None:
    recorder = Recorder()
    failures: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def produce(producer: SyncProducer, thread: int) -> None:
        try:
            start.wait()  # all threads enqueue at once, on the one producer
            for n in range(PER_THREAD):
                assert producer.enqueue(PaymentCheck(id=f"t{thread}-{n}", order_id=n), 0)
        except BaseException as exc:
            failures.append(exc)

    def produce_from_threads() -> None:
        with SyncProducer(redis_url) as producer:
            threads = [
                threading.Thread(target=produce, args=(producer, thread))
                for thread in range(THREADS)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder, parallelism=16)
        await anyio.to_thread.run_sync(produce_from_threads)
        assert failures == []
        await recorder.wait_for(THREADS * PER_THREAD, within=60)
        # Nothing is left to deliver, so the count below is final: each event exactly once.
        await wait_until(drained(redis_client, QueueKeys.for_type("aioqueue", "PaymentCheck")))
    expected = {f"t{thread}-{n}" for thread in range(THREADS) for n in range(PER_THREAD)}
    assert len(recorder.ids) == THREADS * PER_THREAD
    assert set(recorder.ids) == expected


@pytest.mark.backends("standalone", "cluster")
async def test_a_producer_made_before_fork_works_in_parent_and_child(
    redis_url: str, redis_client: RedisClient
) -> None:
    count = 300
    result = await anyio.run_process(
        [sys.executable, "-m", "tests.support.fork_producer", redis_url, str(count)],
        cwd=ROOT,
        check=False,
    )
    assert (result.returncode, result.stderr.decode()) == (0, "")
    report = json.loads(result.stdout.decode().splitlines()[-1])
    assert report["child_status"] == 0
    assert report["child"]["ok"], report["child"]
    assert report["parent_ok"]
    # Both enqueued at the same time on what the fork copied; no reply went astray.
    schedule = queue_key("ForkPing", "schedule")
    assert await redis_client.zcard(schedule) == 2 * count + 1
    if isinstance(redis_client, AsyncRedis):
        parent_before, parent_after = report["parent_ids"]
        # The child opened a connection of its own; the parent kept using its own one.
        assert report["child"]["id"] not in (parent_before, parent_after)
        assert parent_after == parent_before


def test_no_event_loop_is_made(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("SyncProducer made an event loop")

    monkeypatch.setattr(asyncio.BaseEventLoop, "__init__", refuse)
    with SyncProducer(redis_url) as producer:
        assert producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
        assert producer.enqueue_many([PaymentCheck(id="p-2", order_id=2)], 3600) == [True]
        assert producer.reschedule(PaymentCheck, "p-1", 60)
        assert producer.cancel(PaymentCheck, "p-2")


@pytest.mark.timeout(30)
def test_a_call_fails_within_five_seconds_when_redis_stops_answering(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()
    with SyncProducer(server.url) as producer:
        producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)  # the server takes the command, never answers
        try:
            started = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                producer.enqueue(PaymentCheck(id="p-2", order_id=2), 3600)
            waited = time.monotonic() - started
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert 4.5 <= waited < 8
        # The next call gets a fresh connection and works.
        assert producer.enqueue(PaymentCheck(id="p-3", order_id=3), 3600)


@pytest.mark.timeout(60)
def test_threads_enqueueing_during_a_call_share_the_next_one(
    server_factory: ServerFactory,
) -> None:
    """The server is stopped while one thread's call is under way; the nine threads that
    enqueue meanwhile go in one call when it answers, each with its own result."""
    server = server_factory()
    assert server.pid is not None
    client = redis.Redis.from_url(server.url)
    queue = (QueueLayout("aioqueue", "PaymentCheck"), WriteMode())
    ids = [f"p-{n}" for n in range(9)] + ["p-kept"]  # p-kept is pending already
    results: dict[str, bool] = {}

    def enqueue(producer: SyncProducer, event_id: str) -> None:
        results[event_id] = producer.enqueue(PaymentCheck(id=event_id, order_id=1), 3600)

    with SyncProducer(server.url) as producer:
        assert producer.enqueue(PaymentCheck(id="p-kept", order_id=0), 3600)
        client.config_resetstat()
        os.kill(server.pid, signal.SIGSTOP)
        try:
            threads = [
                threading.Thread(target=enqueue, args=(producer, event_id)) for event_id in ids
            ]
            for thread in threads:
                thread.start()
            # Whichever came first is in a call the stopped server holds; the rest wait.
            wait_until_sync(lambda: producer._enqueues.waiting(queue) == len(ids) - 1)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        for thread in threads:
            thread.join(10)
    with client:
        stats = client.info("commandstats")
        scheduled = client.zcard(queue_key("PaymentCheck", "schedule"))
    calls = sum(stats.get(f"cmdstat_{name}", {}).get("calls", 0) for name in ("fcall", "evalsha"))
    assert calls == 2
    assert results == {event_id: event_id != "p-kept" for event_id in ids}
    assert scheduled == len(ids)


def test_a_timeout_in_the_url_wins(server_factory: ServerFactory) -> None:
    server = server_factory()
    with SyncProducer(f"{server.url}?socket_timeout=0.2") as producer:
        producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(RedisTimeoutError):
                producer.enqueue(PaymentCheck(id="p-2", order_id=2), 3600)
            assert time.monotonic() - started < 2
        finally:
            os.kill(server.pid, signal.SIGCONT)


async def test_it_closes_the_client_it_made_and_never_one_it_was_given(
    redis_url: str, redis_client: RedisClient
) -> None:
    async def connections() -> int:
        return len(await redis_client.client_list())

    before = await connections()
    with SyncProducer(redis_url) as producer:
        producer.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
        assert await connections() == before + 1
    with pytest.raises(ServiceStateError, match="closed"):
        producer.enqueue(PaymentCheck(id="p-2", order_id=2), 3600)
    producer.close()  # closing twice is fine

    async def closed() -> bool:
        return await connections() == before

    await wait_until(closed)

    owned = redis.Redis.from_url(redis_url)
    try:
        with SyncProducer(client=owned) as producer:
            producer.enqueue(PaymentCheck(id="p-3", order_id=3), 3600)
        assert owned.ping()  # still open: the caller closes it
    finally:
        owned.close()
