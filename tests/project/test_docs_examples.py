"""Every Python block of README.md and docs/ runs as written, as the reader would run it.

Each block is saved under its title (or as example.py) in a directory of its own and run
with this interpreter as a script, or with pytest when its title names a test file (beside
the page's other named files, such as its conftest.py and pyproject.toml), with
AIOQUEUE_URL pointing at the session's server (at the session's cluster for a block that
connects to `redis+cluster://`). It must exit 0 with nothing on stderr (no traceback, no
warning, no logged error), print what its "Output" block says if it has one, and write only
keys under a prefix it names, a prefix no other block names: run in any order on one
server, the blocks never see each other's events. A block that only shows a file of
examples/ (a `--8<--` snippet) is that program, which tests/project/test_examples*.py run; an
excerpt of one (titled with its path and "(excerpt)") must be word for word in it.

Why a collector of our own rather than pytest-examples, Sybil or pytest-markdown-docs:
those run blocks inside the test process (Sybil even chains the blocks of a page into one
namespace, which is how fragments come about); here each block is a program run the way a
reader runs it, in a process of its own, so `asyncio.run`, module-level classes, logging
and warnings behave as they will for the reader, and a block cannot lean on another.
"""

from __future__ import annotations

import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
import redis.asyncio as redis
from _pytest.mark.structures import ParameterSet

from aioqueue.testing import EmbeddedCluster
from tests.support.common import all_keys
from tests.support.docs_blocks import ROOT, PythonExample, python_examples, support_files

EXAMPLES = python_examples()
# The front page promises an event handled within seconds of running its example.
FRONT_PAGE_SECONDS = 10.0
SPARK_LOG4J2 = ROOT / "tests" / "support" / "spark-log4j2.properties"
# What a local Spark needs to start quickly and quietly in a test, where a reader's machine
# would use its defaults: the block itself stays as the reader would write it.
SPARK_DEFAULTS = """\
spark.ui.enabled false
spark.ui.showConsoleProgress false
spark.driver.host 127.0.0.1
spark.driver.bindAddress 127.0.0.1
spark.driver.memory 1g
spark.sql.shuffle.partitions 2
spark.default.parallelism 2
spark.sql.session.timeZone UTC
"""
# The JVM announces the incubator module Spark 4 loads, on stderr, before any of Spark's own
# logging is configured: nothing a block could change.
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector\n"


def uses_spark(example: PythonExample) -> bool:
    return "pyspark" in example.block.code


def uses_cluster(example: PythonExample) -> bool:
    return "redis+cluster://" in example.block.code


def cases() -> list[ParameterSet]:
    params = []
    for example in EXAMPLES:
        if (
            example.block.included_file is not None
            or example.block.excerpt_of is not None
            or example.is_support_file
        ):
            continue
        # A Spark block starts a JVM of its own: seconds before the first row.
        marks = [pytest.mark.timeout(240)] if uses_spark(example) else []
        params.append(pytest.param(example, id=example.block.where, marks=marks))
    return params


def test_the_docs_have_python_examples() -> None:
    # The collector must find blocks where there are some, or every other test passes idle.
    where = {example.block.path.relative_to(ROOT).as_posix() for example in EXAMPLES}
    assert {"README.md", "docs/getting-started.md", "docs/guides/testing.md"} <= where


def test_no_two_blocks_share_a_prefix() -> None:
    owners: dict[str, list[str]] = collections.defaultdict(list)
    for example in EXAMPLES:
        for prefix in example.block.prefixes:
            owners[prefix].append(example.block.where)
    assert {prefix: where for prefix, where in owners.items() if len(where) > 1} == {}


def test_every_included_file_is_an_example_program_the_suite_runs() -> None:
    included = [e.block.included_file for e in EXAMPLES if e.block.included_file is not None]
    assert included, "the examples page shows the programs of examples/"
    for path in included:
        assert path.is_relative_to(ROOT / "examples"), path
        assert path.is_file(), path


def test_every_excerpt_is_shown_whole_on_the_examples_page() -> None:
    """An excerpt says so above it, and a reader with only the docs (and an installed wheel,
    which has no examples/) finds the whole file on the examples page."""
    excerpts = [e.block for e in EXAMPLES if e.block.excerpt_of is not None]
    assert {block.where.split(":")[0] for block in excerpts} >= {"docs/guides/sync-producer.md"}
    assert [b.where for b in excerpts if not (b.title or "").endswith(" (excerpt)")] == []
    examples_page = ROOT / "docs" / "guides" / "examples.md"
    shown = {e.block.included_file for e in EXAMPLES if e.block.path == examples_page}
    assert [b.where for b in excerpts if b.excerpt_of not in shown] == []


@pytest.mark.parametrize(
    "example",
    [example for example in EXAMPLES if example.block.excerpt_of is not None],
    ids=lambda example: example.block.where,
)
def test_every_excerpt_is_word_for_word_in_its_example(example: PythonExample) -> None:
    source = example.block.excerpt_of
    assert source is not None, example.block.title
    assert source.is_file(), example.block.title
    assert example.block.code in source.read_text()


def test_the_blocks_pass_the_projects_linters(tmp_path: Path) -> None:
    """ruff check and ruff format, with the project's settings: a block is code we ship."""
    for number, example in enumerate(EXAMPLES):
        if example.block.included_file is None and example.block.excerpt_of is None:
            (tmp_path / f"block_{number:03d}_{example.file_name}").write_text(example.block.code)
    # Outside the repository ruff cannot tell that aioqueue is first-party.
    settings = ["--config", str(ROOT / "pyproject.toml"), "--config",
                'lint.isort.known-first-party=["aioqueue"]']  # fmt: skip
    for command in (["check"], ["format", "--check", "--diff"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, *settings, str(tmp_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


def _environment(example: PythonExample, url: str, workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIOQUEUE_PREFIX")}
    env["AIOQUEUE_URL"] = url
    if uses_spark(example):
        conf = workdir / "spark-conf"
        conf.mkdir()
        shutil.copy(SPARK_LOG4J2, conf / "log4j2.properties")
        (conf / "spark-defaults.conf").write_text(SPARK_DEFAULTS)
        env.update(
            SPARK_CONF_DIR=str(conf),
            SPARK_LOCAL_IP="127.0.0.1",
            # The Python workers must import aioqueue: this interpreter has it.
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
    return env


@pytest.mark.parametrize("example", cases())
async def test_the_block_runs_as_written(
    example: PythonExample,
    redis_url: str,
    redis_client: redis.Redis,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    url = redis_url
    if uses_cluster(example):
        cluster: EmbeddedCluster = request.getfixturevalue("redis_cluster")
        url = cluster.url
    script = tmp_path / example.file_name
    script.write_text(example.block.code)
    command = [sys.executable, str(script)]
    if example.is_pytest_file:
        for name, content in support_files(example.block.path).items():
            (tmp_path / name).write_text(content)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(script)]
    started = time.monotonic()
    result = await anyio.run_process(
        command, cwd=tmp_path, env=_environment(example, url, tmp_path), check=False
    )
    elapsed = time.monotonic() - started
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    if uses_spark(example):
        stderr = stderr.replace(JVM_NOTICE, "", 1)
    assert result.returncode == 0, f"{example.block.where}\n{stdout}\n{stderr}"
    assert stderr == "", f"{example.block.where} wrote to stderr:\n{stderr}"
    if example.is_pytest_file:
        assert " passed" in stdout.splitlines()[-1], stdout
    if example.output is not None:
        assert stdout == example.output, f"{example.block.where} printed:\n{stdout}"
    if example.block.path.name == "README.md":
        assert elapsed < FRONT_PAGE_SECONDS, elapsed
    if not uses_cluster(example):
        keys = [key.decode() for key in await all_keys(redis_client)]
        prefixes = example.block.prefixes
        strays = [key for key in keys if not any(key.startswith(f"{p}:") for p in prefixes)]
        assert strays == [], f"{example.block.where} wrote keys outside {prefixes or 'any'}"
