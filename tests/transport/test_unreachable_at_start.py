"""A service or producer that cannot reach Redis at start says so in one exception that
names the server, its password masked, and the cause; the README's example against a
closed port ends in a few lines, not pages of retry warnings and chained tracebacks."""

from __future__ import annotations

import os
import sys
from urllib.parse import urlsplit

import anyio
import pytest
import redis
import redis.asyncio

import aioqueue._transport.client
from aioqueue import (
    EventService,
    RedisUnavailableError,
    ServiceState,
    ServiceStateError,
    SyncProducer,
)
from aioqueue._transport.client import RedisClient
from aioqueue._transport.reaching import display_url
from aioqueue.testing import CuttingProxy, free_port
from tests.support.common import PaymentCheck, Recorder, wait_until
from tests.support.docs_blocks import ROOT, blocks

pytestmark = pytest.mark.backends("standalone")


def readme_example() -> str:
    [code] = [
        block.code
        for block in blocks(ROOT / "README.md")
        if block.language == "python" and "asyncio.run(main())" in block.code
    ]
    return code


async def test_the_readme_example_against_a_closed_port_fails_in_a_few_lines() -> None:
    port = free_port()
    env = {**os.environ, "AIOQUEUE_URL": f"redis://:hunter2@127.0.0.1:{port}"}
    with anyio.fail_after(30):
        result = await anyio.run_process(
            [sys.executable, "-c", readme_example()], env=env, check=False
        )
    stderr = result.stderr.decode()
    assert result.returncode == 1
    assert result.stdout == b""
    assert "hunter2" not in stderr
    # One traceback (the user's frames, asyncio's and three of the library's), no chain.
    assert stderr.count("Traceback") == 1, stderr
    assert "During handling" not in stderr
    assert "direct cause" not in stderr
    assert len(stderr.splitlines()) <= 25, stderr
    last = stderr.splitlines()[-1]
    assert last.startswith(
        f"aioqueue._model.errors.RedisUnavailableError: cannot reach Redis at "
        f"redis://:***@127.0.0.1:{port}: ConnectionError: "
    ), last


async def test_a_service_that_cannot_reach_its_server_is_closed_with_one_error() -> None:
    port = free_port()
    # from_url: a client made with Redis(host=..., port=...) retries for seconds first.
    yours = redis.asyncio.Redis.from_url(f"redis://127.0.0.1:{port}")
    service = EventService.builder().client(yours).build()
    with pytest.raises(RedisUnavailableError) as raised:
        async with service:
            pytest.fail("the block must not run")
    # Without a URL, the client's own address; still a redis-py ConnectionError to catch.
    assert str(raised.value).startswith(f"cannot reach Redis at 127.0.0.1:{port}: ")
    assert isinstance(raised.value, redis.exceptions.ConnectionError)
    assert raised.value.__cause__ is None
    assert raised.value.__suppress_context__
    assert service.state is ServiceState.CLOSED
    with pytest.raises(ServiceStateError, match="build a new one"):
        await service.__aenter__()
    await yours.aclose()  # the caller's client, never closed by the service

    cluster = EventService.builder().url(f"redis+cluster://u:pw@127.0.0.1:{port}").build()
    with pytest.raises(RedisUnavailableError, match=r"redis\+cluster://u:\*\*\*@127\.0\.0\.1"):
        async with cluster:
            pass


async def test_a_server_that_answers_with_an_error_is_reached(
    redis_url: str, redis_client: RedisClient
) -> None:
    """A server that answers, if with an error (here a PING refused by an ACL), is there:
    the start goes on, and the service's loops take what comes."""
    admin = redis.asyncio.Redis.from_url(redis_url)
    await admin.acl_setuser(
        "noping", enabled=True, passwords=["+pw"], commands=["+@all", "-ping"], keys=["*"],
        channels=["*"],
    )  # fmt: skip
    try:
        client = redis.asyncio.Redis.from_url(redis_url, username="noping", password="pw")
        async with EventService.builder().client(client).build() as service:
            assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
        await client.aclose()
    finally:
        await admin.acl_deluser("noping")
        await admin.aclose()


def proxy_before_cluster(redis_url: str) -> CuttingProxy:
    """A proxy before the startup node of the cluster at `redis_url`: a service given the
    proxy's address reads the slot map through it, then reaches the nodes directly."""
    port = urlsplit(redis_url).port
    assert port is not None, redis_url
    return CuttingProxy(port)


@pytest.mark.backends("cluster")
async def test_a_cluster_start_rides_out_a_connection_cut_while_it_reads_the_slot_map(
    redis_url: str, redis_client: RedisClient
) -> None:
    """A cluster start whose slot map read loses its connection (a failover, a node closing
    clients, a reset) reads it again: the cluster is there. Before, the one cut failed the
    start with RedisUnavailableError, as the chaos run's producer saw on a cluster whose
    nodes closed connections; a standalone client's PING had redis-py's retries."""
    async with proxy_before_cluster(redis_url) as proxy:
        service = (
            EventService.builder()
            .url(f"redis+cluster://127.0.0.1:{proxy.port}")
            .scheduling_interval(0.05)
            .build()
        )
        handler = Recorder()
        service.add_handler(PaymentCheck, handler)
        proxy.hold_replies()  # the first read of the slot map waits for its reply

        async def first_read_sent() -> bool:
            return proxy.statistics().open == 1

        async with anyio.create_task_group() as tasks:
            started = anyio.Event()

            async def start_and_run() -> None:
                async with service:
                    started.set()
                    assert await service.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
                    await handler.wait_for(1)

            tasks.start_soon(start_and_run)
            await wait_until(first_read_sent)
            assert proxy.cut_all() == 1
            proxy.release_replies()
            with anyio.fail_after(10):
                await started.wait()
        assert handler.ids == ["p-1"]
        # The read was sent again on a connection of its own.
        assert proxy.statistics().accepted >= 2
        assert proxy.statistics().cut == 1


@pytest.mark.backends("cluster")
async def test_a_cluster_that_does_not_answer_is_asked_once(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot map read that outlives the reply deadline is not sent again: the start fails
    after one deadline, not three."""
    monkeypatch.setattr(aioqueue._transport.client, "REPLY_TIMEOUT", 0.5)
    async with proxy_before_cluster(redis_url) as proxy:
        proxy.hold_replies()
        service = EventService.builder().url(f"redis+cluster://127.0.0.1:{proxy.port}").build()
        with pytest.raises(RedisUnavailableError, match="TimeoutError"):
            async with service:
                pytest.fail("the block must not run")
        assert proxy.statistics().accepted == 1
        proxy.release_replies()


def test_a_sync_producer_names_the_server_on_its_first_call() -> None:
    port = free_port()
    producer = SyncProducer(f"redis://me:hunter2@127.0.0.1:{port}/0")
    with producer, pytest.raises(RedisUnavailableError) as raised:
        producer.enqueue(PaymentCheck(id="p-1", order_id=1), 60)
    message = str(raised.value)
    assert message.startswith(f"cannot reach Redis at redis://me:***@127.0.0.1:{port}/0: ")
    assert "hunter2" not in message
    assert isinstance(raised.value, redis.exceptions.ConnectionError)  # as before

    yours = redis.Redis.from_url(f"redis://127.0.0.1:{port}")
    with pytest.raises(RedisUnavailableError, match=f"at 127.0.0.1:{port}: ConnectionError"):
        SyncProducer(client=yours).cancel(PaymentCheck, "p-1")
    yours.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://:pw@host:1", "redis://:***@host:1"),
        ("rediss://user:pw@host:1/2?ssl_cert_reqs=none", "rediss://user:***@host:1/2?ssl_cert_reqs=none"),
        ("redis://host:1?password=pw&db=3", "redis://host:1?password=***&db=3"),
        ("redis+sentinel://:pw@a:26379,b:26379/main?sentinel_password=s",
         "redis+sentinel://:***@a:26379,b:26379/main?sentinel_password=***"),
        ("redis://[::1:6379", "(an unreadable URL)"),
    ],
)  # fmt: skip
def test_display_url_masks_every_password(url: str, shown: str) -> None:
    assert display_url(url) == shown
