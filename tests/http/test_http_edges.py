"""The HTTP API at its edges, through a real `aioqueue serve` and a real HTTP client: due
times out of range, deeply nested payloads, tokens that would protect nothing, ids with '/',
and Redis down."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest
import redis.asyncio as redis

from aioqueue import Event, EventServiceBuilder
from aioqueue.http import create_app
from aioqueue.testing import EmbeddedServer, free_port
from tests.support.common import queue_key, wait_until
from tests.support.ops import ServedApp, api_client, declare, run_cli, serve

Builder = Callable[[], EventServiceBuilder]
HUNDRED_YEARS = 36525 * 86400


@dataclass
class Parcel(Event):
    id: str


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as served:
        yield served


@pytest.fixture
async def http(app: ServedApp, redis_client: redis.Redis) -> AsyncIterator[httpx.AsyncClient]:
    await declare(redis_client, "Parcel")
    async with api_client(app.base_url) as client:
        yield client


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({"at": 1e20}, "at is out of range: epoch seconds must fall in the years 1 to 9999"),
        ({"at": -1e12}, "at is out of range: epoch seconds must fall in the years 1 to 9999"),
        ({"at": "9999-12-31T23:59:59Z"}, "must be at most 100 years ahead"),
        ({"delay": 1e300}, "delay must be at most 100 years (3155760000 s)"),
        ({"delay": HUNDRED_YEARS + 1}, "delay must be at most 100 years"),
    ],
)
async def test_due_times_out_of_range_are_refused(
    http: httpx.AsyncClient, redis_client: redis.Redis, when: dict[str, Any], message: str
) -> None:
    response = await http.post("/events", json={"type": "Parcel", "id": "p", **when})
    assert response.status_code == 422, response.text
    assert message in response.json()["error"]
    assert await redis_client.exists(queue_key("Parcel", "events")) == 0


async def test_a_delay_of_a_hundred_years_is_the_longest_accepted(
    http: httpx.AsyncClient, redis_client: redis.Redis
) -> None:
    response = await http.post(
        "/events", json={"type": "Parcel", "id": "p", "delay": HUNDRED_YEARS}
    )
    assert response.status_code == 201, response.text
    due_ms = await redis_client.zscore(queue_key("Parcel", "schedule"), "p")
    assert due_ms is not None
    assert abs(due_ms - (time.time() + HUNDRED_YEARS) * 1000) < 60_000


def nested_body(depth: int) -> bytes:
    """A valid event whose payload nests `depth` objects (the payload itself is the first)."""
    payload = '{"a":' * (depth - 1) + '{"b":1}' + "}" * (depth - 1)
    return f'{{"type":"Parcel","id":"p","delay":60,"payload":{payload}}}'.encode()


async def test_a_registry_entry_that_is_no_count_answers_409_and_stores_nothing(
    http: httpx.AsyncClient, redis_client: redis.Redis
) -> None:
    await redis_client.hset("aioqueue:types", "Parcel", "abc")
    response = await http.post("/events", json={"type": "Parcel", "id": "p", "delay": 1})
    assert response.status_code == 409, response.text
    assert "no partition count" in response.json()["error"]
    assert await redis_client.exists(queue_key("Parcel", "events")) == 0
    assert await redis_client.hget("aioqueue:types", "Parcel") == b"abc"


async def test_payload_nesting_up_to_254_levels_is_stored(
    http: httpx.AsyncClient, redis_client: redis.Redis
) -> None:
    response = await http.post("/events", content=nested_body(254))
    assert response.status_code == 201, response.text
    assert await redis_client.hexists(queue_key("Parcel", "events"), "p")


@pytest.mark.parametrize("depth", [255, 600, 1023])
async def test_deeper_payloads_are_refused(
    http: httpx.AsyncClient, redis_client: redis.Redis, depth: int
) -> None:
    response = await http.post("/events", content=nested_body(depth))
    assert response.status_code == 422, response.text
    assert "payload is nested too deeply: at most 254 levels" in response.json()["error"]
    assert await redis_client.exists(queue_key("Parcel", "events")) == 0


async def test_a_body_nested_past_the_json_parser_limit_is_bad_json(
    http: httpx.AsyncClient,
) -> None:
    response = await http.post("/events", content=nested_body(1024))
    assert response.status_code == 400, response.text
    assert "the body is not valid JSON" in response.json()["error"]


ODD_IDS = ["order/7", "x/requeue", "/leading", "trailing/", "a//b", "50% off?#frag"]


async def test_ids_with_slashes_are_shown_and_requeued(
    http: httpx.AsyncClient, service_builder: Builder, redis_client: redis.Redis
) -> None:
    async def reject(event: Parcel) -> bool:
        raise ValueError(f"refused {event.id}")

    service = service_builder().retry_attempts(1).build()
    async with service:
        service.add_handler(Parcel, reject)
        await service.enqueue_many([Parcel(id=event_id) for event_id in ODD_IDS], 0)

        async def all_dead() -> bool:
            return await redis_client.hlen(queue_key("Parcel", "dead_letters")) == len(ODD_IDS)

        await wait_until(all_dead)

    for event_id in ODD_IDS:
        path = f"/dead-letters/Parcel/{quote(event_id, safe='')}"
        shown = await http.get(path)
        assert shown.status_code == 200, (event_id, shown.text)
        assert (shown.json()["id"], shown.json()["error"]) == (
            event_id,
            f"attempt 1 raised ValueError: refused {event_id}",
        )
        requeued = await http.post(f"{path}/requeue")
        assert requeued.status_code == 200, (event_id, requeued.text)
        assert requeued.json() == {"type": "Parcel", "id": event_id, "result": "requeued"}
        assert await redis_client.hexists(queue_key("Parcel", "events"), event_id)
    assert await redis_client.hlen(queue_key("Parcel", "dead_letters")) == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/stats?type=a%7Bb%7D"),
        ("GET", "/dead-letters?type=Parcel&type=a%7Bb%7D"),
        ("GET", "/dead-letters/a%7Bb%7D/p-1"),
        ("POST", "/dead-letters/a%7Bb%7D/p-1/requeue"),
        ("GET", "/events/a%7Bb%7D"),
        ("DELETE", "/events/a%7Bb%7D/p-1"),
    ],
)
async def test_a_type_that_is_no_wire_name_is_refused(
    http: httpx.AsyncClient, method: str, path: str
) -> None:
    response = await http.request(method, path)
    assert response.status_code == 422, response.text
    assert response.json() == {
        "error": "type 'a{b}' is not an event type's wire name: "
        "1-128 letters, digits, '_', '.' or '-'"
    }


async def test_unknown_routes_and_methods_answer_in_json(http: httpx.AsyncClient) -> None:
    missing = await http.get("/no-such-route")
    assert (missing.status_code, missing.json()) == (404, {"error": "Not Found"})
    wrong = await http.delete("/stats")
    assert (wrong.status_code, wrong.json()) == (405, {"error": "Method Not Allowed"})
    # Starlette lists the methods from a set, in no fixed order.
    assert set(wrong.headers["allow"].split(", ")) == {"GET", "HEAD"}


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        (["--token", ""], {}, "the token is empty"),
        ([], {"AIOQUEUE_TOKEN": ""}, "the token is empty"),
        (["--token", "two words"], {}, "the token must be printable ASCII without spaces"),
    ],
)
async def test_serve_refuses_a_token_that_would_protect_nothing(
    redis_url: str, options: list[str], env: dict[str, str], message: str
) -> None:
    # Before the check, `serve` started without authentication and never returned.
    with anyio.fail_after(30):
        result = await run_cli(
            "serve", "--url", redis_url, "--port", str(free_port()), *options, env=env
        )
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"aioqueue serve: --token or AIOQUEUE_TOKEN: {message}")


def test_create_app_refuses_an_empty_token(redis_url: str) -> None:
    with pytest.raises(ValueError, match="the token is empty"):
        create_app(url=redis_url, token="")


ROUTES = [
    ("GET", "/healthz"),
    ("GET", "/stats"),
    ("GET", "/dead-letters"),
    ("GET", "/dead-letters/Parcel/p-1"),
    ("POST", "/dead-letters/Parcel/p-1/requeue"),
    ("POST", "/events"),
    ("GET", "/metrics"),
]


async def answers(client: httpx.AsyncClient) -> dict[str, tuple[int, str, Any]]:
    event = {"type": "Parcel", "id": "p-1", "delay": 1}
    result = {}
    for method, path in ROUTES:
        response = await client.request(method, path, json=event if path == "/events" else None)
        body = response.json() if "json" in response.headers["content-type"] else response.text
        result[path] = (response.status_code, response.headers["content-type"], body)
    return result


async def test_every_route_answers_json_503_while_redis_is_down_and_recovers(
    server_factory: Callable[..., EmbeddedServer],
) -> None:
    server = server_factory()
    declaring = redis.Redis.from_url(server.url)
    await declare(declaring, "Parcel")
    await declaring.aclose()
    with serve(server.url) as served:
        async with api_client(served.base_url, timeout=30) as client:
            assert {path: status for path, (status, _, _) in (await answers(client)).items()} == {
                "/healthz": 200,
                "/stats": 200,
                "/dead-letters": 200,
                "/dead-letters/Parcel/p-1": 404,
                "/dead-letters/Parcel/p-1/requeue": 404,
                "/events": 201,
                "/metrics": 200,
            }
            server.stop(keep_data=True)
            during = await answers(client)
            # A scrape still answers: that Redis is down is what it reports.
            status, _, metrics = during.pop("/metrics")
            assert status == 200
            assert "aioqueue_redis_up 0.0" in metrics
            for path, (status, content_type, body) in during.items():
                assert (status, content_type) == (503, "application/json"), (path, body)
                assert body["error"].startswith("Redis is unavailable: "), (path, body)
            server.start()
            assert (await client.get("/stats")).status_code == 200
            assert "aioqueue_redis_up 1.0" in (await client.get("/metrics")).text
    # The page itself needs no Redis.
    port = free_port()
    with serve(f"redis://127.0.0.1:{port}", ready_path="/") as served:
        async with api_client(served.base_url, timeout=30) as client:
            statuses = {path: status for path, (status, _, _) in (await answers(client)).items()}
            assert statuses.pop("/metrics") == 200
            assert set(statuses.values()) == {503}
