"""One local SparkSession for the whole test session (registered from conftest.py).

Started only by the tests that ask for `spark`, so the rest of the suite never pays for the
JVM. Settings keep it quick and quiet: two local cores, no UI, UTC, errors-only logs.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")

LOG4J2 = Path(__file__).resolve().parent / "spark-log4j2.properties"


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # Imported here so that collecting the suite needs no JVM.
    from pyspark.sql import SparkSession

    # Workers must run this interpreter, which has aioqueue and its dependencies.
    wanted = {
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    saved = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("aioqueue-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        # Compiling generated code costs seconds on the first queries and gains nothing on
        # frames of a few rows.
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}")
        .getOrCreate()
    )
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


async def off_loop(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Runs a blocking Spark call in a worker thread, so the test's event loop (and the
    service running on it) keeps going meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(function, *args, **kwargs))
