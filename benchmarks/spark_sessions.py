"""The Spark sessions the Spark benchmarks run on: a classic local[2] session, and a Spark
Connect client of a local[2] server started from the PySpark wheel's own script and jar.

Both run their Python workers with this interpreter (the one with aioqueue), on loopback,
quiet. The Connect server is a process of its own, so the client process holds no JVM.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from pyspark.sql import SparkSession

# The settings both session kinds get (the Connect server gets them at its start).
SETTINGS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.memory": "1g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
}


def _python_environment() -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def local_spark(app_name: str) -> SparkSession:
    """A classic local[2] session."""
    _python_environment()
    builder = SparkSession.builder.master("local[2]").appName(app_name)
    for key, value in SETTINGS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextlib.contextmanager
def connect_spark(app_name: str) -> Iterator[SparkSession]:
    """A Spark Connect session on a local[2] server this starts (and stops on exit)."""
    import pyspark
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    _python_environment()
    home = Path(pyspark.__file__).resolve().parent
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="aioqueue-connect-") as work:
        environment = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOG_DIR": work,
            "SPARK_PID_DIR": work,
            "SPARK_NO_DAEMONIZE": "1",
        }
        options = {
            **SETTINGS,
            "spark.app.name": app_name,
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(port),
        }
        command = [str(home / "sbin" / "start-connect-server.sh"), "--master", "local[2]"]
        for key, value in options.items():
            command += ["--conf", f"{key}={value}"]
        log = Path(work) / "server.log"
        with log.open("wb") as output:
            # A process group of its own: the script's shell, spark-submit and the JVM stop
            # together.
            server = subprocess.Popen(
                command, env=environment, stdout=output, stderr=output, start_new_session=True
            )
        try:
            _wait_for_port(port, server, log)
            session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").create()
            try:
                # Typed apart from the classic session, with the same API: the benchmarks and
                # aioqueue.spark take either.
                yield cast(SparkSession, session)
            finally:
                session.stop()
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, 15)
            server.wait(timeout=60)


def _wait_for_port(port: int, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the Connect server did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
