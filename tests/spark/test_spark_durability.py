"""schedule_dataframe(..., durability=Durability(...)): every task's pipelines are confirmed by
the replica before the run returns, on a primary and its replica as real processes; a frozen
replica fails the run instead of letting it return unconfirmed; and through Sentinel, the
rows of a run that returned survive the primary's death, and a second run finds them on the
promoted replica; a run the primary's death cuts short raises, and running it again once
the old primary is back as a replica finishes it."""

from __future__ import annotations

import functools
from collections.abc import Callable

import anyio
import pytest
import redis.asyncio
from pyspark.sql import DataFrame, SparkSession

from aioqueue import ConfigurationError, Durability
from aioqueue.spark import ScheduleResult, schedule_dataframe
from aioqueue.testing import EmbeddedSentinel, EmbeddedServer
from tests.producing.test_durability import KEYS, TIMEOUT, pair, replica_client
from tests.support.common import wait_until
from tests.support.replication import freeze, restart_as_replica, resume
from tests.support.spark_fixtures import off_loop

__all__ = ["pair", "replica_client"]  # fixtures, imported to be found

pytestmark = pytest.mark.timeout(180)

ROWS = 3000
# Rows of the run a failover cuts short: enough that it is still writing when the primary dies.
MID_RUN_ROWS = 30_000
RERUN_TIMEOUT = 5.0
RERUNS = 3


def orders(spark: SparkSession, first: int, count: int, partitions: int = 2) -> DataFrame:
    return spark.range(first, first + count, numPartitions=partitions).selectExpr(
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


async def test_a_durable_run_that_a_failover_cuts_short_fails_and_a_second_run_finishes_it(
    spark: SparkSession,
) -> None:
    """The primary dies in the middle of a durable run: the run raises (its tasks could not
    confirm what they wrote), or, if it returned, every one of its rows is on the promoted
    replica; and the same run again, once the old primary is back as a replica, returns with
    every row there exactly once."""
    group = EmbeddedSentinel()  # a group of its own: its primary is killed
    await anyio.to_thread.run_sync(group.start)
    try:
        primary = await anyio.to_thread.run_sync(group.primary)
        [replica] = [node for node in group.nodes if node is not primary]
        frame = orders(spark, 0, MID_RUN_ROWS, partitions=4).cache()
        assert frame.count() == MID_RUN_ROWS  # computed before the run, not during it

        def schedule(timeout: float) -> ScheduleResult:
            return schedule_dataframe(
                frame, "PaymentCheck", url=group.url, delay_col="delay", batch_size=100,
                durability=Durability(replicas=1, timeout=timeout),
            )  # fmt: skip

        first: ScheduleResult | Exception
        async with (
            redis.asyncio.Redis.from_url(replica.url) as on_replica,
            anyio.create_task_group() as running,
        ):

            async def first_run() -> None:
                nonlocal first
                try:
                    first = await off_loop(schedule, TIMEOUT)
                except Exception as exc:  # a task's failure, as Spark reports it
                    first = exc

            running.start_soon(first_run)

            async def replica_has_a_tenth() -> bool:
                return int(await on_replica.hlen(KEYS.events)) >= MID_RUN_ROWS // 10

            await wait_until(replica_has_a_tenth, within=60)
            await anyio.to_thread.run_sync(group.kill, primary)
            rows_at_kill = int(await on_replica.hlen(KEYS.events))
            await anyio.to_thread.run_sync(group.wait_for_failover, primary)
        outcome = first if isinstance(first, ScheduleResult) else type(first).__name__
        print(f"\nthe primary died with {rows_at_kill} rows on the replica; the run: {outcome}")
        assert rows_at_kill < MID_RUN_ROWS  # the kill came in the middle of the run
        if isinstance(first, ScheduleResult):
            # Returned: confirmed, so all of it is on the promoted replica.
            assert first.rows == MID_RUN_ROWS
            assert await _rows_on(replica) == MID_RUN_ROWS

        # The old primary back as the new one's replica, so that writes can be confirmed.
        await anyio.to_thread.run_sync(restart_as_replica, primary, replica)
        again = await run_until_it_returns(functools.partial(schedule, RERUN_TIMEOUT))
        assert again.rows == MID_RUN_ROWS
        assert again.already_pending >= rows_at_kill  # what the replica had was kept
        assert await _rows_on(replica) == MID_RUN_ROWS
        frame.unpersist()
    finally:
        await anyio.to_thread.run_sync(group.stop)


async def run_until_it_returns(run: Callable[[], ScheduleResult]) -> ScheduleResult:
    """Runs a job again until it returns, as its owner would after a failover: right after
    one, the sentinels may name no primary for a moment (a loaded machine makes the promoted
    one miss a ping), or the replica that rejoined may be syncing again."""
    for _ in range(RERUNS - 1):
        try:
            return await off_loop(run)
        except Exception as exc:  # a task's failure, as Spark reports it
            print(f"a run after the failover failed: {str(exc).splitlines()[-1][:200]}")
    return await off_loop(run)


async def _rows_on(server: EmbeddedServer) -> int:
    # A connection of its own each time: the sentinels close every client connection of the
    # replica they promote.
    async with redis.asyncio.Redis.from_url(server.url) as client:
        return int(await client.hlen(KEYS.events))


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
