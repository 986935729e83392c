"""The chaos run's worker processes, seen from the driver (see chaos.py): a slot per worker,
each running one `chaos.py worker` process at a time, SIGKILLed and replaced, or stopped
with SIGTERM and replaced (a rolling restart), on demand."""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
from anyio.abc import Process, TaskGroup
from anyio.streams.buffered import BufferedByteReceiveStream
from chaos_report import Chaos

__all__ = ["WORKER_READY_TIMEOUT", "WorkerPool"]

DRIVER = Path(__file__).resolve().parent / "chaos.py"
REPO_ROOT = DRIVER.parent.parent
WORKER_READY_TIMEOUT = 30.0
WORKER_STOP_TIMEOUT = 10.0


class WorkerPool:
    """N worker slots; each slot runs one worker process at a time, replaced when killed."""

    def __init__(
        self, args: argparse.Namespace, url: str, logs: Path, chaos: Chaos, rate_limit: int
    ) -> None:
        self._args = args
        self._rate_limit = rate_limit
        self._names = [""] * args.workers
        self._url = url
        self._logs = logs
        self._chaos = chaos
        self._processes: list[Process | None] = [None] * args.workers
        self._incarnations = [0] * args.workers
        self._replacing: set[int] = set()
        """Slots whose worker is being killed or restarted: left alone meanwhile."""
        self._stopping_all = False
        """Set once the run stops every worker: a replacement under way starts none."""
        self._first_ready = anyio.Event()

    async def start(self, slot: int, task_group: TaskGroup) -> None:
        """Starts a worker in `slot`; its "ready" line is awaited in the background."""
        if self._stopping_all:
            return
        self._incarnations[slot] += 1
        name = self._names[slot] = f"w{slot}-{self._incarnations[slot]}"
        stderr = (self._logs / f"{name}.stderr").open("wb")
        process = await anyio.open_process(
            [
                sys.executable,
                str(DRIVER),
                "worker",
                "--url",
                self._url,
                "--log",
                str(self._logs / f"{name}.deliveries"),
                "--handler-timeout",
                str(self._args.handler_timeout),
                "--lease",
                str(self._args.lease),
                "--handler-ms",
                str(self._args.handler_ms),
                "--retry-attempts",
                str(self._args.retry_attempts),
                "--parallelism",
                str(self._args.parallelism),
                "--rate-limit",
                str(self._rate_limit),
                "--partitions",
                str(self._args.partitions),
                # Slots take turns: an async handler, a plain function in worker threads, a
                # batch handler (per-event outcomes, so a poisoned event fails alone).
                *(["--sync-handler"] if slot % 3 == 1 else []),
                *(["--batch-handler"] if slot % 3 == 2 else []),
            ],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        stderr.close()
        if self._stopping_all:  # began while this one was starting: it would be left running
            process.kill()
            await process.wait()
            await process.aclose()
            return
        self._processes[slot] = process
        self._chaos.worker_starts += 1
        task_group.start_soon(self._note_ready, process, time.monotonic())

    async def _note_ready(self, process: Process, started: float) -> None:
        assert process.stdout is not None
        with anyio.move_on_after(WORKER_READY_TIMEOUT):
            try:
                await BufferedByteReceiveStream(process.stdout).receive_until(b"\n", 64)
            except (anyio.EndOfStream, anyio.IncompleteRead, anyio.ClosedResourceError):
                return  # killed before it was ready
            self._chaos.worker_ready_seconds.append(time.monotonic() - started)
            if len(self._chaos.worker_ready_seconds) == self._args.workers:
                self._first_ready.set()

    async def wait_all_ready(self, within: float) -> None:
        """Waits until as many workers said "ready" as there are slots (the first starts)."""
        with anyio.fail_after(within):
            await self._first_ready.wait()

    async def kill_and_replace(self, slot: int, task_group: TaskGroup) -> None:
        await self._replace(slot, task_group, self._kill)

    def restart_in_background(self, rng: random.Random, task_group: TaskGroup) -> None:
        """A rolling restart of a worker no kill or restart holds: SIGTERM, so that it gives
        back what it claimed and no handler began and finishes what its handlers began, then
        a new worker in its place. One still running after WORKER_STOP_TIMEOUT is SIGKILLed,
        and counts as killed. In the background, so that restarts keep their own cadence, as
        in a rolling deployment, however long a stop takes: awaited, each restart waited for
        its stop, and a loaded machine's slow stops left fewer than three in a run."""
        free = [slot for slot in range(self._args.workers) if slot not in self._replacing]
        if free:
            slot = rng.choice(free)
            self._replacing.add(slot)
            task_group.start_soon(self._replace_held, slot, task_group, self._terminate)

    async def _replace(
        self,
        slot: int,
        task_group: TaskGroup,
        stop: Callable[[int, Process], Awaitable[None]],
    ) -> None:
        """Stops the worker in `slot` with `stop` and starts another, unless the slot is
        being replaced already (a kill and a restart that picked the same slot)."""
        if slot in self._replacing:
            return
        self._replacing.add(slot)
        await self._replace_held(slot, task_group, stop)

    async def _replace_held(
        self,
        slot: int,
        task_group: TaskGroup,
        stop: Callable[[int, Process], Awaitable[None]],
    ) -> None:
        """_replace, the slot already held in _replacing."""
        try:
            process = self._processes[slot]
            if process is not None and process.returncode is None:
                await stop(slot, process)
            await self.start(slot, task_group)
        finally:
            self._replacing.discard(slot)

    async def _terminate(self, slot: int, process: Process) -> None:
        process.terminate()
        with anyio.move_on_after(WORKER_STOP_TIMEOUT):
            await process.wait()
        if process.returncode is None:
            await self._kill(slot, process)
            return
        await process.aclose()
        self._chaos.worker_restarts += 1

    async def _kill(self, slot: int, process: Process) -> None:
        process.kill()
        self._chaos.kills_ms[self._names[slot]] = time.time() * 1000
        await process.wait()
        await process.aclose()
        self._chaos.worker_kills += 1

    async def stop_all(self) -> None:
        """SIGTERM every worker (a graceful stop), SIGKILL what is left after a bound; again
        on a run's way out, when it may be cancelled (shielded) and nothing may be left."""
        with anyio.CancelScope(shield=True):
            await self._stop_all()

    async def _stop_all(self) -> None:
        self._stopping_all = True
        running = [p for p in self._processes if p is not None and p.returncode is None]
        for process in running:
            process.terminate()
        with anyio.move_on_after(WORKER_STOP_TIMEOUT):
            for process in running:
                await process.wait()
        for process in running:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for process in running:
            await process.aclose()
