"""CPU time of a worker together with the pool processes it started (Celery's prefork pool).

getrusage(RUSAGE_SELF) leaves out child processes, and RUSAGE_CHILDREN counts only those
already waited for, so the processes still running are read from /proc: utime + stime of
every descendant, in clock ticks (10 ms here; with ten pool processes the sum is good to a
tenth of a second, next to the second or more such a pool spends in a lateness run).
For a worker without child processes this is getrusage(RUSAGE_SELF) alone.

Linux only, like everything else here; standard library only.
"""

from __future__ import annotations

import os
import pathlib
import resource

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> float:
    """User + system CPU time of this process, its waited-for children, and its descendants
    still running."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total + sum(_ticks(pid) for pid in _descendants(os.getpid())) / TICKS_PER_SECOND


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces)."""
    try:
        text = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            # After the name: state, ppid, ...
            parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        found += children
        frontier += children
    return found


def _ticks(pid: int) -> int:
    fields = _stat_fields(pid)
    # utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the name.
    return 0 if fields is None else int(fields[11]) + int(fields[12])
