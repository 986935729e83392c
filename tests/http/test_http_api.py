"""The HTTP API of `aioqueue serve`, through a real uvicorn process and a real HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import httpx
import orjson
import pytest
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder, event_context
from aioqueue._admin.stats import read_stats
from aioqueue.testing import EmbeddedServer
from tests.support.common import queue_key, wait_until
from tests.support.ops import ServedApp, api_client, declare, serve, stored_envelope

TOKEN = "s3cret-token"
MAX_BODY = 4096
Builder = Callable[[], EventServiceBuilder]


@dataclass
class Invoice(Event):
    id: str
    amount: int
    note: str = ""


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    """One server for the module; the token comes from the environment."""
    with serve(redis_server.url, "--max-body", str(MAX_BODY), env={"AIOQUEUE_TOKEN": TOKEN}) as a:
        yield a


@pytest.fixture
async def http(app: ServedApp, redis_client: redis.Redis) -> AsyncIterator[httpx.AsyncClient]:
    await declare(redis_client, "Invoice")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with api_client(app.base_url, headers=headers) as client:
        yield client


def varying_removed(envelope: dict[str, Any]) -> dict[str, Any]:
    """An envelope without what differs between two enqueues of the same event."""
    return {k: v for k, v in envelope.items() if k not in ("v", "enqueued_at")}


async def test_posted_event_is_stored_exactly_as_the_library_stores_it(
    http: httpx.AsyncClient, service_builder: Builder, redis_client: redis.Redis
) -> None:
    producer = service_builder().enable_scheduling(False).build()
    async with producer:
        await producer.enqueue(
            Invoice(id="lib", amount=12, note="é ✓ 0.1"), 3600, context={"tenant": "acme"}
        )
    response = await http.post(
        "/events",
        json={
            "type": "Invoice",
            "id": "api",
            "delay": 3600,
            "payload": {"amount": 12, "note": "é ✓ 0.1"},
            "context": {"tenant": "acme"},
        },
    )
    assert response.status_code == 201, response.text
    # Checked against the schema the library's service published for Invoice.
    digest = (await http.get("/types/Invoice")).json()["digest"]
    assert response.json() == {"type": "Invoice", "id": "api", "scheduled": True, "schema": digest}
    assert varying_removed(await stored_envelope(redis_client, "Invoice", "api")) == (
        varying_removed(await stored_envelope(redis_client, "Invoice", "lib"))
    )
    schedule = queue_key("Invoice", "schedule")
    lib_due = await redis_client.zscore(schedule, "lib")
    api_due = await redis_client.zscore(schedule, "api")
    assert lib_due is not None
    assert api_due is not None
    assert 0 <= api_due - lib_due < 5000


async def test_posted_event_reaches_a_handler_with_its_context(
    http: httpx.AsyncClient, service_builder: Builder
) -> None:
    handled: list[tuple[Invoice, dict[str, str]]] = []
    done = anyio.Event()

    async def handle(event: Invoice) -> bool:
        handled.append((event, event_context.get()))
        done.set()
        return True

    service = service_builder().build()
    async with service:
        service.add_handler(Invoice, handle)
        body = {"type": "Invoice", "id": "i-1", "delay": 0.05, "payload": {"amount": 7}}
        body["context"] = {"trace": "t-1"}
        assert (await http.post("/events", json=body)).status_code == 201
        with anyio.fail_after(10):
            await done.wait()
    assert handled == [(Invoice(id="i-1", amount=7), {"trace": "t-1"})]


async def test_at_dedupe_and_replace(http: httpx.AsyncClient, redis_client: redis.Redis) -> None:
    at = datetime(2031, 5, 1, 12, 0, 0, 250000, tzinfo=timezone.utc)
    body = {"type": "Invoice", "id": "i-2", "at": at.isoformat(), "payload": {"amount": 1}}
    assert (await http.post("/events", json=body)).status_code == 201
    score = await redis_client.zscore(queue_key("Invoice", "schedule"), "i-2")
    assert score == at.timestamp() * 1000

    kept = await http.post("/events", json={**body, "payload": {"amount": 2}})
    assert (kept.status_code, kept.json()["scheduled"]) == (200, False)
    replaced = await http.post("/events", json={**body, "payload": {"amount": 3}, "replace": True})
    assert replaced.status_code == 201
    envelope = await stored_envelope(redis_client, "Invoice", "i-2")
    assert orjson.loads(envelope["p"]) == {"amount": 3}

    epoch = await http.post("/events", json={**body, "id": "i-3", "at": at.timestamp()})
    assert epoch.status_code == 201
    assert await redis_client.zscore(queue_key("Invoice", "schedule"), "i-3") == score


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "the body must be a JSON object"),
        ({"id": "x", "delay": 1}, "type must be an event type's wire name"),
        ({"type": "a{b}", "id": "x", "delay": 1}, "type must be an event type's wire name"),
        ({"type": "T", "id": "", "delay": 1}, "id must be a non-empty string"),
        ({"type": "T", "id": "x"}, "give exactly one of delay and at="),
        ({"type": "T", "id": "x", "delay": 1, "at": 5}, "give exactly one of delay and at="),
        ({"type": "T", "id": "x", "delay": -1}, "delay must be >= 0"),
        ({"type": "T", "id": "x", "delay": "soon"}, "delay must be a number of seconds"),
        ({"type": "T", "id": "x", "at": "2030-01-01T00:00:00"}, "at must include a time zone"),
        ({"type": "T", "id": "x", "at": "tomorrow"}, "at is not an ISO 8601 time"),
        ({"type": "T", "id": "x", "delay": 1, "payload": [1]}, "payload must be a JSON object"),
        ({"type": "T", "id": "x", "delay": 1, "payload": {"id": "y"}}, "must not contain id"),
        ({"type": "T", "id": "x", "delay": 1, "context": {"a": 1}}, "context must be an object"),
        ({"type": "T", "id": "x", "delay": 1, "replace": "yes"}, "replace must be true or false"),
        ({"type": "T", "id": "x", "delay": 1, "when": 1}, "unknown fields ['when']"),
    ],
)
async def test_invalid_events_are_refused(
    http: httpx.AsyncClient, redis_client: redis.Redis, body: Any, message: str
) -> None:
    response = await http.post("/events", json=body)
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]
    assert await redis_client.exists(queue_key("T", "events")) == 0


async def test_bad_json_and_too_large_bodies(http: httpx.AsyncClient) -> None:
    bad = await http.post("/events", content=b'{"type": "Invoice",')
    assert bad.status_code == 400
    assert "the body is not valid JSON" in bad.json()["error"]

    large = {"type": "Invoice", "id": "big", "delay": 1, "payload": {"note": "x" * MAX_BODY}}
    too_large = await http.post("/events", json=large)
    assert too_large.status_code == 413
    assert f"larger than {MAX_BODY} bytes" in too_large.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:
        # No Content-Length: the limit must hold while the body streams in.
        for _ in range(10):
            yield b" " * 1024

    streamed = await http.post("/events", content=chunks())
    assert streamed.status_code == 413


async def test_token_is_required_for_the_api_only(
    app: ServedApp, redis_client: redis.Redis
) -> None:
    async with api_client(app.base_url) as anonymous:
        missing = await anonymous.get("/stats")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await anonymous.post(
            "/events",
            json={"type": "Invoice", "id": "x", "delay": 1, "payload": {"amount": 1}},
            headers={"Authorization": "Bearer not-the-token"},
        )
        assert wrong.status_code == 401
        assert await redis_client.exists(queue_key("Invoice", "events")) == 0
        for path in ("/dead-letters", "/metrics"):
            assert (await anonymous.get(path)).status_code == 401
        page = await anonymous.get("/")
        assert page.status_code == 200
        assert "<title>aioqueue</title>" in page.text
        # The page's own files, each with its type, never cached (one version at a time).
        for path, media_type, text in (
            ("/dashboard.css", "text/css", "--accent"),
            ("/dashboard.js", "text/javascript", "async function refresh()"),
            ("/dashboard_type.js", "text/javascript", "async function refreshType()"),
        ):
            asset = await anonymous.get(path)
            assert asset.status_code == 200, path
            assert asset.headers["content-type"].startswith(media_type), path
            assert asset.headers["cache-control"] == "no-store", path
            assert text in asset.text, path
            assert f'"{path[1:]}"' in page.text, path
        assert (await anonymous.get("/healthz")).json() == {"ok": True}


async def test_stats_dead_letters_and_requeue(
    http: httpx.AsyncClient, service_builder: Builder, redis_client: redis.Redis
) -> None:
    async def reject(event: Invoice) -> bool:
        raise ValueError(f"declined {event.amount}")

    service = service_builder().retry_attempts(1).build()
    async with service:
        service.add_handler(Invoice, reject)
        await service.enqueue_many([Invoice(id=f"i-{n}", amount=n) for n in range(3)], 0)

        async def all_dead() -> bool:
            return await redis_client.hlen(queue_key("Invoice", "dead_letters")) == 3

        await wait_until(all_dead)
    await service_builder().build().enqueue(Invoice(id="i-2", amount=99), timedelta(hours=1))

    stats = (await http.get("/stats")).json()
    expected = (await read_stats(redis_client, "aioqueue")).to_json()["types"]
    assert stats["prefix"] == "aioqueue"
    assert stats["types"] == expected
    assert stats["types"][0]["dead"] == 3

    listing = (await http.get("/dead-letters", params={"type": "Invoice"})).json()
    letters = {letter["id"]: letter for letter in listing["dead_letters"]}
    assert set(letters) == {"i-0", "i-1", "i-2"}
    assert letters["i-1"]["error"] == "attempt 1 raised ValueError: declined 1"
    one = (await http.get("/dead-letters/Invoice/i-0")).json()
    assert (one["attempts"], orjson.loads(one["payload"])) == (1, {"amount": 0, "note": ""})
    assert (await http.get("/dead-letters/Invoice/nope")).status_code == 404

    requeued = await http.post("/dead-letters/Invoice/i-0/requeue")
    assert (requeued.status_code, requeued.json()["result"]) == (200, "requeued")
    envelope = await stored_envelope(redis_client, "Invoice", "i-0")
    assert envelope.get("attempt", 0) == 0
    assert (await http.post("/dead-letters/Invoice/i-0/requeue")).status_code == 404
    pending = await http.post("/dead-letters/Invoice/i-2/requeue")
    assert (pending.status_code, pending.json()["result"]) == (409, "pending")

    metrics = (await http.get("/metrics")).text
    assert 'aioqueue_queue_events{state="dead",type="Invoice"} 2.0' in metrics
    assert 'aioqueue_queue_events{state="pending",type="Invoice"} 2.0' in metrics
