"""Scheduling and reading rows/s of whichever aioqueue is importable, to compare two trees.

    python benchmarks/spark_compare.py [--rows 1000000] [--repeats 3]
    PYTHONPATH=<a worktree of an older commit> python benchmarks/spark_compare.py

Run both commands in turn (alternating, a few times each) to compare this tree with an older
one: the script uses only the public API both have (`schedule_dataframe`, `read_pending`),
in a classic local[2] session whose Python workers import aioqueue from the same place as
the driver (PYTHONPATH reaches them). Each run starts an embedded server, warms up with
10,000 rows, then `repeats` times schedules `rows` rows (flushed before each) and reads them
back with `read_pending(...).count()`; it prints one JSON line with the tree it ran, the
rows/s of each repeat and their medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from spark_schedule import EVENT_TYPE, flush, rows_frame
from spark_sessions import local_spark

import aioqueue
from aioqueue.spark import read_pending, schedule_dataframe
from aioqueue.testing import EmbeddedServer

WARM_UP_ROWS = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    schedule: list[int] = []
    read: list[int] = []
    with EmbeddedServer() as server:
        spark = local_spark("aioqueue-spark-compare")
        try:
            schedule_dataframe(
                rows_frame(spark, WARM_UP_ROWS), EVENT_TYPE, url=server.url, delay_col="delay_s"
            )
            assert read_pending(spark, server.url, EVENT_TYPE).count() == WARM_UP_ROWS
            for _ in range(options.repeats):
                flush(server.url)
                frame = rows_frame(spark, options.rows)
                started = time.perf_counter()
                schedule_dataframe(frame, EVENT_TYPE, url=server.url, delay_col="delay_s")
                schedule.append(round(options.rows / (time.perf_counter() - started)))
                started = time.perf_counter()
                counted = read_pending(spark, server.url, EVENT_TYPE).count()
                read.append(round(options.rows / (time.perf_counter() - started)))
                assert counted == options.rows, counted
        finally:
            spark.stop()
    print(
        json.dumps(
            {
                "aioqueue": aioqueue.__file__,
                "rows": options.rows,
                "schedule_rows_per_s": schedule,
                "read_rows_per_s": read,
                "median_schedule": statistics.median(schedule),
                "median_read": statistics.median(read),
            }
        )
    )


if __name__ == "__main__":
    main()
