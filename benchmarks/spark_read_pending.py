"""`read_pending(...).count()` in a local[2] SparkSession: its time and peak memory.

    python benchmarks/spark_read_pending.py REDIS_URL EVENT_TYPE

Prints one JSON line: rows counted, seconds of the count, and the peak resident memory
(VmHWM) of the JVM and of the largest Python worker, in MiB. Run by ten_million.py.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from spark_sessions import local_spark

from aioqueue.spark import read_pending


def peak_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def descendants(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if parent == pid:
                children.append(int(entry.name))
    return children + [grandchild for child in children for grandchild in descendants(child)]


def main(url: str, event_type: str) -> None:
    spark = local_spark("aioqueue read_pending benchmark")
    try:
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        started = time.perf_counter()
        rows = read_pending(spark, url, event_type).count()
        seconds = time.perf_counter() - started
        workers = [pid for pid in descendants(jvm_pid) if pid != os.getpid()]
        print(
            json.dumps(
                {
                    "rows": rows,
                    "seconds": round(seconds, 1),
                    "rows_per_s": round(rows / seconds),
                    "jvm_peak_mib": peak_mib(jvm_pid),
                    "python_worker_peak_mib": max((peak_mib(pid) for pid in workers), default=0.0),
                    "python_workers": len(workers),
                }
            ),
            flush=True,
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
