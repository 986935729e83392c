"""Worker processes for crash tests: tests/support/workers/blocking_worker.py, run and read."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import redis.asyncio as redis
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def worker_log(marker: pathlib.Path) -> pathlib.Path:
    return marker.parent / "worker.log"


@asynccontextmanager
async def blocking_worker(url: str, marker: pathlib.Path, *handled: str) -> AsyncIterator[Process]:
    """Runs tests/support/workers/blocking_worker.py; the process is killed when the block exits."""
    log = worker_log(marker).open("wb")
    process = await anyio.open_process(
        [sys.executable, "-m", "tests.support.workers.blocking_worker", url, str(marker), *handled],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
    )
    try:
        async with process:
            try:
                yield process
            finally:
                if process.returncode is None:
                    process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
    finally:
        log.close()


async def server_time_ms(client: redis.Redis) -> int:
    """Now on the server's clock, the one every due time is on."""
    seconds, microseconds = await client.time()
    return seconds * 1000 + microseconds // 1000


async def read_line(process: Process, log: pathlib.Path, within: float = 30.0) -> str:
    """The worker's next line of output; fails with the worker's log if it exits first, or
    prints nothing within `within` s. The first line comes once a new Python process has
    imported aioqueue, started its service and had an event handed to it: 10 s ran out
    once on a cluster with three chaos runs beside the test (a load average of 11)."""
    assert process.stdout is not None
    try:
        with anyio.fail_after(within):
            line = await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 4096)
    except (anyio.IncompleteRead, anyio.EndOfStream, TimeoutError):
        output = await anyio.Path(log).read_text(errors="replace")
        pytest.fail(f"the worker printed no line; its log:\n{output}")
    return line.decode()
