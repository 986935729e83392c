"""examples/flask_app.py under Flask's test client, from several threads at once, with an
async service delivering what its route scheduled."""

from __future__ import annotations

import importlib.util
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from aioqueue import EventServiceBuilder
from aioqueue._transport.client import RedisClient
from tests.support.common import Recorder

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flask_app.py"
Builder = Callable[[], EventServiceBuilder]

THREADS = 6
ORDERS_PER_THREAD = 20


@pytest.fixture
def flask_app(
    redis_url: str, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """The example imported as a fresh module on the test's server (it reads AIOQUEUE_URL
    at import, as a deployed app reads its environment)."""
    monkeypatch.setenv("AIOQUEUE_URL", redis_url)
    spec = importlib.util.spec_from_file_location("flask_app", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "flask_app", module)
    spec.loader.exec_module(module)
    yield module
    module.producer.close()


async def test_requests_from_several_threads_are_each_delivered_once(
    flask_app: ModuleType, service_builder: Builder
) -> None:
    responses: list[tuple[int, object]] = []
    start = threading.Barrier(THREADS)

    def post_orders(thread: int) -> None:
        client = flask_app.app.test_client()  # one per thread: a client keeps cookies
        start.wait()
        for n in range(ORDERS_PER_THREAD):
            response = client.post(f"/orders/o-{thread}-{n}/reminder?delay=0")
            responses.append((response.status_code, response.get_json()["scheduled"]))

    def post_from_threads() -> None:
        threads = [threading.Thread(target=post_orders, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(flask_app.PaymentReminder, recorder, parallelism=8)
        await anyio.to_thread.run_sync(post_from_threads)
        assert responses == [(202, True)] * (THREADS * ORDERS_PER_THREAD)
        await recorder.wait_for(THREADS * ORDERS_PER_THREAD)
    expected = [
        f"reminder-o-{thread}-{n}" for thread in range(THREADS) for n in range(ORDERS_PER_THREAD)
    ]
    assert sorted(recorder.ids) == sorted(expected)


def test_a_second_request_for_a_pending_reminder_keeps_it_and_bad_input_is_a_400(
    flask_app: ModuleType,
) -> None:
    client = flask_app.app.test_client()
    first = client.post("/orders/o-1/reminder")
    again = client.post("/orders/o-1/reminder")
    refused = client.post("/orders/o-2/reminder?delay=-5")
    assert (first.status_code, first.get_json()["scheduled"]) == (202, True)
    assert (again.status_code, again.get_json()["scheduled"]) == (202, False)
    assert refused.status_code == 400
    assert "delay must be >= 0" in refused.get_json()["error"]
