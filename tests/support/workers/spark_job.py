"""A Spark driver for tests/spark/test_spark_standalone.py: schedules a frame of events on a Spark
standalone cluster (the test kills a task midway) and prints what happened as one JSON line.

    python spark_job.py MASTER_URL REDIS_URL pending|due-now ROWS
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from aioqueue.spark import ScheduleResult, read_pending, schedule_dataframe

LOG4J2 = Path(__file__).resolve().parents[1] / "spark-log4j2.properties"
TASKS = 4


def main() -> None:
    master, redis_url, scenario, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    spark = (
        SparkSession.builder.master(master)
        .appName(f"aioqueue-{scenario}")
        .config("spark.task.maxFailures", "4")
        .config("spark.executor.memory", "512m")
        .config("spark.driver.memory", "512m")
        # One task at a time, so that the test's kill hits a task midway through its rows.
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = spark.range(rows, numPartitions=TASKS).select(
        F.format_string("p-%05d", "id").alias("id"),
        F.col("id").cast("int").alias("order_id"),
        F.lit(3600 if scenario == "pending" else 0).alias("delay"),
    )

    def schedule() -> ScheduleResult:
        return schedule_dataframe(
            frame, "PaymentCheck", url=redis_url, delay_col="delay", batch_size=25
        )

    spark.sparkContext.setJobGroup("first", "the run whose task the test kills")
    first = schedule()
    report: dict[str, object] = {
        "first": [first.scheduled, first.already_pending],
        "failed_tasks": failed_tasks(spark, "first"),
    }
    if scenario == "pending":
        again = schedule()
        read = read_pending(spark, redis_url, "PaymentCheck").select("id").collect()
        report |= {
            "again": [again.scheduled, again.already_pending],
            "read": sorted(row.id for row in read),
        }
    spark.stop()
    print(json.dumps(report))


def failed_tasks(spark: SparkSession, group: str) -> int:
    """How many task attempts of the group's jobs failed. Spark's status store is fed by its
    listener bus, after the job returns: a failure may take a moment to show."""
    tracker = spark.sparkContext.statusTracker()
    deadline = time.monotonic() + 10
    while True:
        jobs = [tracker.getJobInfo(job) for job in tracker.getJobIdsForGroup(group)]
        stages = [tracker.getStageInfo(stage) for job in jobs if job for stage in job.stageIds]
        failed = sum(stage.numFailedTasks for stage in stages if stage is not None)
        if failed or time.monotonic() > deadline:
            return failed
        time.sleep(0.1)


if __name__ == "__main__":
    main()
