"""Scheduling events from Spark DataFrames, and reading queues back as DataFrames.

    from aioqueue.spark import schedule_dataframe
    result = schedule_dataframe(orders, "PaymentCheck", url="redis://localhost:6379",
                                id_col="order_ref", delay_col="check_in_s")

Rows are written by the executors through the library's own enqueue script, key layout and
envelope (docs/wire-format.md), so any aioqueue service delivers them. Needs the `spark`
extra (`pip install 'aioqueue[spark]'`) and the classic (non-Connect) PySpark API.

Errors: InvalidDataFrameError (an AioqueueError and a ValueError) for input that cannot be
scheduled, raised before anything is written.
"""

from __future__ import annotations

try:
    import pyspark  # noqa: F401  (only to fail early with the install command)
except ImportError as exc:
    raise ModuleNotFoundError(
        "aioqueue.spark needs PySpark: pip install 'aioqueue[spark]'", name="pyspark"
    ) from exc

from ._columns import InvalidDataFrameError
from ._read import read_dead_letters, read_pending
from ._schedule import ForeachBatchWriter, ScheduleResult, foreach_batch_writer, schedule_dataframe

__all__ = [
    "ForeachBatchWriter",
    "InvalidDataFrameError",
    "ScheduleResult",
    "foreach_batch_writer",
    "read_dead_letters",
    "read_pending",
    "schedule_dataframe",
]
