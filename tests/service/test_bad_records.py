"""One bad record never blinds the operator tools, on a real server: a registry entry that is
no count, a dead letter whose attempt is no number, a dead-letter time of inf and a queue key
of the wrong Redis type are each named, and every other type is still shown, by `aioqueue
stats` and `dead list`, by `/stats`, `/dead-letters` and `/metrics`, and by the dashboard's
data."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import orjson
import pytest
import redis.asyncio as redis

from aioqueue import EventServiceBuilder
from aioqueue.testing import EmbeddedServer
from tests.support.common import PaymentCheck, queue_key
from tests.support.ops import ServedApp, api_client, run_cli, serve

Builder = Callable[[], EventServiceBuilder]

DAMAGED_LETTER = {"id": "d-1", "payload": "{}", "attempt": "many", "version": 1, "error": "x"}


@pytest.fixture(scope="module")
def app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as served:
        yield served


async def write_bad_records(service_builder: Builder, client: redis.Redis) -> None:
    """A healthy PaymentCheck queue beside every kind of bad record an audit found."""
    async with service_builder().build() as service:
        await service.enqueue(PaymentCheck(id="p-1", order_id=1), 3600)
    await client.hset("aioqueue:types", mapping={"Bad": "abc", "Zero": "0", "Good": "1"})
    await client.hset(queue_key("Good", "dead_letters"), "d-1", orjson.dumps(DAMAGED_LETTER))
    await client.zadd(queue_key("Good", "dead_letter_times"), {"d-1": float("inf")})
    await client.hset("aioqueue:types", "Broken", "1")
    await client.set(queue_key("Broken", "schedule"), "not a sorted set")


async def test_the_cli_names_bad_records_and_shows_the_rest(
    service_builder: Builder, redis_client: redis.Redis, redis_url: str
) -> None:
    await write_bad_records(service_builder, redis_client)
    env = {"AIOQUEUE_URL": redis_url}

    stats = await run_cli("stats", env=env)
    assert stats.returncode == 0, stats.stderr
    rows = {line.split()[0]: line.split() for line in stats.stdout.splitlines()[1:]}
    assert rows["PaymentCheck"][2] == "1"  # pending
    assert rows["Good"][6] == "1"  # dead
    assert "Traceback" not in stats.stderr
    assert "registry entry 'Bad' = 'abc' is no partition count" in stats.stderr
    assert "registry entry 'Zero' = '0'" in stats.stderr
    assert "Broken cannot be counted" in stats.stderr
    as_json = (await run_cli("stats", "--json", env=env)).json()
    assert {t["type"] for t in as_json["types"]} == {"PaymentCheck", "Good"}
    assert len(as_json["problems"]) == 3

    dead = await run_cli("dead", "list", "Good", env=env)
    assert dead.returncode == 0, dead.stderr
    assert dead.stdout.splitlines()[1].split()[:3] == ["Good", "d-1", "0"]
    assert "attempt 'many' is no count" in dead.stderr
    assert "dead_letter_times (inf) is no time" in dead.stderr


async def test_the_http_api_answers_200_naming_bad_records(
    service_builder: Builder, redis_client: redis.Redis, app: ServedApp
) -> None:
    await write_bad_records(service_builder, redis_client)
    async with api_client(app.base_url) as http:
        stats = await http.get("/stats")
        assert stats.status_code == 200, stats.text
        assert {t["type"] for t in stats.json()["types"]} == {"PaymentCheck", "Good"}
        assert any("Broken cannot be counted" in p for p in stats.json()["problems"])

        letters = await http.get("/dead-letters", params={"type": "Good"})
        assert letters.status_code == 200, letters.text
        [letter] = letters.json()["dead_letters"]
        assert letter["id"] == "d-1"
        assert "attempt 'many' is no count" in letter["damage"]

        metrics = await http.get("/metrics")
        assert metrics.status_code == 200, metrics.text
        assert 'aioqueue_queue_events{state="pending",type="PaymentCheck"} 1.0' in metrics.text
