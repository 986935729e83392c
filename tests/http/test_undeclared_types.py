"""A type no service declared (a misspelt name) is refused by every CLI command and HTTP
route that takes a type, naming the known ones; the opt-in takes it, and a pause made that
way shows wherever pauses are shown. Real processes against a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import anyio
import httpx
import pytest

from aioqueue import EventServiceBuilder
from aioqueue._admin.named_types import MAX_NAMED
from aioqueue._cli import main
from aioqueue._transport.client import RedisClient
from aioqueue.testing import EmbeddedServer
from tests.support.common import PaymentCheck
from tests.support.ops import ServedApp, api_client, run_cli, serve

pytestmark = pytest.mark.backends("standalone")

Builder = Callable[[], EventServiceBuilder]

KNOWN = "known types: PaymentCheck"
OPT_IN = "--allow-undeclared takes it all the same"

# Every command that takes a TYPE, given the misspelt "PaymentChek"; True for those that
# write, which offer --allow-undeclared.
COMMANDS = [
    (("events", "list", "PaymentChek"), False),
    (("events", "show", "PaymentChek", "p-1"), False),
    (("events", "run-now", "PaymentChek", "p-1"), True),
    (("events", "cancel", "PaymentChek", "p-1"), True),
    (("cancel", "PaymentChek", "p-1"), True),
    (("dead", "list", "PaymentChek"), False),
    (("dead", "show", "PaymentChek", "p-1"), False),
    (("dead", "requeue", "PaymentChek", "p-1"), True),
    (("dead", "purge", "PaymentChek", "--all", "--yes"), True),
    (("pause", "PaymentChek"), True),
    (("resume", "PaymentChek"), True),
    (("rate-limit", "PaymentChek", "5"), True),
    (("schema", "PaymentChek"), False),
    (("stats", "PaymentChek"), False),
]


async def declare_payment_check(builder: Builder) -> None:
    """What a deployed producer leaves: the type recorded and its schema published."""
    async with builder().enable_scheduling(False).build() as service:
        await service.enqueue(PaymentCheck(id="p-0", order_id=0), 3600)


async def test_every_command_refuses_an_undeclared_type_naming_the_known_ones(
    service_builder: Builder,
    redis_url: str,
    redis_client: RedisClient,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await declare_payment_check(service_builder)
    for arguments, writes in COMMANDS:
        # In this process (main runs its own event loop, so in a thread): fourteen
        # interpreters would take seconds; the commands' process is tested below.
        code = await anyio.to_thread.run_sync(main, [*arguments, "--url", redis_url])
        out, err = capsys.readouterr()
        assert (code, out) == (1, ""), (arguments, out, err)
        [line] = err.splitlines()
        assert line.startswith(f"aioqueue {arguments[0]}: unknown event type 'PaymentChek' "
                               "under prefix 'aioqueue': no service declared it"), line  # fmt: skip
        assert KNOWN in line, line
        assert (OPT_IN in line) is writes, line
    # Nothing was written for the misspelt type: no registry entry, no pause, no limit.
    assert await redis_client.hkeys("aioqueue:types") == [b"PaymentCheck"]
    assert await redis_client.keys("aioqueue:{PaymentChek}*") == []


async def test_a_pause_of_an_undeclared_type_needs_the_opt_in_and_then_shows(
    service_builder: Builder, redis_url: str
) -> None:
    env = {"AIOQUEUE_URL": redis_url}
    await declare_payment_check(service_builder)
    refused = await run_cli("pause", "Taks", env=env)
    assert refused.returncode == 1
    paused = await run_cli("pause", "Taks", "--allow-undeclared", "--json", env=env)
    assert paused.returncode == 0, paused.stderr
    assert paused.json() == {"type": "Taks", "paused": True, "returned_to_schedule": 0}
    async with service_builder().build() as service:
        assert await service.paused() == {"Taks"}
    stats = await run_cli("stats", "--json", env=env)
    assert {t["type"]: t["paused"] for t in stats.json()["types"]} == {
        "PaymentCheck": False,
        "Taks": True,
    }
    table = await run_cli("stats", env=env)
    [taks] = [line.split() for line in table.stdout.splitlines() if line.startswith("Taks ")]
    assert taks[-2:] == ["yes", "-"]  # PAUSED, RATE LIMIT
    # Recorded by its pause, the type is known now: it is read and resumed without the opt-in.
    listed = await run_cli("events", "list", "Taks", env=env)
    assert (listed.returncode, listed.stdout) == (0, "no pending Taks events\n")
    resumed = await run_cli("resume", "Taks", env=env)
    assert resumed.stdout == "resumed Taks\n", resumed.stderr


async def test_a_type_with_only_a_published_schema_is_declared(
    redis_url: str, redis_client: RedisClient
) -> None:
    schema = b'{"schema": {"type": "object"}, "digest": "0123456789abcdef", "published_at": 1}'
    await redis_client.hset("aioqueue:schemas", "Invoice", schema)
    listed = await run_cli("events", "list", "Invoice", "--url", redis_url)
    assert (listed.returncode, listed.stdout) == (0, "no pending Invoice events\n"), listed.stderr


async def test_the_known_types_named_are_bounded_with_the_closest_first(
    redis_url: str, redis_client: RedisClient
) -> None:
    names = [f"Type{n:02}" for n in range(MAX_NAMED + 10)]
    await redis_client.hset("aioqueue:types", mapping=dict.fromkeys([*names, "PaymentCheck"], 1))
    result = await run_cli("events", "list", "PaymentChek", "--url", redis_url)
    assert result.returncode == 1
    [line] = result.stderr.splitlines()
    listed = line.split("known types: ", 1)[1].removesuffix(" and 11 more").split(", ")
    assert len(listed) == MAX_NAMED
    assert listed[:2] == ["PaymentCheck", "Type00"]
    empty = await run_cli("stats", "Anything", "--url", redis_url, "--prefix", "nothing-here")
    assert "no service has declared any type there yet" in empty.stderr


@pytest.fixture(scope="module")
def strict_app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url) as served:
        yield served


@pytest.fixture(scope="module")
def lenient_app(redis_server: EmbeddedServer) -> Iterator[ServedApp]:
    with serve(redis_server.url, "--allow-undeclared-types") as served:
        yield served


@pytest.fixture
async def strict(
    strict_app: ServedApp, redis_client: RedisClient
) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(strict_app.base_url) as client:
        yield client


@pytest.fixture
async def lenient(
    lenient_app: ServedApp, redis_client: RedisClient
) -> AsyncIterator[httpx.AsyncClient]:
    async with api_client(lenient_app.base_url) as client:
        yield client


async def test_the_http_api_refuses_an_undeclared_type_with_422(
    strict: httpx.AsyncClient, service_builder: Builder, redis_client: RedisClient
) -> None:
    await declare_payment_check(service_builder)
    posted = await strict.post("/events", json={"type": "Knwon", "id": "k-1", "delay": 60})
    assert posted.status_code == 422, posted.text
    body = posted.json()
    assert (body["unknown_types"], body["known_types"], body["known_types_total"]) == (
        ["Knwon"], ["PaymentCheck"], 1)  # fmt: skip
    assert body["error"].startswith("unknown event type 'Knwon' under prefix 'aioqueue'")
    assert '"allow_undeclared": true' in body["error"]
    assert not await redis_client.hexists("aioqueue:types", "Knwon")
    for method, path in (
        ("GET", "/events/Knwon"),
        ("GET", "/events/Knwon/k-1"),
        ("POST", "/events/Knwon/k-1/run-now"),
        ("DELETE", "/events/Knwon/k-1"),
        ("GET", "/types/Knwon"),
        ("GET", "/types/Knwon/histogram"),
        ("POST", "/types/Knwon/pause"),
        ("POST", "/types/Knwon/resume"),
        ("GET", "/dead-letters/Knwon/k-1"),
        ("POST", "/dead-letters/Knwon/k-1/requeue"),
        ("GET", "/stats?type=Knwon"),
        ("GET", "/dead-letters?type=Knwon"),
    ):
        answer = await strict.request(method, path)
        assert answer.status_code == 422, (method, path, answer.text)
        assert answer.json()["unknown_types"] == ["Knwon"], (method, path)
    assert await redis_client.keys("aioqueue:{Knwon}*") == []
    # The declared type goes through, and one post may say its consumers come later.
    assert (await strict.get("/events/PaymentCheck")).status_code == 200
    early = {"type": "Knwon", "id": "k-1", "delay": 60, "allow_undeclared": True}
    assert (await strict.post("/events", json=early)).status_code == 201
    assert await redis_client.hexists("aioqueue:types", "Knwon")
    assert (await strict.get("/events/Knwon")).json()["events"][0]["id"] == "k-1"
    wrong = await strict.post("/events", json={**early, "allow_undeclared": "yes"})
    assert wrong.status_code == 422
    assert wrong.json()["error"] == "allow_undeclared must be true or false"


async def test_a_server_allowing_undeclared_types_takes_them_and_shows_their_pause(
    lenient: httpx.AsyncClient, redis_client: RedisClient
) -> None:
    posted = await lenient.post("/events", json={"type": "Early", "id": "e-1", "delay": 60})
    assert posted.status_code == 201, posted.text
    paused = await lenient.post("/types/Taks/pause")
    assert paused.status_code == 200, paused.text
    # GET /stats is what the dashboard draws its table from.
    stats = (await lenient.get("/stats")).json()
    assert {t["type"]: t["paused"] for t in stats["types"]} == {"Early": False, "Taks": True}
    assert (await lenient.get("/events/Unheard")).json()["events"] == []
