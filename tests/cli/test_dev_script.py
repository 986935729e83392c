"""After the quick start, the `aioqueue` command is one step away, as Getting started says:
`./dev aioqueue ...`, or plain `aioqueue` once `.venv` is activated."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import redis.asyncio as redis

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv"


def _dev_is_ready() -> bool:
    """Whether this run is `./dev test`'s: in the repository's .venv, with the test extra
    installed for this pyproject.toml, so `./dev aioqueue` installs nothing first."""
    marker = VENV / ".installed-test"
    if Path(sys.prefix).resolve() != VENV.resolve() or not marker.is_file():
        return False
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return marker.read_text() == wanted


pytestmark = pytest.mark.skipif(
    not _dev_is_ready(), reason="needs the repository's .venv as ./dev test makes it"
)


async def test_dev_runs_the_aioqueue_command(redis_url: str, redis_client: redis.Redis) -> None:
    result = await anyio.run_process(
        [str(ROOT / "dev"), "aioqueue", "--url", redis_url, "--prefix", "dev-check", "stats"],
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == "no event types registered under prefix 'dev-check'\n"
    assert result.stderr.decode() == ""


def test_the_activated_venv_has_the_command_on_its_path() -> None:
    result = subprocess.run(
        ["bash", "-c", ". .venv/bin/activate && command -v aioqueue && aioqueue --version"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    where, version = result.stdout.splitlines()
    assert Path(where) == VENV / "bin" / "aioqueue"
    assert version.startswith("aioqueue ")


def test_dev_says_how_to_use_it() -> None:
    result = subprocess.run([str(ROOT / "dev")], capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert "./dev aioqueue [ARGS]" in result.stderr
