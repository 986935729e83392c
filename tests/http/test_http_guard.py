"""The HTTP API is safe to leave running, through a real `aioqueue serve` and a real HTTP
client: other web pages cannot write through the operator's browser (JSON-only writes, a
foreign Origin refused), DNS rebinding is refused by the Host check, and a non-loopback bind
needs a token or an explicit --insecure."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx
import orjson
import pytest
import redis.asyncio as redis

from aioqueue.http._guard import hosts_for_bind
from aioqueue.testing import EmbeddedServer
from tests.support.common import queue_key
from tests.support.ops import ROOT, ServedApp, declare, serve

pytestmark = pytest.mark.backends("standalone")


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url, "--allow-host", "queues.example") as served:
        yield served


@pytest.fixture
async def http(app: ServedApp, redis_client: redis.Redis) -> AsyncIterator[httpx.AsyncClient]:
    await declare(redis_client, "Parcel")
    async with httpx.AsyncClient(base_url=app.base_url) as client:
        yield client


EVENT = {"type": "Parcel", "id": "p-1", "delay": 60}


async def test_a_write_that_is_not_json_is_refused(
    http: httpx.AsyncClient, redis_client: redis.Redis
) -> None:
    """A cross-site form or text/plain POST needs no preflight; a JSON one does."""
    body = orjson.dumps(EVENT)
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {} if content_type is None else {"Content-Type": content_type}
        response = await http.post("/events", content=body, headers=headers)
        assert response.status_code == 415, (content_type, response.text)
        assert "application/json" in response.json()["error"]
    requeue = await http.post("/dead-letters/Parcel/p-1/requeue")
    assert requeue.status_code == 415
    assert not await redis_client.exists(queue_key("Parcel", "events"))
    accepted = await http.post("/events", json=EVENT)
    assert accepted.status_code == 201, accepted.text


async def test_a_foreign_origin_is_refused_and_the_own_one_accepted(
    http: httpx.AsyncClient, app: ServedApp, redis_client: redis.Redis
) -> None:
    for origin in ("https://evil.example", "http://127.0.0.1:1", "null"):
        response = await http.post("/events", json=EVENT, headers={"Origin": origin})
        assert response.status_code == 403, (origin, response.text)
        read = await http.get("/stats", headers={"Origin": origin})
        assert read.status_code == 403
    assert not await redis_client.exists(queue_key("Parcel", "events"))
    own = await http.post("/events", json=EVENT, headers={"Origin": app.base_url})
    assert own.status_code == 201, own.text


async def test_an_unknown_host_is_refused_against_dns_rebinding(
    http: httpx.AsyncClient, app: ServedApp
) -> None:
    port = app.base_url.rsplit(":", 1)[1]
    for host in ("evil.example", f"evil.example:{port}", f"attacker.test:{port}"):
        for path in ("/stats", "/", "/dashboard.js", "/dashboard_type.js", "/dashboard.css"):
            response = await http.get(path, headers={"Host": host})
            assert response.status_code == 403, (host, path, response.text)
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"queues.example:{port}"):
        assert (await http.get("/stats", headers={"Host": host})).status_code == 200, host


async def test_a_public_bind_needs_a_token_or_insecure(redis_server: EmbeddedServer) -> None:
    command = [sys.executable, "-m", "aioqueue", "serve", "--url", redis_server.url,
               "--host", "0.0.0.0", "--port", "70000"]  # fmt: skip
    refused = await anyio.run_process(command, cwd=ROOT, check=False)
    assert refused.returncode == 1
    assert b"refusing to serve 0.0.0.0 without a token" in refused.stderr
    # With a token (or --insecure) the check passes; port 70000 then cannot be bound, which
    # shows the start went past the check without leaving a server behind.
    for extra in (["--token", "s3cret"], ["--insecure"]):
        with anyio.fail_after(30):
            started = await anyio.run_process([*command, *extra], cwd=ROOT, check=False)
        assert started.returncode != 0
        assert b"refusing to serve" not in started.stderr, extra


def test_the_hosts_of_a_bind_are_spelled_as_a_host_header_carries_them() -> None:
    """An IPv6 address arrives in brackets (`Host: [2001:db8::5]:8000`), and a Host header is
    compared without case: a server bound to an IPv6 address, or given a name in capitals,
    answers the requests made to it."""
    public = hosts_for_bind("2001:DB8:0::5", 8000, ["Queues.Example", "fd00::1"])
    assert {"[2001:db8::5]", "[2001:db8::5]:8000", "[fd00::1]:8000"} <= public
    assert {"queues.example", "queues.example:8000"} <= public
    assert "2001:db8::5:8000" not in public  # no ambiguous unbracketed form
    loopback = hosts_for_bind("::1", 8000)
    assert {"[::1]:8000", "127.0.0.1:8000", "localhost:8000"} <= loopback
    assert hosts_for_bind("10.0.0.5", 80) == {"10.0.0.5", "10.0.0.5:80"}
