"""`durability(replicas, timeout)`: an enqueue returns only once the replicas have it, on a
primary and its replica as real processes (every server of the matrix with `--servers all`).

A replica that is frozen (SIGSTOP) but still connected is the case that tells a correct
confirmation from a hollow one: a WAIT on another connection than the write's, or after a
call that wrote nothing (an enqueue that kept a pending event), would count the frozen
replica, which acknowledged that connection's older offset (see tests/support/replication.py).
"""

from __future__ import annotations

import contextlib
import pathlib
import pickle
import re
from collections.abc import AsyncIterator, Iterator

import anyio
import orjson
import pytest
import redis
import redis.asyncio

from aioqueue import (
    ConfigurationError,
    Durability,
    DurabilityError,
    EventService,
    EventServiceBuilder,
    SyncProducer,
)
from aioqueue._producing import durability as durability_module
from aioqueue._producing.enqueue_calls import EnqueueItem, WriteMode
from aioqueue._producing.writes import enqueue_steps
from aioqueue._transport.steps import run_steps_sync
from aioqueue._wire.functions import LIBRARY
from aioqueue._wire.keys import QueueKeys
from aioqueue.testing import EmbeddedServer
from tests.support.common import PaymentCheck
from tests.support.ops import api_client, run_cli, serve
from tests.support.replication import command_calls, freeze, replicated_pair, resume
from tests.transport.test_access import (
    PASSWORD,
    RULES_PAGE,
    acl_rule_for,
    denials,
    raw_command,
    server_version,
)

KEYS = QueueKeys.for_type("aioqueue", "PaymentCheck")
# Short, so that refused writes fail fast; the server rounds blocking timeouts up to its
# 100 ms cron tick, so this is about the least that means what it says.
TIMEOUT = 0.2
HOUR = 3600


@pytest.fixture
def pair(server_binary: pathlib.Path) -> Iterator[tuple[EmbeddedServer, EmbeddedServer]]:
    """A primary and its replica of this run's server version, in sync."""
    with replicated_pair(server_binary) as servers:
        yield servers


def durable_builder(primary: EmbeddedServer) -> EventServiceBuilder:
    return (
        EventService.builder()
        .url(primary.url)
        .enable_scheduling(False)
        .durability(replicas=1, timeout=TIMEOUT)
    )


@pytest.fixture
async def replica_client(
    pair: tuple[EmbeddedServer, EmbeddedServer],
) -> AsyncIterator[redis.asyncio.Redis]:
    async with redis.asyncio.Redis.from_url(pair[1].url) as client:
        yield client


async def stored_version(client: redis.asyncio.Redis, event_id: str) -> int | None:
    raw = await client.hget(KEYS.events, event_id)
    return None if raw is None else int(orjson.loads(raw)["v"])


def events(first: int, count: int) -> list[PaymentCheck]:
    return [PaymentCheck(id=f"e-{n}", order_id=n) for n in range(first, first + count)]


async def test_a_durable_enqueue_returns_once_the_replica_has_it(
    pair: tuple[EmbeddedServer, EmbeddedServer], replica_client: redis.asyncio.Redis
) -> None:
    primary, _ = pair
    async with durable_builder(primary).build() as service:
        assert await service.enqueue(PaymentCheck(id="one", order_id=1), HOUR)
        # Read on the replica right after the return: no waiting, it must be there already.
        assert await stored_version(replica_client, "one") is not None
        assert await service.enqueue(PaymentCheck(id="one", order_id=2), HOUR, replace=True)
        async with redis.asyncio.Redis.from_url(primary.url) as primary_client:
            assert await stored_version(replica_client, "one") == await stored_version(
                primary_client, "one"
            )
        many = events(0, 1200)  # three chunks of 500, each its own script call
        waits = command_calls(primary, "wait")
        assert await service.enqueue_many(many, HOUR) == [True] * len(many)
        assert command_calls(primary, "wait") - waits == 3
        assert await replica_client.hlen(KEYS.events) == 1 + len(many)

        # Concurrent enqueues share script calls, and each call's pipeline one WAIT. Under
        # durability one call is in flight, not two (each call waits for its own
        # confirmation): the 32 go out together.
        waits, scripts = command_calls(primary, "wait"), script_calls(primary)
        async with anyio.create_task_group() as producers:
            for event in events(2000, 32):
                producers.start_soon(service.enqueue, event, HOUR)
        batches = script_calls(primary) - scripts
        assert command_calls(primary, "wait") - waits == batches == 1
        assert await replica_client.hlen(KEYS.events) == 1 + len(many) + 32


def script_calls(node: EmbeddedServer) -> int:
    # FCALL where the server has functions, EVALSHA (Redis 6.2) where it has not.
    return command_calls(node, "fcall") + command_calls(node, "evalsha")


async def test_a_frozen_replica_makes_every_durable_write_fail_until_it_resumes(
    pair: tuple[EmbeddedServer, EmbeddedServer], replica_client: redis.asyncio.Redis
) -> None:
    primary, replica = pair
    async with (
        durable_builder(primary).build() as service,
        redis.asyncio.Redis.from_url(primary.url) as primary_client,
    ):
        assert await service.enqueue(PaymentCheck(id="before", order_id=0), HOUR)
        freeze(replica)
        try:
            with pytest.raises(DurabilityError) as refused:
                await service.enqueue(PaymentCheck(id="during", order_id=1), HOUR)
            assert (refused.value.replicas, refused.value.confirmed) == (1, 0)
            assert "0 of 1 replicas" in str(refused.value)
            assert "may exist" in str(refused.value)
            assert "again is safe" in str(refused.value)
            # It may exist: the primary has it.
            assert await stored_version(primary_client, "during") is not None
            # Retrying writes no event (it is pending already) and must still not pass: its
            # confirmation has to cover the first try's write, also from a producer whose
            # connection never wrote (a WAIT there would count the frozen replica).
            with pytest.raises(DurabilityError):
                await service.enqueue(PaymentCheck(id="during", order_id=1), HOUR)
            async with durable_builder(primary).build() as other_producer:
                with pytest.raises(DurabilityError):
                    await other_producer.enqueue(PaymentCheck(id="during", order_id=1), HOUR)
            with pytest.raises(DurabilityError):
                await service.enqueue(PaymentCheck(id="before", order_id=0), HOUR)
            with pytest.raises(DurabilityError):  # several chunks: one error, no group
                await service.enqueue_many(events(0, 1200), HOUR)
        finally:
            resume(replica)
        # Retried until it returns: the event from the first try, now on the replica too.
        assert await service.enqueue(PaymentCheck(id="during", order_id=1), HOUR) is False
        assert await stored_version(replica_client, "during") == await stored_version(
            primary_client, "during"
        )
        assert await service.enqueue_many(events(0, 1200), HOUR) == [False] * 1200
        assert await replica_client.hlen(KEYS.events) == 2 + 1200


async def test_calls_the_server_refused_in_the_pipeline_are_confirmed_after_their_retry(
    pair: tuple[EmbeddedServer, EmbeddedServer], replica_client: redis.asyncio.Redis
) -> None:
    """The first call on a server without the function library (or without the script in
    its cache) is refused in the pipeline and run again on its own; its confirmation then
    comes from one more call on its keys, on the same connection as a WAIT."""
    primary, replica = pair
    async with (
        durable_builder(primary).build() as service,
        # One connection, so that its WAIT covers its own flushes.
        redis.asyncio.Redis.from_url(primary.url, single_connection_client=True) as admin,
    ):
        await forget_the_scripts(admin)
        assert await service.enqueue(PaymentCheck(id="fresh", order_id=1), HOUR)
        assert await stored_version(replica_client, "fresh") is not None

        await forget_the_scripts(admin)
        # The replica has the flushes, so where WAIT counts a connection's own writes only
        # (Valkey, Redis 7.2+) the pipeline's WAIT passes, the call refused there is written
        # on its own, and only its confirmation can fail. (Redis 6.2 and 7.0 make WAIT cover
        # everything the primary wrote before the connection's last command, so there the
        # pipeline's WAIT already fails.)
        assert await admin.wait(1, 5000) == 1
        freeze(replica)
        try:
            with pytest.raises(DurabilityError):
                await service.enqueue(PaymentCheck(id="frozen", order_id=2), HOUR)
        finally:
            resume(replica)
        written = await stored_version(admin, "frozen") is not None
        # Retried once the replica is back: stored now, and False if the first try was.
        assert await service.enqueue(PaymentCheck(id="frozen", order_id=2), HOUR) is not written
        assert await stored_version(replica_client, "frozen") is not None


async def forget_the_scripts(client: redis.asyncio.Redis) -> None:
    await client.script_flush()
    with contextlib.suppress(redis.ResponseError):  # Redis 6.2 has no functions
        await client.function_flush()


async def test_waitaof_follows_each_batch_where_the_primary_has_aof_and_is_left_out_elsewhere(
    server_binary: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WAITAOF (Redis 7.2+, Valkey) confirms the primary's own fsync. Where the primary has no
    AOF, or no WAITAOF, a client asks once and then leaves it out for a while."""
    with EmbeddedServer(binary=server_binary) as probe, redis.Redis.from_url(probe.url) as client:
        version = str(client.info("server")["redis_version"])
    if tuple(int(part) for part in version.split(".")[:2]) < (7, 2):
        pytest.skip(f"redis_version {version} has no WAITAOF")
    # No replica: replicas=1 cannot be met, so every enqueue here raises; what counts is
    # which confirmations the primary was asked for.
    monkeypatch.setattr(durability_module, "WAITAOF_RECHECK", 3600.0)
    for appendonly, expected_waitaofs in ((True, 3), (False, 1)):
        with EmbeddedServer(binary=server_binary, appendonly=appendonly) as primary:
            async with redis.asyncio.Redis.from_url(primary.url) as admin:
                await admin.function_load(LIBRARY.source)  # no first call refused
            # The fsync of everysec happens in the background within a few ms; the WAIT
            # before WAITAOF blocks its whole timeout here, so WAITAOF finds it done.
            async with durable_builder(primary).build() as service:
                for n in range(3):
                    with pytest.raises(DurabilityError) as refused:
                        await service.enqueue(PaymentCheck(id=f"e-{n}", order_id=n), HOUR)
                    assert "WAITAOF" not in str(refused.value)  # the fsync itself was done
            assert command_calls(primary, "wait") == 3
            assert command_calls(primary, "waitaof") == expected_waitaofs


async def test_the_blocking_client_runs_the_same_durable_steps(
    pair: tuple[EmbeddedServer, EmbeddedServer], replica_client: redis.asyncio.Redis
) -> None:
    """What a SyncProducer (or a Spark task) runs: the same steps on a redis-py client."""
    primary, replica = pair
    durability = Durability.of(1, TIMEOUT)

    def enqueue(client: redis.Redis, event_id: str) -> list[bool]:
        item = EnqueueItem(event_id, '{"order_id":1}', "{}", HOUR * 1000, absolute=False)
        steps = enqueue_steps(
            client, KEYS, "PaymentCheck", [item], mode=WriteMode(), durability=durability
        )
        return run_steps_sync(client, steps)

    with redis.Redis.from_url(primary.url) as client:
        assert enqueue(client, "sync") == [True]
        assert await stored_version(replica_client, "sync") is not None
        freeze(replica)
        try:
            with pytest.raises(DurabilityError):
                enqueue(client, "frozen")
            with pytest.raises(DurabilityError):
                enqueue(client, "sync")
        finally:
            resume(replica)
        assert enqueue(client, "frozen") == [False]


async def test_a_durable_sync_producer_confirms_each_enqueue_and_enqueue_many(
    pair: tuple[EmbeddedServer, EmbeddedServer], replica_client: redis.asyncio.Redis
) -> None:
    """SyncProducer(durability=...) runs those steps: its enqueue and enqueue_many return once
    the replica has the events, and raise DurabilityError (nothing confirmed, retrying
    safe) while the replica is cut off."""
    primary, replica = pair
    durable = Durability(replicas=1, timeout=TIMEOUT)
    with SyncProducer(primary.url, durability=durable) as producer:
        assert producer.config.durability == durable
        assert producer.enqueue(PaymentCheck(id="one", order_id=1), HOUR)
        assert (
            producer.enqueue_many(
                [PaymentCheck(id=f"many-{n}", order_id=n) for n in range(3)], HOUR
            )
            == [True] * 3
        )
        for event_id in ("one", "many-0", "many-2"):
            assert await stored_version(replica_client, event_id) is not None
        freeze(replica)
        try:
            with pytest.raises(DurabilityError):
                producer.enqueue(PaymentCheck(id="frozen", order_id=4), HOUR)
            with pytest.raises(DurabilityError):
                producer.enqueue_many([PaymentCheck(id="frozen-many", order_id=5)], HOUR)
        finally:
            resume(replica)
        assert not producer.enqueue(PaymentCheck(id="frozen", order_id=4), HOUR)  # it was kept
        assert await stored_version(replica_client, "frozen") is not None


def test_a_sync_producer_refuses_a_durability_out_of_range() -> None:
    with pytest.raises(ConfigurationError, match="durability replicas"):
        SyncProducer("redis://127.0.0.1:1", durability=Durability(replicas=0, timeout=1))


async def test_post_events_answers_503_until_the_replica_confirms(
    pair: tuple[EmbeddedServer, EmbeddedServer], replica_client: redis.asyncio.Redis
) -> None:
    primary, replica = pair
    body = {"type": "PaymentCheck", "id": "http", "delay": HOUR, "payload": {"order_id": 7}}
    with serve(
        primary.url,
        "--durability-replicas",
        "1",
        "--durability-timeout",
        "0.2",
        "--allow-undeclared-types",
    ) as app:
        async with api_client(app.base_url) as http:
            warm_up = await http.post("/events", json={**body, "id": "first"})
            assert warm_up.status_code == 201  # the type is registered, the library loaded
            assert await stored_version(replica_client, "first") is not None
            freeze(replica)
            try:
                refused = await http.post("/events", json=body)
            finally:
                resume(replica)
            assert refused.status_code == 503
            assert "may exist" in refused.json()["error"]
            assert refused.headers["Retry-After"] == "1"
            accepted = await http.post("/events", json=body)
            assert (accepted.status_code, accepted.json()["scheduled"]) == (200, False)
            assert await stored_version(replica_client, "http") is not None


async def test_serve_refuses_a_durability_out_of_range() -> None:
    result = await run_cli("serve", "--url", "redis://127.0.0.1:1", "--durability-replicas", "0")
    assert result.returncode != 0
    assert "durability replicas must be an integer from 1" in result.stderr


def test_a_durability_error_keeps_its_counts_through_pickling() -> None:
    """Spark sends a task's error to the driver pickled."""
    error = DurabilityError("not confirmed", replicas=2, confirmed=1)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.replicas, copy.confirmed) == (
        DurabilityError, "not confirmed", 2, 1
    )  # fmt: skip


def documented_durability_additions() -> dict[str, list[str]]:
    """What the ACL page adds to a rule for durability, by version range."""
    found = re.findall(
        r"^# with durability: (.+)\n(\+.+)$", RULES_PAGE.read_text(), flags=re.MULTILINE
    )
    return {label: addition.split() for label, addition in found}


async def test_the_documented_acl_rule_with_its_durability_addition_confirms_writes(
    pair: tuple[EmbeddedServer, EmbeddedServer],
) -> None:
    """The version's documented rule plus the documented addition runs durable enqueues with
    no denial; without `+wait`, they fail and the error names what the rule lacks."""
    primary, _ = pair
    additions = documented_durability_additions()
    assert list(additions) == ["Redis 7.2 and later, every Valkey", "Redis 7.0 and 6.2"]
    async with redis.asyncio.Redis.from_url(primary.url) as admin:
        loaded = await run_cli("functions", "load", env={"AIOQUEUE_URL": primary.url})
        assert loaded.returncode == 0, loaded.stderr
        newest = await server_version(admin) >= (7, 2)
        addition = additions["Redis 7.2 and later, every Valkey" if newest else "Redis 7.0 and 6.2"]
        rule = [f">{PASSWORD}" if arg.startswith(">") else arg for arg in await acl_rule_for(admin)]
        await raw_command(admin, "ACL", "SETUSER", *rule, *addition)
        await admin.acl_log_reset()
        user_url = f"redis://aioqueue:{PASSWORD}@{primary.host}:{primary.port}"
        producer = (
            EventService.builder().url(user_url).enable_scheduling(False).durability(1, TIMEOUT)
        )
        async with producer.build() as service:
            assert await service.enqueue(PaymentCheck(id="allowed", order_id=1), HOUR)
            assert await service.enqueue_many(events(0, 3), HOUR) == [True] * 3
        assert await denials(admin) == []

        await raw_command(admin, "ACL", "SETUSER", "aioqueue", "-wait")
        async with producer.build() as service:
            with pytest.raises(DurabilityError, match=r"needs \+wait"):
                await service.enqueue(PaymentCheck(id="denied", order_id=2), HOUR)
