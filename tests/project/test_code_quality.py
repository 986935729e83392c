"""The whole suite includes the linters: ruff and mypy --strict must pass on every file, and
nothing may need a newer Python than the oldest one the package promises."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The oldest and newest Python the package promises: requires-python and the classifiers of
# pyproject.toml, and the CI matrix (tests/project/test_packaging.py checks that they agree). The
# suite runs on one interpreter; these checks stand in for the others.
OLDEST_PYTHON = "3.10"
NEWEST_PYTHON = "3.13"
# What runs on the oldest Python: the package, and the examples and tests that CI runs there.
SOURCES = ["aioqueue", "examples", "tests"]


def _run(command: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy", "--strict"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
def test_linter_passes(command: list[str]) -> None:
    result = _run([sys.executable, "-m", *command])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("version", [OLDEST_PYTHON, NEWEST_PYTHON])
def test_the_package_type_checks_on_the_oldest_and_newest_python(version: str) -> None:
    """The standard library's types differ by version (3.13's BaseExceptionGroup.exceptions
    is typed more precisely than 3.10's backport): mypy reads typeshed as of `version`."""
    result = _run(
        [sys.executable, "-m", "mypy", "--strict", "--python-version", version, "aioqueue"]
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("Success: no issues found"), result.stdout


# Keywords declared once as a TypedDict and taken as `**options: Unpack[...]`: what a type
# checker makes of a caller's keywords (lines 15-18 below are wrong, line 14 is right).
KEYWORDS_SNIPPET = """\
from dataclasses import dataclass
from typing import Any

from aioqueue import Event, EventService, SyncProducer
from aioqueue.spark import read_pending


@dataclass
class Ping(Event):
    id: str


async def use(service: EventService, producer: SyncProducer, spark: Any) -> None:
    await service.enqueue(Ping(id="1"), 5, replace=True, context={"a": "b"}, max_wait=2.0)
    await service.enqueue(Ping(id="1"), 5, replaced=True)
    producer.enqueue(Ping(id="1"), 5, max_wait="soon")
    await service.enqueue_many([Ping(id="2")], at=5)
    read_pending(spark, "redis://", Ping, prefx="p")
"""


@pytest.mark.timeout(300)
def test_a_type_checker_sees_every_keyword_declared_once(tmp_path: Path) -> None:
    """The enqueue keywords (EnqueueOptions) and the Spark options reach type checkers as the
    keywords they are: a misspelt one and a value of the wrong type are errors, right ones
    are not."""
    snippet = tmp_path / "callers.py"
    snippet.write_text(KEYWORDS_SNIPPET)
    result = _run([sys.executable, "-m", "mypy", "--strict", str(snippet)])
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    flagged = {int(line.split(":")[1]) for line in errors}
    assert flagged == {15, 16, 17, 18}, result.stdout
    assert 'Unexpected keyword argument "replaced"' in result.stdout
    assert 'Argument "max_wait" to "enqueue" of "SyncProducer" has incompatible type "str"' in (
        result.stdout
    )
    assert 'Unexpected keyword argument "prefx"' in result.stdout


def _vermin(*paths: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """vermin (it has no `python -m` entry), failing on anything newer than OLDEST_PYTHON.

    --eval-annotations: annotations count as evaluated, as typing.get_type_hints,
    dataclasses and msgspec do with a handler's or an event's. Code behind a version check
    that vermin cannot follow carries a `# novermin` comment saying why.
    """
    vermin = Path(sysconfig.get_path("scripts")) / "vermin"
    return _run(
        [str(vermin), "--no-config-file", f"--target={OLDEST_PYTHON}-", "--violations",
         "--eval-annotations", "--no-tips", "-vvv", *paths],
        cwd=cwd,
    )  # fmt: skip


@pytest.mark.timeout(120)
def test_nothing_needs_a_newer_python_than_the_oldest_supported() -> None:
    result = _vermin(*SOURCES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Minimum required versions: {OLDEST_PYTHON}" in result.stdout, result.stdout


def test_vermin_finds_what_the_oldest_python_lacks(tmp_path: Path) -> None:
    """The check above can fail: a module new in 3.11 is found."""
    (tmp_path / "newer.py").write_text("import tomllib\n\nprint(tomllib.loads(''))\n")
    result = _vermin("newer.py", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "'tomllib' module requires !2, 3.11" in result.stdout, result.stdout
