"""How the suite's tests are shared among pytest-xdist's processes (registered from
conftest.py): whole files, as `--dist loadfile` does, except that every Spark test goes to one
process.

Spark's fixtures are per process (a local session, a Connect server, a standalone cluster:
JVMs that start Python workers). Spread over three processes they started up to three of each
on two cores, and Spark's own fixed deadlines failed under that load: the Connect server's
10 s for a foreachBatch worker to connect back, a standalone job's first rows. In one
process one Spark test runs at a time, beside the other processes' Redis tests."""

from __future__ import annotations

from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

SPARK_TESTS = "tests/spark/"


class SparkInOneProcess(LoadFileScheduling):
    """Files as work units, with the Spark tests' files as a single one. xdist hands out
    the units with the most tests first, and the Spark unit is among them, so it starts at
    once rather than ending the run."""

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(SPARK_TESTS):
            return SPARK_TESTS
        scope: str = super()._split_scope(nodeid)
        return scope


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> LoadFileScheduling | None:
    # Only for --dist loadfile, which `./dev test` asks for; any other choice is kept.
    if config.getoption("dist") != "loadfile":
        return None
    return SparkInOneProcess(config, log)
