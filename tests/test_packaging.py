"""The project's metadata: every install command the docs and messages show names the
distribution and an extra it defines, the version lives in one place, and the license is
declared as SPDX."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import aioqueue

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "aioqueue-redis"
# `pip install 'aioqueue-redis[http]'`, `pip install -e '.[demo,spark]'`, and the import
# name mistaken for the distribution's, `pip install 'aioqueue[http]'`.
INSTALL = re.compile(r"pip install (?:-e )?'([\w.-]+)\[([a-z,]+)\]'")
# Modules whose messages still name the old distribution; each is listed until it is
# changed, and the test fails once it no longer needs to be.
PENDING_RENAME: set[str] = set()


def pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib")  # new in Python 3.11
    with (ROOT / "pyproject.toml").open("rb") as file:
        project: dict[str, Any] = tomllib.load(file)
    return project


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        ROOT / "CHANGELOG.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "examples").glob("*.py"),
        *(ROOT / "aioqueue").rglob("*.py"),
    ]


def install_commands() -> set[tuple[str, str, str]]:
    """(file, what is installed, extra) for every install command in the documents."""
    return {
        (path.relative_to(ROOT).as_posix(), match[1], extra)
        for path in documents()
        for match in INSTALL.finditer(path.read_text())
        for extra in match[2].split(",")
    }


def test_every_install_command_names_the_distribution_and_an_extra_it_defines() -> None:
    commands = install_commands()
    assert {extra for _, _, extra in commands} >= {"all", "demo", "http", "spark", "docs"}
    extras = pyproject()["project"]["optional-dependencies"]
    assert [(path, extra) for path, _, extra in sorted(commands) if extra not in extras] == []
    wrong_name = {
        path for path, installed, _ in commands if installed not in {DISTRIBUTION, ".", ".."}
    }
    assert wrong_name == PENDING_RENAME


def test_all_installs_every_optional_part() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    [requirement] = extras["all"]
    match = re.fullmatch(rf"{DISTRIBUTION}\[([a-z,]+)\]", requirement)
    assert match is not None, requirement
    bundled = set(match[1].split(","))
    assert bundled == {name for name, needs in extras.items() if needs} - {"all", "test", "docs"}


def test_the_version_is_written_once_in_the_package() -> None:
    project = pyproject()
    assert project["project"]["name"] == DISTRIBUTION
    assert "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "aioqueue.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.dev\d+)?", aioqueue.__version__)
    # The changelog has a section for it; a development version's is the one in the making.
    changelog = (ROOT / "CHANGELOG.md").read_text()
    in_development = ".dev" in aioqueue.__version__
    assert ("## [Unreleased]" if in_development else f"## [{aioqueue.__version__}]") in changelog


def test_the_license_is_an_spdx_expression_with_its_file() -> None:
    project = pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    # An SPDX license and a "License ::" classifier together are an error for setuptools.
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]
