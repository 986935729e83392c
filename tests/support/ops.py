"""Helpers for the operating tests: running the CLI and `aioqueue serve` as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson

from aioqueue._transport.client import RedisClient
from aioqueue.testing import free_port
from tests.support.common import queue_key

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return orjson.loads(self.stdout)


async def run_cli(
    *args: str, env: Mapping[str, str] | None = None, stdin: bytes = b""
) -> CliResult:
    """Runs `python -m aioqueue ARGS` in a real process (stdin is a pipe, not a terminal)."""
    result = await anyio.run_process(
        [sys.executable, "-m", "aioqueue", *args],
        input=stdin,
        check=False,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )
    return CliResult(result.returncode, result.stdout.decode(), result.stderr.decode())


@dataclass
class ServedApp:
    base_url: str
    process: subprocess.Popen[bytes]


@contextmanager
def serve(
    redis_url: str,
    *extra: str,
    env: Mapping[str, str] | None = None,
    ready_path: str = "/healthz",
) -> Iterator[ServedApp]:
    """`aioqueue serve` on a free loopback port, once `ready_path` answers 200 (`/` when
    Redis is meant to be down); stopped (SIGTERM) when the block ends."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aioqueue",
            "serve",
            "--url",
            redis_url,
            "--port",
            str(port),
            "--log-level",
            "warning",
            *extra,
        ],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{base_url}{ready_path}", process)
        yield ServedApp(base_url, process)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def wait_for_http(url: str, process: subprocess.Popen[Any], within: float = 20.0) -> None:
    """Polls `url` until it answers 200; a process that exits first fails with its output."""
    deadline = time.monotonic() + within
    while True:
        if process.poll() is not None:
            output = process.communicate()
            raise RuntimeError(f"server exited with {process.returncode}: {output}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} did not answer within {within} s")
        # A starting process offers nothing to wait on.
        time.sleep(0.05)


async def declare(client: RedisClient, *event_types: str, prefix: str = "aioqueue") -> None:
    """Records the types in the prefix's registry, unpartitioned, as a deployed service or
    producer of each would have: the CLI and the HTTP API refuse types nobody declared."""
    await client.hset(f"{prefix}:types", mapping=dict.fromkeys(event_types, 1))


async def stored_envelope(client: RedisClient, event_type: str, event_id: str) -> dict[str, Any]:
    """The envelope in `events` of a pending event (fails the test if there is none)."""
    raw = await client.hget(queue_key(event_type, "events"), event_id)
    assert raw is not None, f"{event_type} {event_id!r} is not pending"
    envelope: dict[str, Any] = orjson.loads(raw)
    return envelope


def api_client(
    base_url: str, headers: Mapping[str, str] | None = None, **options: Any
) -> httpx.AsyncClient:
    """An HTTP client for the API as a program uses it: writes go as JSON (the API refuses
    other writes), whether or not a request has a body."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Content-Type": "application/json", **(headers or {})},
        **options,
    )
