"""A SyncProducer's threads sharing script calls while their connections are cut: no thread
is left waiting, and no enqueue that returned is lost (tests/transport/test_thread_coalescer.py
tests the sharing itself)."""

from __future__ import annotations

import threading

import anyio
import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from aioqueue import SyncProducer
from aioqueue.testing._proxy import CuttingProxy
from tests.conftest import ServerFactory
from tests.support.common import PaymentCheck, queue_key

THREADS = 16
PER_THREAD = 100
CUT_EVERY = 50  # acknowledged enqueues between two cuts of every connection


@pytest.mark.timeout(120)
async def test_threads_sharing_calls_through_cut_connections_lose_nothing_that_returned(
    server_factory: ServerFactory,
) -> None:
    server = server_factory()
    client = redis.Redis.from_url(server.url)
    acknowledged: dict[str, bool] = {}  # written by one thread per key

    def produce(producer: SyncProducer, thread: int) -> None:
        for n in range(PER_THREAD):
            event_id = f"t{thread}-{n}"
            while True:  # as an application would: the same event again until it returns
                try:
                    scheduled = producer.enqueue(PaymentCheck(id=event_id, order_id=n), 3600)
                except (RedisConnectionError, RedisTimeoutError):
                    continue
                acknowledged[event_id] = scheduled
                break

    async with CuttingProxy(server.port) as proxy:
        with SyncProducer(f"redis://127.0.0.1:{proxy.port}") as producer:
            # The class resolved first; from a thread, as the proxy runs on this loop.
            warm = PaymentCheck(id="warm", order_id=0)
            assert await anyio.to_thread.run_sync(producer.enqueue, warm, 3600)
            client.config_resetstat()
            threads = [
                threading.Thread(target=produce, args=(producer, thread), daemon=True)
                for thread in range(THREADS)
            ]
            for thread in threads:
                thread.start()
            cuts_at = CUT_EVERY
            with anyio.fail_after(90):
                # Cut whenever CUT_EVERY more enqueues returned: with 16 threads, calls are
                # under way, shared, at nearly every cut.
                while any(thread.is_alive() for thread in threads):
                    if len(acknowledged) >= cuts_at:
                        proxy.cut_all()
                        cuts_at += CUT_EVERY
                    await anyio.sleep(0.001)
            cut = proxy.statistics().cut
    with client:
        stats = client.info("commandstats")
        stored = client.pipeline()
        for event_id in acknowledged:
            stored.zscore(queue_key("PaymentCheck", "schedule"), event_id)
        scores = stored.execute()
    script_calls = stats.get("cmdstat_fcall", {}).get("calls", 0)
    lost = [event_id for event_id, score in zip(acknowledged, scores, strict=True) if score is None]
    assert len(acknowledged) == THREADS * PER_THREAD  # every thread got every answer,
    assert {type(scheduled) for scheduled in acknowledged.values()} == {bool}  # its own
    assert lost == []
    assert cut > 0
    # Calls were shared: fewer script calls than enqueues, retries included.
    assert script_calls < len(acknowledged)
