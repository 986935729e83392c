"""The worker registry: a record per running service with handlers, kept alive by its
heartbeats, so that operators and probes can list who is working (docs/wire-format.md).

Two keys per prefix share the hash tag `{workers}`, so every call touches one slot and runs
unchanged on a cluster: the index, a zset of worker id -> when its record expires (ms, server
clock), and a hash per worker with its record (JSON, written by the worker), its first and
its last heartbeat. A heartbeat rewrites the hash and pushes its expiry on (heartbeat.lua);
a clean stop deletes both at once (`remove_worker`); a worker that dies stops beating, and
its hash expires by its TTL while listing drops its index entry (live_workers.lua). A
worker's cost is one script call per heartbeat, four writes, whatever it handles.

A record is read as data, never trusted: one that does not decode as a record is left out
of the listing and reported by id, and nothing in it is imported or evaluated.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from aioqueue._model.workers import Worker, WorkerHandler, WorkerState
from aioqueue._transport.client import RedisClient
from aioqueue._transport.steps import Steps, run_steps
from aioqueue._wire.envelope import readable_text
from aioqueue._wire.scripts import LuaScript

__all__ = [
    "LIVES_FOR_BEATS",
    "LiveWorkers",
    "WorkerRecord",
    "new_worker_id",
    "read_workers",
    "remove_worker",
    "write_heartbeat",
]

LIVES_FOR_BEATS = 3
"""A record outlives its last heartbeat by this many heartbeats: one lost beat (a slow call,
a loop that stalled) does not drop a live worker from the list."""

HEARTBEAT = LuaScript("heartbeat")
LIVE_WORKERS = LuaScript("live_workers")
WORKER_RECORDS = LuaScript("worker_records")


def workers_index_key(prefix: str) -> str:
    """zset: worker id -> when its record expires (ms, server clock)."""
    return f"{prefix}:{{workers}}:index"


RECORD_FIELDS = ("started_at", "beat_at", "record")
"""The fields of a worker's hash (heartbeat.lua writes them)."""


def worker_key(prefix: str, worker_id: str) -> str:
    """hash: `record` (JSON), `started_at` and `beat_at` (ms, server clock) of one worker."""
    return f"{prefix}:{{workers}}:{worker_id}"


def new_worker_id() -> str:
    """`host:pid:random`, unique to one run of one service (two services in one process, or
    a pid reused after a restart, get different ids)."""
    host = socket.gethostname().replace("{", "").replace("}", "")
    return f"{host}:{os.getpid()}:{secrets.token_hex(4)}"


class _Handler(msgspec.Struct, frozen=True):
    type: str
    parallelism: int
    in_hand: int


class WorkerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker says of itself at each heartbeat (the hash's `record`)."""

    host: str
    pid: int
    version: str
    heartbeat: float
    state: WorkerState
    handlers: tuple[_Handler, ...]

    @classmethod
    def of(
        cls,
        *,
        version: str,
        heartbeat: float,
        state: WorkerState,
        handlers: Sequence[tuple[str, int, int]],
    ) -> WorkerRecord:
        """This process's record; `handlers` as (type, parallelism, in hand)."""
        return cls(
            host=socket.gethostname(),
            pid=os.getpid(),
            version=version,
            heartbeat=heartbeat,
            state=state,
            handlers=tuple(_Handler(*handler) for handler in handlers),
        )


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WorkerRecord)


async def write_heartbeat(
    client: RedisClient, prefix: str, worker_id: str, record: WorkerRecord
) -> int:
    """Writes one heartbeat; returns its server time (ms). The record lives
    LIVES_FOR_BEATS heartbeats."""
    lives_ms = max(1, round(record.heartbeat * LIVES_FOR_BEATS * 1000))
    keys = [workers_index_key(prefix), worker_key(prefix, worker_id)]
    return int(await HEARTBEAT.run(client, keys, [worker_id, _encoder.encode(record), lives_ms]))


async def remove_worker(client: RedisClient, prefix: str, worker_id: str) -> None:
    """Takes a worker out of the registry (a clean stop)."""
    await run_steps(client, _removal(prefix, worker_id))


def _removal(prefix: str, worker_id: str) -> Steps[None]:
    yield ("ZREM", workers_index_key(prefix), worker_id)
    # Every field rather than DEL: the hash goes with its last field, and the documented ACL
    # rule (security.md) need not allow DEL on the queues' keys.
    yield ("HDEL", worker_key(prefix, worker_id), *RECORD_FIELDS)


@dataclass(frozen=True, slots=True)
class LiveWorkers:
    """The live workers of a prefix, and the ids of records that could not be read."""

    workers: list[Worker]
    unreadable: list[str]
    server_time: datetime
    """When they were listed, on the server's clock."""

    def handling(self, event_type: str) -> list[Worker]:
        """The workers with a handler for `event_type` (a wire name)."""
        return [worker for worker in self.workers if worker.handles(event_type)]


async def read_workers(client: RedisClient, prefix: str) -> LiveWorkers:
    """Lists the live workers of `prefix`, ordered by host, then start."""
    return await run_steps(client, _listing(client, prefix))


def _listing(client: RedisClient, prefix: str) -> Steps[LiveWorkers]:
    listed = yield from LIVE_WORKERS.steps(client, [workers_index_key(prefix)], [])
    now, ids = int(listed[0]), [readable_text(worker_id) for worker_id in listed[1:]]
    workers: list[Worker] = []
    unreadable: list[str] = []
    if ids:
        keys = [worker_key(prefix, worker_id) for worker_id in ids]
        records = yield from WORKER_RECORDS.steps(client, keys, [])
        for worker_id, fields in zip(ids, records, strict=True):
            started_at, beat_at, raw = fields
            if raw is None:
                continue  # expired since it was listed
            try:
                record = _decoder.decode(raw)
                worker = _worker(worker_id, int(started_at), int(beat_at), record)
            except (msgspec.DecodeError, TypeError, ValueError):
                unreadable.append(worker_id)
                continue
            workers.append(worker)
    workers.sort(key=lambda worker: (worker.host, worker.started_at, worker.id))
    return LiveWorkers(workers, unreadable, _from_ms(now))


def _worker(worker_id: str, started_at: int, beat_at: int, record: WorkerRecord) -> Worker:
    return Worker(
        id=worker_id,
        host=record.host,
        pid=record.pid,
        version=record.version,
        started_at=_from_ms(started_at),
        beat_at=_from_ms(beat_at),
        heartbeat=record.heartbeat,
        state=record.state,
        handlers=tuple(
            WorkerHandler(handler.type, handler.parallelism, handler.in_hand)
            for handler in record.handlers
        ),
    )


def _from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, timezone.utc)
