"""A SyncProducer made before fork, then used by parent and child at once (as gunicorn
--preload and Celery's prefork pool do); run by test_sync_producer_safety in a process of its
own, so that the fork copies nothing of the test session.

    python -m tests.support.fork_producer URL EVENTS

Prints one JSON line: what each process enqueued, whether each call said "scheduled", and
(standalone only) the id of the connection each process used last.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import redis

from aioqueue import Event, SyncProducer


@dataclass
class ForkPing(Event):
    id: str
    side: str


def enqueue_all(producer: SyncProducer, side: str, count: int) -> bool:
    return all(producer.enqueue(ForkPing(id=f"{side}-{n}", side=side), 3600) for n in range(count))


def connection_id(producer: SyncProducer) -> int | None:
    """CLIENT ID of the connection the producer's pool hands out next: the one it used last,
    since the pool reuses its most recently released connection."""
    client = producer._client  # the test's own look inside, to name the connection
    return client.client_id() if isinstance(client, redis.Redis) else None


def main(url: str, count: int) -> None:
    producer = SyncProducer(url)
    assert producer.enqueue(ForkPing(id="before-fork", side="parent"), 3600)
    parent_before = connection_id(producer)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(reader)
        try:
            report: dict[str, object] = {
                "ok": enqueue_all(producer, "child", count),
                "id": connection_id(producer),
            }
        except BaseException as exc:
            report = {"ok": False, "error": repr(exc)}
        os.write(writer, json.dumps(report).encode())
        os._exit(0)
    os.close(writer)
    parent_ok = enqueue_all(producer, "parent", count)
    parent_after = connection_id(producer)
    with os.fdopen(reader) as pipe:
        child_report = json.loads(pipe.read())
    _, status = os.waitpid(child, 0)
    producer.close()
    result = {
        "parent_ok": parent_ok,
        "parent_ids": [parent_before, parent_after],
        "child": child_report,
        "child_status": status,
    }
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
