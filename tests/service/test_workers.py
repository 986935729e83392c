"""The worker registry and the probes, with real worker processes (`aioqueue worker` running
tests/support/workers/registry_worker.py): live workers listed with their handlers, a killed one
gone within three heartbeats, a stopped one gone at once; `/livez` and `/readyz` on the
health port as the loop blocks and Redis goes away and comes back; `aioqueue check`'s exit
codes; a worker whose service dies exits non-zero."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio
import pytest

from aioqueue import EventServiceBuilder, WorkerState
from aioqueue._transport.client import RedisClient
from aioqueue._wire.registry import registry_key
from aioqueue._wire.workers import LIVES_FOR_BEATS, read_workers
from aioqueue.testing import EmbeddedServer, free_port
from tests.support.common import EVERY_TOPOLOGY, OrderTimeout, PaymentCheck, Recorder, wait_until
from tests.support.ops import ROOT, run_cli
from tests.support.script_calls import ScriptCall

Builder = Callable[[], EventServiceBuilder]

PREFIX = "registry"
HEARTBEAT = 0.5


@contextmanager
def worker_process(
    redis_url: str, *options: str, prefix: str = PREFIX, **settings: str
) -> Iterator[subprocess.Popen[str]]:
    """`aioqueue worker` on tests/support/workers/registry_worker.py; killed on the way out."""
    command = [sys.executable, "-m", "aioqueue", "worker"]
    factory = "tests.support.workers.registry_worker:create_service"
    worker = subprocess.Popen(
        [*command, factory, "--url", redis_url, "--prefix", prefix, *options],
        cwd=ROOT,
        env={**os.environ, "HEARTBEAT": str(HEARTBEAT), **settings},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield worker
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.communicate()


def probe(port: int, path: str) -> tuple[int, dict[str, str]]:
    """GET a path of a health port: (status, JSON body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return 0, {}  # not listening yet


async def probe_until(port: int, path: str, status: int, within: float = 20) -> dict[str, str]:
    """Probes until `path` answers `status`; returns that answer's body."""
    with anyio.fail_after(within):
        while True:
            answered, body = await anyio.to_thread.run_sync(probe, port, path)
            if answered == status:
                return body
            await anyio.sleep(0.05)


async def live_ids(client: RedisClient) -> set[int]:
    """The pids of the running workers the registry lists."""
    listed = await read_workers(client, PREFIX)
    return {worker.pid for worker in listed.workers if worker.state is WorkerState.RUNNING}


async def test_live_workers_are_listed_and_a_killed_one_drops_out_within_three_heartbeats(
    redis_url: str, redis_client: RedisClient
) -> None:
    with (
        worker_process(redis_url, PARALLELISM="4") as first,
        worker_process(redis_url, SECOND_TYPE="1") as second,
    ):

        async def both_listed() -> bool:
            return await live_ids(redis_client) == {first.pid, second.pid}

        await wait_until(both_listed, within=30)
        listing = await run_cli("workers", "--url", redis_url, "--prefix", PREFIX, "--json")
        assert listing.returncode == 0, listing.stderr
        by_pid = {worker["pid"]: worker for worker in listing.json()["workers"]}
        assert [(h["type"], h["parallelism"]) for h in by_pid[first.pid]["handlers"]] == [
            ("PaymentCheck", 4)
        ]
        assert sorted(h["type"] for h in by_pid[second.pid]["handlers"]) == [
            "OrderTimeout",
            "PaymentCheck",
        ]
        assert all(worker["heartbeat"] == HEARTBEAT for worker in by_pid.values())
        assert listing.json()["live_workers"] == {"PaymentCheck": 2, "OrderTimeout": 1}
        table = await run_cli("workers", "--url", redis_url, "--prefix", PREFIX)
        assert "PaymentCheck 0/4" in table.stdout, table.stdout

        # The last beat was at most one heartbeat ago: the record lapses within three after.
        first.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()

        async def only_second() -> bool:
            return await live_ids(redis_client) == {second.pid}

        await wait_until(only_second, within=10)
        assert time.monotonic() - killed_at <= (LIVES_FOR_BEATS + 1) * HEARTBEAT + 0.5

        # A worker that stops cleanly leaves the list as it exits.
        second.send_signal(signal.SIGTERM)
        await anyio.to_thread.run_sync(second.wait)
        assert second.returncode == 0
        assert (await read_workers(redis_client, PREFIX)).workers == []


async def test_check_exits_0_only_when_a_running_worker_answers_for_the_host_or_type(
    redis_url: str, redis_client: RedisClient
) -> None:
    check = ("check", "--url", redis_url, "--prefix", PREFIX)
    nobody = await run_cli(*check)
    assert nobody.returncode == 1
    assert "no running worker on host" in nobody.stderr
    with worker_process(redis_url) as worker:

        async def listed() -> bool:
            return await live_ids(redis_client) == {worker.pid}

        await wait_until(listed, within=30)
        here = await run_cli(*check)
        assert here.returncode == 0, here.stderr
        assert here.stdout.startswith("ok: worker ")
        assert (await run_cli(*check, "--type", "PaymentCheck")).returncode == 0
        other_type = await run_cli(*check, "--type", "OrderTimeout")
        assert other_type.returncode == 1
        assert "no running worker for OrderTimeout" in other_type.stderr
        elsewhere = await run_cli(*check, "--host", "another-host")
        assert elsewhere.returncode == 1
    unreachable = await run_cli("check", "--url", f"redis://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 1
    assert unreachable.stderr.startswith("aioqueue check: cannot reach redis://127.0.0.1:")
    assert len(unreachable.stderr.splitlines()) == 1


async def test_readyz_fails_while_redis_is_down_and_recovers_with_it(
    server_factory: Callable[..., EmbeddedServer],
) -> None:
    server = server_factory()
    port = free_port()
    with worker_process(server.url, "--health-port", str(port)) as worker:
        await probe_until(port, "/readyz", 200)
        server.stop(keep_data=True)
        stopped_at = time.monotonic()
        body = await probe_until(port, "/readyz", 503)
        # One probe's bound (1 s for the loop, 1 s for the PING), plus the probe's own time.
        assert time.monotonic() - stopped_at < 4
        assert body["status"] == "failing"
        assert "Redis did not answer" in body["reason"]
        # Alive all the while: a restart would not bring Redis back.
        assert (await anyio.to_thread.run_sync(probe, port, "/livez"))[0] == 200
        await anyio.to_thread.run_sync(server.start)
        assert (await probe_until(port, "/readyz", 200))["status"] == "ok"
        assert worker.poll() is None


async def test_livez_fails_while_a_handler_blocks_the_event_loop(
    redis_url: str, service_builder: Builder
) -> None:
    port = free_port()
    with worker_process(redis_url, "--health-port", str(port), BLOCK_SECONDS="4") as worker:
        await probe_until(port, "/livez", 200)
        async with service_builder().prefix(PREFIX).enable_scheduling(False).build() as producer:
            await producer.enqueue(PaymentCheck(id="block-1", order_id=1), 0)
        assert worker.stdout is not None
        assert await anyio.to_thread.run_sync(worker.stdout.readline) == "blocking\n"
        status, body = await anyio.to_thread.run_sync(probe, port, "/livez")
        assert status == 503, body
        assert "the event loop did not answer within 1 s" in body["reason"]
        # Once the handler lets the loop go, the worker is alive again.
        await probe_until(port, "/livez", 200)


async def test_a_worker_whose_service_dies_exits_non_zero_with_the_cause(
    redis_url: str, redis_client: RedisClient
) -> None:
    # The type's queue was recorded with 4 partitions; this worker's service has 1: its
    # consumer refuses to take events it would look for in the wrong keys, and the service
    # no longer works.
    await redis_client.hset(registry_key(PREFIX), "PaymentCheck", "4")
    with worker_process(redis_url) as worker:
        with anyio.fail_after(30):
            code = await anyio.to_thread.run_sync(worker.wait)
        assert worker.stderr is not None
        last_line = worker.stderr.read().splitlines()[-1]
    assert code == 1
    assert last_line.startswith("aioqueue worker: the worker stopped: the service's ")
    assert "PartitionCountMismatchError" in last_line


@EVERY_TOPOLOGY
async def test_a_service_lists_itself_with_what_it_holds_and_leaves_when_it_stops(
    service_builder: Builder,
) -> None:
    release = anyio.Event()
    started = Recorder()

    async def hold(event: PaymentCheck) -> bool:
        await started(event)
        await release.wait()
        return True

    service = service_builder().heartbeat(0.1).build()
    service.add_handler(PaymentCheck, hold, parallelism=5)
    service.add_handler(OrderTimeout, Recorder())
    async with service:
        await service.enqueue_many([PaymentCheck(id=f"p-{n}", order_id=n) for n in range(3)], 0)
        await started.wait_for(3)

        async def holding_three() -> bool:
            [worker] = await service.workers()
            return {h.type: h.in_hand for h in worker.handlers} == {
                "PaymentCheck": 3,
                "OrderTimeout": 0,
            }

        await wait_until(holding_three)
        [worker] = await service.workers()
        assert worker.pid == os.getpid()
        assert worker.state is WorkerState.RUNNING
        assert {h.type: h.parallelism for h in worker.handlers} == {
            "PaymentCheck": 5,
            "OrderTimeout": 1,
        }
        assert worker.started_at <= worker.beat_at
        assert (await service.readiness()).ok
        assert service.liveness().ok
        release.set()
    async with service_builder().build() as observer:
        assert await observer.workers() == []


async def test_the_health_port_of_a_service_in_an_app(service_builder: Builder) -> None:
    service = service_builder().health_port(0).health_host("127.0.0.1").build()
    service.add_handler(PaymentCheck, Recorder())
    assert service.health_address is None
    async with service:
        assert service.health_address is not None
        port = service.health_address[1]
        # Ready once the first heartbeat lists the worker, a moment after the start.
        assert await probe_until(port, "/readyz", 200) == {
            "status": "ok",
            "reason": "running; Redis answers",
        }
        status, body = await anyio.to_thread.run_sync(probe, port, "/nothing")
        assert status == 404
        assert "/livez" in body["error"]
    assert service.health_address is None
    assert not service.liveness().ok
    # The port is closed with the service.
    assert (await anyio.to_thread.run_sync(probe, port, "/livez"))[0] == 0


@pytest.mark.parametrize("record", [b"not json", b'{"host": 1}', b"[]"])
async def test_a_record_that_is_no_worker_is_left_out_and_named(
    service_builder: Builder, redis_client: RedisClient, record: bytes
) -> None:
    service = service_builder().heartbeat(0.1).build()
    service.add_handler(PaymentCheck, Recorder())
    async with service:

        async def listed() -> bool:
            return len(await service.workers()) == 1

        await wait_until(listed)
        index = "aioqueue:{workers}:index"
        await redis_client.zadd(index, {"forged": 2**50})
        await redis_client.hset("aioqueue:{workers}:forged", mapping={"record": record})
        listing = await read_workers(redis_client, "aioqueue")
        assert [worker.pid for worker in listing.workers] == [os.getpid()]
        assert listing.unreadable == ["forged"]


async def test_a_heartbeat_is_one_script_call_per_interval(
    service_builder: Builder, script_calls: list[ScriptCall]
) -> None:
    interval = 0.3
    service = service_builder().heartbeat(interval).build()
    service.add_handler(PaymentCheck, Recorder())

    def beats() -> list[float]:
        return [call.at for call in script_calls if call.script == "heartbeat"]

    async def six_beats() -> bool:
        return len(beats()) >= 6

    async with service:
        await wait_until(six_beats)
    gaps = sorted(later - earlier for earlier, later in itertools.pairwise(beats()[:6]))
    # Judged from the beats' own start times rather than counted over a fixed sleep: a beat
    # begins an interval after the last one began, or when the last one's round trip ended
    # if that took longer, so a loaded machine stretches single gaps. None is much shorter
    # than an interval (half of one allows for a late start of the call before; two calls a
    # beat would come back to back), and most are near it (the median under twice an
    # interval: a beat every other interval would put it there).
    assert gaps[0] >= interval / 2
    assert gaps[2] < 1.8 * interval
