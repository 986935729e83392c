"""Reading py-spy's collapsed stacks (`py-spy record --format raw`): where a process's sampled
CPU time went, by the innermost frame that names a part (a bucket: the collector, redis-py's
parsing, an aioqueue module, the event loop), by the part of aioqueue it worked for (the
outermost aioqueue frame), and by library function anywhere on the stack. profiling.py
prints what analyse() finds.
"""

from __future__ import annotations

import pathlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

# The innermost frame that matches one of these (tried in this order) names the bucket of a
# sample's CPU time; native frames that match none are passed over.
BUCKETS = (
    ("gc_collect", "Python garbage collector"),
    ("redis/observability", "redis-py: observability hooks (attributes, metrics)"),
    ("redis/_parsers", "redis-py: reading and parsing replies (hiredis)"),
    ("hiredis", "redis-py: reading and parsing replies (hiredis)"),
    ("pack_command", "redis-py: packing commands"),
    ("encoders.py", "redis-py: packing commands"),
    ("redis/asyncio/connection.py", "redis-py: connection (send, connect, checks)"),
    ("redis/", "redis-py: client, pipeline, pool, retries"),
    ("anyio/", "anyio: task groups, cancel scopes, events"),
    ("aioqueue/_model/serializer.py", "aioqueue: serializer (orjson)"),
    ("aioqueue/", "aioqueue: {file}"),
    ("asyncio/", "asyncio: event loop, tasks, transports"),
    ("selectors.py", "asyncio: event loop, tasks, transports"),
    ("socket.py", "asyncio: event loop, tasks, transports"),
    ("common.py", "benchmark harness"),
    ("system_aioqueue.py", "benchmark harness"),
)
# Which part of aioqueue a sample works for: the outermost aioqueue frame's module.
COMPONENTS = {
    "_delivery/dispatcher.py": "dispatcher",
    "_delivery/consumer.py": "consumer (claims, handlers, failures)",
    "_delivery/acknowledger.py": "acknowledger",
    "_delivery/watchdog.py": "loop watchdog (heartbeat task and thread)",
    "_service/service.py": "service (enqueue, start, stop)",
    "_service/producing.py": "service (enqueue, start, stop)",
    "_producing/producer.py": "service (enqueue, start, stop)",
}
LIBRARIES = ("aioqueue/", "redis/", "anyio/")
# Native leaf frames that are the kernel moving bytes over the loopback socket.
SYSCALLS = {"send", "recv", "sendto", "recvfrom", "sendmsg", "recvmsg", "__libc_send",
            "__libc_recv", "write", "read", "__GI___libc_write", "__GI___libc_read"}  # fmt: skip
# Innermost frames of a thread that waits (py-spy keeps some of them with --native): native
# leaf functions, and Python functions whose native part was not sampled.
NATIVE_WAITS = {"epoll_wait", "pthread_cond_timedwait", "__futex_abstimed_wait_common",
                "__GI___futex_abstimed_wait_cancelable64", "clock_nanosleep"}  # fmt: skip
WAITS = {("EpollSelector.select", "selectors.py"), ("Condition.wait", "threading.py")}


@dataclass
class Profile:
    samples: int = 0
    waiting: int = 0
    """Samples of a thread waiting (epoll, a lock with a timeout) that py-spy kept."""
    start_up: int = 0
    """Samples of imports, left out of the rest."""
    buckets: Counter[str] = field(default_factory=Counter)
    components: Counter[str] = field(default_factory=Counter)
    functions: Counter[str] = field(default_factory=Counter)
    """Samples with a given library function anywhere on the stack."""

    @property
    def active(self) -> int:
        return self.samples - self.waiting - self.start_up


def frames_of(line: str) -> tuple[list[str], int]:
    stack, count = line.rstrip("\n").rsplit(" ", 1)
    return stack.split(";"), int(count)


def is_python(frame: str) -> bool:
    """Python frames end in "(file.py:line)"; native ones in "(library)" or "(file.c:line)"."""
    file = location(frame)[1]
    return file.endswith(".py") or file.startswith("<frozen")


def location(frame: str) -> tuple[str, str]:
    """(function, file) of a frame written "function (file:line)" or "function (library)"."""
    name, _, where = frame.rpartition(" (")
    return name, where.rstrip(")").rsplit(":", 1)[0]


def analyse(path: pathlib.Path, process: str) -> Profile:
    profile = Profile()
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        frames, count = frames_of(line)
        processes = [frame for frame in frames if frame.startswith("process ")]
        if process and not any(process in frame for frame in processes):
            continue
        frames = [frame for frame in frames if not frame.startswith("process ")]
        profile.samples += count
        python = [location(frame) for frame in frames if is_python(frame)]
        if any(name == "_find_and_load" for name, _ in python):
            profile.start_up += count
            continue
        if location(frames[-1])[0] in NATIVE_WAITS or (python and python[-1] in WAITS):
            profile.waiting += count
            continue
        profile.buckets[bucket_of(frames)] += count
        profile.components[component_of(python)] += count
        for function in {f"{name} ({file})" for name, file in python if file.startswith(LIBRARIES)}:
            profile.functions[function] += count
    return profile


def bucket_of(frames: Sequence[str]) -> str:
    if location(frames[-1])[0] in SYSCALLS:
        return "kernel: socket send and receive"
    for frame in reversed(frames):
        for pattern, bucket in BUCKETS:
            if pattern in frame:
                return bucket.format(file=location(frame)[1].removeprefix("aioqueue/"))
    python = [location(frame)[1] for frame in frames if is_python(frame)]
    return f"other: {python[-1]}" if python else "other: native"


def component_of(python: Sequence[tuple[str, str]]) -> str:
    for _, file in python:
        if file.startswith("aioqueue/"):
            return COMPONENTS.get(file.removeprefix("aioqueue/"), "other aioqueue code")
    return "outside aioqueue (event loop, harness)"
