"""A Spark standalone cluster on loopback, started from the pip pyspark: one master and one
worker, each its own JVM, whose executors run their own Python workers (unlike local[2],
where everything shares the driver's JVM). Registered as a fixture from conftest.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aioqueue.testing import free_port

LOG4J2 = Path(__file__).resolve().parent / "spark-log4j2.properties"


@dataclass(frozen=True)
class SparkStandalone:
    master_url: str
    """spark://127.0.0.1:PORT"""
    environment: dict[str, str]
    """What a driver process needs in its environment to use the cluster."""


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _alive_workers(web_port: int) -> int | None:
    """The master's count of live workers, or None while its web UI does not answer with
    the master's JSON (not up yet, or not the master)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/json/", timeout=2) as reply:
            state = json.load(reply)
    except (OSError, ValueError):
        return None
    return (
        int(state["aliveworkers"]) if isinstance(state, dict) and "aliveworkers" in state else None
    )


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    home = _spark_home()
    environment = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_WORKER_DIR": str(tmp_path_factory.mktemp("spark-worker")),
        "SPARK_LOG_DIR": str(tmp_path_factory.mktemp("spark-logs")),
        "SPARK_DAEMON_JAVA_OPTS": f"-Dlog4j2.configurationFile={LOG4J2.as_uri()}",
        "SPARK_DAEMON_MEMORY": "256m",
    }
    port, web_port, worker_web_port = (free_port() for _ in range(3))  # distinct
    master_url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    logs = tmp_path_factory.mktemp("spark-daemons")
    processes: list[subprocess.Popen[bytes]] = []
    log_files = []
    try:
        deadline = time.monotonic() + 60

        def wait_for(workers: int) -> None:
            """Until the master's UI counts `workers` live workers (0: until it answers)."""
            while (alive := _alive_workers(web_port)) is None or alive < workers:
                if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                    details = "\n".join(f.read_text()[-2000:] for f in logs.iterdir())
                    raise RuntimeError(f"the Spark standalone cluster did not start:\n{details}")
                time.sleep(0.2)

        for name, arguments, workers in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                        "--port", str(port), "--webui-port", str(web_port)], 0),
            ("worker", ["org.apache.spark.deploy.worker.Worker", master_url, "--host",
                        "127.0.0.1", "--cores", "2", "--memory", "1g",
                        "--webui-port", str(worker_web_port)], 1),
        ):  # fmt: skip
            log = (logs / f"{name}.log").open("wb")
            log_files.append(log)
            processes.append(
                subprocess.Popen([spark_class, *arguments], env=environment, stdout=log, stderr=log)
            )
            # The worker starts once the master answers: both UIs never race for a port.
            wait_for(workers)
        yield SparkStandalone(master_url, environment)
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for log in log_files:
            log.close()


def kill_executor_python_workers() -> int:
    """SIGKILLs the Python processes of the cluster's executors (the pyspark daemon and the
    workers it forked), as a crashing task would die: the task running on them fails and
    Spark retries it. The test session's own local[2] workers are left alone. Returns how
    many processes were killed."""
    return kill_python_descendants(lambda _, command: b"CoarseGrainedExecutorBackend" in command)


def kill_python_descendants(is_root: Callable[[int, bytes], bool]) -> int:
    """SIGKILLs every Python process descended from a process that `is_root(pid, command
    line)` accepts; returns how many."""
    parents = {}
    commands = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue  # gone meanwhile
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    roots = {pid for pid, command in commands.items() if is_root(pid, command)}
    below = set(roots)
    while grown := {pid for pid, parent in parents.items() if parent in below} - below:
        below |= grown
    # By the program run: a JVM's class path names site-packages/pyspark, under python3.x.
    doomed = {
        pid
        for pid in below - roots
        if Path(commands.get(pid, b"").split(b" ")[0].decode(errors="replace")).name.startswith(
            "python"
        )
    }
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(doomed)
