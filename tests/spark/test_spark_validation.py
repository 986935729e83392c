"""Input that cannot be scheduled fails with InvalidDataFrameError before anything is written."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis
from pyspark.sql import SparkSession

from aioqueue import AioqueueError
from aioqueue.spark import InvalidDataFrameError, schedule_dataframe
from tests.support.spark_fixtures import off_loop

# The first Spark test of a session also pays for starting the JVM and warming it up.
pytestmark = pytest.mark.timeout(180)

# (SQL for a one-or-two-row frame, schedule_dataframe options, what the error must say)
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "missing-id-column": (
        "SELECT 1 AS order_id",
        {"id_col": "order_ref"},
        r"no column 'order_ref'; its columns are 'order_id'",
    ),
    "missing-payload-column": (
        "SELECT 'p-1' AS id",
        {"payload_cols": ["order_id"]},
        r"no column 'order_id'",
    ),
    "non-string-id": (
        "SELECT 7 AS id, 1 AS order_id",
        {},
        r"id column 'id' must be a string column, got int",
    ),
    "null-id": (
        "SELECT * FROM VALUES ('p-1', 1), (NULL, 2) AS t(id, order_id)",
        {},
        r"1 rows have null ids",
    ),
    "empty-id": (
        "SELECT '' AS id, 1 AS order_id",
        {},
        r"1 rows have empty ids",
    ),
    "due-not-a-timestamp": (
        "SELECT 'p-1' AS id, '2030-01-01' AS due",
        {"due_col": "due"},
        r"due column 'due' must be a timestamp, got string",
    ),
    "due-without-time-zone": (
        "SELECT 'p-1' AS id, TIMESTAMP_NTZ '2030-01-01 00:00:00' AS due",
        {"due_col": "due"},
        r"got timestamp_ntz \(a timestamp without time zone",
    ),
    "null-due": (
        "SELECT 'p-1' AS id, CAST(NULL AS TIMESTAMP) AS due",
        {"due_col": "due"},
        r"1 rows have null due times",
    ),
    "negative-delay": (
        "SELECT * FROM VALUES ('p-1', 5), ('p-2', -5) AS t(id, wait)",
        {"delay_col": "wait"},
        r"1 rows have negative delays",
    ),
    "nan-delay": (
        "SELECT 'p-1' AS id, CAST('NaN' AS DOUBLE) AS wait",
        {"delay_col": "wait"},
        r"1 rows have null or NaN delays",
    ),
    "delay-not-a-duration": (
        "SELECT 'p-1' AS id, 'soon' AS wait",
        {"delay_col": "wait"},
        r"delay column 'wait' must hold seconds",
    ),
    "due-and-delay": (
        "SELECT 'p-1' AS id, 5 AS wait, current_timestamp() AS due",
        {"delay_col": "wait", "due_col": "due"},
        r"give due_col \('due'\) or delay_col \('wait'\), not both",
    ),
    "binary-payload": (
        "SELECT 'p-1' AS id, X'00FF' AS blob",
        {},
        r"payload column 'blob' cannot be written as JSON: blob is binary",
    ),
    "binary-inside-a-payload-struct": (
        "SELECT 'p-1' AS id, named_struct('items', array(X'00')) AS order",
        {},
        r"payload column 'order' cannot be written as JSON: order\.items\[\] is binary",
    ),
    "interval-payload": (
        "SELECT 'p-1' AS id, INTERVAL '1' DAY AS grace",
        {},
        r"payload column 'grace' cannot be written as JSON: grace is interval day",
    ),
    "payload-field-named-id": (
        "SELECT 'p-1' AS ref, 'x' AS id",
        {"id_col": "ref"},
        r"a payload column is named 'id'",
    ),
    "duplicate-payload-fields": (
        "SELECT 'p-1' AS id, 1 AS order_id",
        {"payload_cols": ["order_id", "order_id"]},
        r"payload columns \['order_id'\] appear more than once",
    ),
    "struct-context": (
        "SELECT 'p-1' AS id, named_struct('a', 1) AS trace",
        {"context_cols": ["trace"]},
        r"context column 'trace' must be a string",
    ),
    "bad-event-type": (
        "SELECT 'p-1' AS id",
        {"event_type": "Payment Check"},
        r"event type 'Payment Check' must be",
    ),
    "bad-prefix": (
        "SELECT 'p-1' AS id",
        {"prefix": "a{b}"},
        r"prefix 'a\{b\}'",
    ),
    "bad-batch-size": (
        "SELECT 'p-1' AS id",
        {"batch_size": 0},
        r"batch_size must be an integer >= 1, got 0",
    ),
}


@pytest.mark.parametrize(("sql", "options", "message"), CASES.values(), ids=CASES.keys())
async def test_bad_input_is_refused_before_anything_is_written(
    spark: SparkSession,
    redis_url: str,
    redis_client: redis.Redis,
    sql: str,
    options: dict[str, Any],
    message: str,
) -> None:
    frame = spark.sql(sql)
    options = {"event_type": "PaymentCheck", **options}
    event_type = options.pop("event_type")
    with pytest.raises(InvalidDataFrameError, match=message) as raised:
        await off_loop(schedule_dataframe, frame, event_type, url=redis_url, **options)
    assert isinstance(raised.value, AioqueueError)
    assert isinstance(raised.value, ValueError)
    assert await redis_client.dbsize() == 0
