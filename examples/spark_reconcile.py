"""The nightly reconciliation job: (re)schedule a payment check for every unpaid order.

    AIOQUEUE_URL=redis://localhost:6379 python examples/spark_reconcile.py
    SPARK_REMOTE=sc://localhost:15002 AIOQUEUE_URL=... python examples/spark_reconcile.py

It writes a small Parquet table of orders (standing in for the system of record), reads the
unpaid ones and schedules a `PaymentCheck` for each, due 30 minutes after the order was
placed. Then it runs the same job again, as tomorrow's run would: every check is still
pending, so nothing new is scheduled. Without AIOQUEUE_URL it starts an embedded server
(`pip install 'aioqueue-redis[demo,spark]'`). It runs in a local[2] session, or with
SPARK_REMOTE as a client of that Spark Connect server, whose executors then write the
events (they need aioqueue installed, and to reach AIOQUEUE_URL; so does this process).

The worker side is an ordinary service with a handler for

    @dataclass
    class PaymentCheck(Event):
        id: str
        order_id: int
        amount: float
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aioqueue.spark import ScheduleResult, schedule_dataframe
from aioqueue.testing import EmbeddedServer


def write_orders(spark: SparkSession, table: Path) -> None:
    """The system of record: 8 orders, 6 of them unpaid."""
    placed = datetime(2030, 1, 1, 9, 0, tzinfo=timezone.utc)
    orders = [
        (1000 + n, "unpaid" if n % 3 else "paid", 10.0 * n, placed + timedelta(minutes=n), "eu")
        for n in range(1, 9)
    ]
    frame = spark.createDataFrame(
        orders, "order_id int, status string, amount double, placed_at timestamp, region string"
    )
    frame.write.mode("overwrite").parquet(str(table))


def payment_checks(spark: SparkSession, table: Path) -> DataFrame:
    """One row per unpaid order: the event id, when to check, payload and context columns."""
    return (
        spark.read.parquet(str(table))
        .where(F.col("status") == "unpaid")
        .select(
            # A stable id per order: re-running the job finds the check already pending.
            F.concat(F.lit("payment-check-"), F.col("order_id").cast("string")).alias("id"),
            (F.col("placed_at") + F.expr("INTERVAL 30 MINUTES")).alias("check_at"),
            "order_id",
            "amount",
            "region",
        )
    )


def reconcile(spark: SparkSession, url: str, table: Path) -> ScheduleResult:
    return schedule_dataframe(
        payment_checks(spark, table),
        "PaymentCheck",
        url=url,
        due_col="check_at",
        payload_cols=["order_id", "amount"],
        context_cols=["region"],
    )


def run(spark: SparkSession, url: str, workdir: Path) -> list[ScheduleResult]:
    """Writes the table, then runs the job twice; returns both runs' results."""
    table = workdir / "orders.parquet"
    write_orders(spark, table)
    return [reconcile(spark, url, table), reconcile(spark, url, table)]


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    if url := os.environ.get("AIOQUEUE_URL"):
        yield url
        return
    with EmbeddedServer() as server:
        yield server.url


def session() -> SparkSession:
    """A Spark Connect session when SPARK_REMOTE names a server, else a local one."""
    if remote := os.environ.get("SPARK_REMOTE"):
        return SparkSession.builder.remote(remote).getOrCreate()
    # Spark's workers must run this interpreter, the one that has aioqueue installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aioqueue-reconcile")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    spark = session()
    try:
        with redis_url() as url, tempfile.TemporaryDirectory() as workdir:
            for name, result in zip(
                ["first", "second"], run(spark, url, Path(workdir)), strict=True
            ):
                print(
                    f"{name} run: {result.scheduled} scheduled, "
                    f"{result.already_pending} already pending"
                )
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
