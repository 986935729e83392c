"""Scheduling events from Spark DataFrames, and reading queues back as DataFrames.

    from aioqueue.spark import schedule_dataframe
    result = schedule_dataframe(orders, "PaymentCheck", url="redis://localhost:6379",
                                id_col="order_ref", delay_col="check_in_s")

Rows are written by the executors through the library's own enqueue script, key layout and
envelope (docs/wire-format.md), so any aioqueue service delivers them. Works on classic
sessions and on Spark Connect alike (DataFrame APIs only: mapInArrow, foreachBatch; no RDDs).
Needs the `spark` extra (`pip install 'aioqueue-redis[spark]'`), or PySpark's thin Connect
client (`pip install aioqueue-redis pyspark-client`); the executors need aioqueue and
pyarrow.

Errors: InvalidDataFrameError (an AioqueueError and a ValueError) for input that cannot be
scheduled, raised before anything is written.
"""

from __future__ import annotations

# Only to fail early with the install command.
try:
    import pyspark  # noqa: F401
except ImportError as exc:
    raise ModuleNotFoundError(
        "aioqueue.spark needs PySpark: pip install 'aioqueue-redis[spark]'", name="pyspark"
    ) from exc
try:
    import pyarrow  # noqa: F401  (the tasks exchange Arrow record batches with Spark)
except ImportError as exc:
    raise ModuleNotFoundError(
        "aioqueue.spark needs PyArrow beside PySpark: pip install 'aioqueue-redis[spark]'",
        name="pyarrow",
    ) from exc

from ._columns import InvalidDataFrameError
from ._read import ReadOptions, read_dead_letters, read_pending
from ._schedule import (
    ForeachBatchWriter,
    ScheduleOptions,
    ScheduleResult,
    foreach_batch_writer,
    schedule_dataframe,
)

__all__ = [
    "ForeachBatchWriter",
    "InvalidDataFrameError",
    "ReadOptions",
    "ScheduleOptions",
    "ScheduleResult",
    "foreach_batch_writer",
    "read_dead_letters",
    "read_pending",
    "schedule_dataframe",
]
