"""The schedule over HTTP: list, show, run now and cancel, through a real uvicorn process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from aioqueue import EventServiceBuilder
from aioqueue.testing import EmbeddedServer
from tests.support.common import PaymentCheck, Recorder, wait_until
from tests.support.ops import ServedApp, api_client, serve

Builder = Callable[[], EventServiceBuilder]


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as served:
        yield served


@pytest.fixture
async def http(app: ServedApp, redis_backend: str) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(app.base_url) as client:
        yield client


@pytest.mark.backends("standalone")
async def test_list_pages_and_filters(http: httpx.AsyncClient, service_builder: Builder) -> None:
    start = datetime.now(timezone.utc) + timedelta(hours=1)
    async with service_builder().enable_scheduling(False).build() as service:
        for n in range(5):
            await service.enqueue(PaymentCheck(id=f"p/{n}", order_id=n), at=start + timedelta(
                minutes=n))  # fmt: skip
    first = await http.get("/events/PaymentCheck", params={"limit": 2})
    assert first.status_code == 200, first.text
    body = first.json()
    assert [e["id"] for e in body["events"]] == ["p/0", "p/1"]
    assert body["events"][0]["state"] == "waiting"
    second = await http.get("/events/PaymentCheck", params={"cursor": body["next_cursor"]})
    assert [e["id"] for e in second.json()["events"]] == ["p/2", "p/3", "p/4"]
    assert second.json()["next_cursor"] is None
    window = await http.get("/events/PaymentCheck", params={
        "due_after": (start + timedelta(minutes=1)).isoformat(),
        "due_before": (start + timedelta(minutes=3)).isoformat(),
    })  # fmt: skip
    assert [e["id"] for e in window.json()["events"]] == ["p/1", "p/2"]
    for params in ({"cursor": "nope"}, {"limit": "0"}, {"due_before": "tomorrow"}):
        refused = await http.get("/events/PaymentCheck", params=params)
        assert refused.status_code == 422, params
        assert "error" in refused.json()


@pytest.mark.backends("standalone")
async def test_show_run_now_and_cancel(http: httpx.AsyncClient, service_builder: Builder) -> None:
    handled = Recorder()
    async with service_builder().build() as service:
        await service.enqueue(PaymentCheck(id="a/1", order_id=1), 3600, context={"k": "v"})
        await service.enqueue(PaymentCheck(id="a/2", order_id=2), 3600)
        shown = await http.get("/events/PaymentCheck/a/1")
        assert shown.status_code == 200, shown.text
        assert (shown.json()["state"], shown.json()["context"]) == ("waiting", {"k": "v"})
        assert (await http.get("/events/PaymentCheck/nope")).status_code == 404

        service.add_handler(PaymentCheck, handled)
        ran = await http.post("/events/PaymentCheck/a/1/run-now")
        assert ran.status_code == 200, ran.text
        assert ran.json()["result"] == "due"
        await handled.wait_for(1)
        assert handled.ids == ["a/1"]

        async def gone() -> bool:
            return (await http.get("/events/PaymentCheck/a/1")).status_code == 404

        await wait_until(gone)
        assert (await http.post("/events/PaymentCheck/a/1/run-now")).status_code == 404

        cancelled = await http.delete("/events/PaymentCheck/a/2")
        assert cancelled.status_code == 200
        assert cancelled.json()["cancelled"] is True
        assert await service.inspect(PaymentCheck, "a/2") is None
        assert (await http.delete("/events/PaymentCheck/a/2")).status_code == 404
