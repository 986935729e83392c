"""The `aioqueue` command as a whole: its commands, and optional parts staying optional."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.ops_support import run_cli

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
        ("aioqueue.http", "starlette", "aioqueue[http]"),
        ("aioqueue.prometheus", "prometheus_client", "aioqueue[prometheus]"),
        ("aioqueue.tracing", "opentelemetry", "aioqueue[otel]"),
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
    assert "pip install 'aioqueue[http]'" in result.stderr


async def test_help_lists_every_command() -> None:
    result = await run_cli("--help")
    for command in ("demo", "stats", "dead", "cancel", "worker", "serve"):
        assert f"    {command} " in result.stdout
    for action in ("list", "show", "requeue", "purge"):
        assert action in (await run_cli("dead", "--help")).stdout
