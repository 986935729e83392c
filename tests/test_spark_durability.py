"""schedule_dataframe(..., durability=Durability(...)): every task's pipelines are confirmed by
the replica before the run returns, on a primary and its replica as real processes; a frozen
replica fails the run instead of letting it return unconfirmed; and through Sentinel, the
rows of a run that returned survive the primary's death, and a second run finds them on the
promoted replica."""

from __future__ import annotations

import anyio
import pytest
import redis.asyncio
from pyspark.sql import DataFrame, SparkSession

from aioqueue import ConfigurationError, Durability
from aioqueue.spark import ScheduleResult, schedule_dataframe
from aioqueue.testing import EmbeddedSentinel, EmbeddedServer
from tests.replication_support import freeze, resume
from tests.spark_fixtures import off_loop
from tests.test_durability import KEYS, TIMEOUT, pair, replica_client

__all__ = ["pair", "replica_client"]  # fixtures, imported to be found

pytestmark = pytest.mark.timeout(180)

ROWS = 3000


def orders(spark: SparkSession, first: int, count: int) -> DataFrame:
    return spark.range(first, first + count, numPartitions=2).selectExpr(
        "format_string('e-%d', id) AS id", "CAST(id AS INT) AS order_id", "3600 AS delay"
    )


async def test_a_durable_run_returns_once_the_replica_has_every_row(
    spark: SparkSession,
    pair: tuple[EmbeddedServer, EmbeddedServer],
    replica_client: redis.asyncio.Redis,
) -> None:
    primary, replica = pair
    durability = Durability(replicas=1, timeout=TIMEOUT)

    def schedule(frame: DataFrame) -> ScheduleResult:
        return schedule_dataframe(
            frame, "PaymentCheck", url=primary.url, delay_col="delay", durability=durability
        )

    result = await off_loop(schedule, orders(spark, 0, ROWS))
    assert result == ScheduleResult(scheduled=ROWS, already_pending=0)
    # Read on the replica right after the return: no waiting, they must be there already.
    assert await replica_client.hlen(KEYS.events) == ROWS

    freeze(replica)
    try:
        with pytest.raises(Exception, match="DurabilityError") as refused:
            await off_loop(schedule, orders(spark, ROWS, 100))
        assert "0 of 1 replicas" in str(refused.value)
    finally:
        resume(replica)
    # Run again once the replica is back: what the failed run wrote is kept, the rest is
    # written, and all of it is confirmed.
    again = await off_loop(schedule, orders(spark, ROWS, 100))
    assert again.rows == 100
    assert await replica_client.hlen(KEYS.events) == ROWS + 100


async def test_the_rows_of_a_durable_run_survive_a_failover(spark: SparkSession) -> None:
    group = EmbeddedSentinel()  # a group of its own: its primary is killed
    await anyio.to_thread.run_sync(group.start)
    try:

        def schedule(frame: DataFrame) -> ScheduleResult:
            return schedule_dataframe(
                frame, "PaymentCheck", url=group.url, delay_col="delay",
                durability=Durability(replicas=1, timeout=TIMEOUT),
            )  # fmt: skip

        first = await off_loop(schedule, orders(spark, 0, ROWS))
        assert first == ScheduleResult(scheduled=ROWS, already_pending=0)

        old_primary = await anyio.to_thread.run_sync(group.primary)
        await anyio.to_thread.run_sync(group.kill, old_primary)
        await anyio.to_thread.run_sync(group.wait_for_failover, old_primary)
        new_primary = await anyio.to_thread.run_sync(group.primary)
        async with redis.asyncio.Redis.from_url(new_primary.url) as observer:
            assert await observer.hlen(KEYS.events) == ROWS  # every confirmed row survived

        # The same rows again, through the sentinels to the new primary: all already there.
        # (Confirmed by no replica now: the promoted one has none, so no durability here.)
        again = await off_loop(
            schedule_dataframe, orders(spark, 0, ROWS), "PaymentCheck", url=group.url,
            delay_col="delay",
        )  # fmt: skip
        assert again == ScheduleResult(scheduled=0, already_pending=ROWS)
    finally:
        await anyio.to_thread.run_sync(group.stop)


@pytest.mark.parametrize(
    "durability", [Durability(replicas=-1, timeout=1), Durability(replicas=1, timeout=0)]
)
def test_a_bad_durability_is_refused_before_any_job(
    spark: SparkSession, durability: Durability
) -> None:
    with pytest.raises(ConfigurationError):
        schedule_dataframe(
            orders(spark, 0, 1), "PaymentCheck", url="redis://127.0.0.1:1", durability=durability
        )
