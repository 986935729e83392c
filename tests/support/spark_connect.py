"""A Spark Connect server on loopback, started from the pip pyspark's own script and jar
(`sbin/start-connect-server.sh`, `jars/spark-connect_*.jar`), and a client session of it.
Registered as fixtures from conftest.py; started only by the tests that ask for them.

The server runs local[2,4]: two cores, as the classic `spark` fixture, and up to 4 attempts
per task (local mode's default is 1), so that a task whose Python worker a test kills is
retried as it would be on a cluster. Its Python workers run this interpreter.

The client is made with pyspark.sql.connect's own builder: the classic builder would refuse
it beside the classic session, and would switch the whole process to Connect (the
SPARK_CONNECT_MODE_ENABLED variable), turning the classic tests' pyspark.sql.functions into
Connect ones. So test code for a Connect session writes its expressions in SQL text.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from aioqueue.testing import free_port
from tests.support.spark_standalone import kill_python_descendants

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession as ConnectSession

LOG4J2 = Path(__file__).resolve().parent / "spark-log4j2.properties"
SETTINGS = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.memory": "1g",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}",
}


@dataclass(frozen=True)
class ConnectServer:
    url: str
    """sc://127.0.0.1:PORT"""
    pid: int
    """The start script's process, which leads the group of the server's processes."""

    def kill_python_workers(self) -> int:
        """SIGKILLs the server's Python workers (the pyspark daemon and the workers it
        forked), as a crashing task would die: the tasks running on them fail and are
        retried. Returns how many processes were killed."""
        return kill_python_descendants(lambda pid, _: pid == self.pid)


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    home = _spark_home()
    jars = sorted((home / "jars").glob("spark-connect_*.jar"))
    assert jars, f"this PySpark has no Connect server jar in {home / 'jars'}"
    logs = tmp_path_factory.mktemp("spark-connect")
    environment = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOG_DIR": str(logs),
        "SPARK_PID_DIR": str(logs),
    }
    port = free_port()
    command = [str(home / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2,4]"]
    options = {
        **SETTINGS,
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }
    for key, value in options.items():
        command += ["--conf", f"{key}={value}"]
    log_path = logs / "server.log"
    with log_path.open("wb") as log:
        # A session of its own: the script, spark-submit and the JVM stop as one group.
        server = subprocess.Popen(
            command, env=environment, stdout=log, stderr=log, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 90
        while not _listening(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the Spark Connect server did not start:\n{log_path.read_text()[-3000:]}"
                )
            time.sleep(0.1)
        yield ConnectServer(f"sc://127.0.0.1:{port}", server.pid)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="session")
def spark_connect(connect_server: ConnectServer) -> Iterator[ConnectSession]:
    """A Spark Connect client session of the session's Connect server."""
    from pyspark.sql.connect.session import SparkSession

    session = SparkSession.builder.remote(connect_server.url).create()
    try:
        yield session
    finally:
        session.stop()
