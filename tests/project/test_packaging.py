"""The project's metadata: every install command the docs and messages show names the
distribution and an extra it defines, the install lines lead with what works before the
first release, the version lives in one place, and the license is declared as SPDX."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import aioqueue

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "aioqueue-redis"
# `pip install 'aioqueue-redis[http]'`, `pip install -e '.[demo,spark]'`, and the import
# name mistaken for the distribution's, `pip install 'aioqueue[http]'`.
INSTALL = re.compile(r"pip install (?:-e )?'([\w.-]+)\[([a-z,]+)\]'")
# An extra named without the command, as the install table by role names them.
NAMED = re.compile(r"`aioqueue-redis\[([a-z,]+)\]`")
# What works before the first release (from a clone), then the release line.
FROM_A_CLONE = "pip install '.["
FROM_THE_INDEX = "pip install aioqueue-redis\n"
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
    assert {extra for _, _, extra in commands} >= {"demo", "http", "uvloop", "spark", "docs"}
    extras = pyproject()["project"]["optional-dependencies"]
    assert [(path, extra) for path, _, extra in sorted(commands) if extra not in extras] == []
    wrong_name = {
        path for path, installed, _ in commands if installed not in {DISTRIBUTION, ".", ".."}
    }
    assert wrong_name == PENDING_RENAME


def test_every_extra_the_docs_name_is_defined() -> None:
    extras = pyproject()["project"]["optional-dependencies"]
    named = {
        (path.relative_to(ROOT).as_posix(), extra)
        for path in documents()
        for match in NAMED.finditer(path.read_text())
        for extra in match[1].split(",")
    }
    assert {extra for _, extra in named} >= {"http", "uvloop", "prometheus", "spark", "all"}
    assert sorted((path, extra) for path, extra in named if extra not in extras) == []


def _readme_section(name: str) -> str:
    """A part of the README between snippet markers, which the docs include as it is."""
    readme = (ROOT / "README.md").read_text()
    start, end = f"<!-- --8<-- [start:{name}] -->", f"<!-- --8<-- [end:{name}] -->"
    return readme[readme.index(start) + len(start) : readme.index(end)]


def test_the_install_lines_lead_with_what_works_before_the_release() -> None:
    install = _readme_section("install")
    home = (ROOT / "docs" / "index.md").read_text()
    for text in (install, home):
        from_a_clone, from_the_index = text.find(FROM_A_CLONE), text.find(FROM_THE_INDEX)
        assert 0 <= from_a_clone < from_the_index, text
    # Getting started shows the README's install section itself, not a copy of it.
    getting_started = (ROOT / "docs" / "getting-started.md").read_text()
    assert '--8<-- "README.md:install"' in getting_started
    assert FROM_THE_INDEX not in getting_started


def _installed_closure(requirements: list[str]) -> set[str]:
    """The distributions `requirements` bring, as this environment has them installed."""
    expanded: set[tuple[str, frozenset[str]]] = set()
    pending = [(Requirement(raw), {""}) for raw in requirements]
    while pending:
        requirement, extras = pending.pop()
        marker = requirement.marker
        if marker is not None and not any(marker.evaluate({"extra": e}) for e in extras):
            continue
        name, wanted = canonicalize_name(requirement.name), frozenset(requirement.extras)
        if (name, wanted) in expanded:
            continue
        expanded.add((name, wanted))
        requires = importlib.metadata.distribution(name).requires or []
        pending += [(Requirement(raw), {"", *wanted}) for raw in requires]
    return {name for name, _ in expanded}


def test_all_brings_about_a_gigabyte_as_the_install_table_says() -> None:
    """The README warns what `[all]` costs; the test environment has every part installed."""
    [row] = [line for line in _readme_section("install").splitlines() if "[all]`" in line]
    assert "about 1 GB installed" in row
    project = pyproject()["project"]
    optional = project["optional-dependencies"]
    [everything] = optional["all"]
    bundled = [need for extra in Requirement(everything).extras for need in optional[extra]]
    closure = _installed_closure(project["dependencies"] + bundled)
    assert {"pyspark", "pyarrow", "pandas", "numpy", "django"} <= closure
    size = sum(
        path.stat().st_size
        for name in closure
        for file in importlib.metadata.distribution(name).files or []
        if (path := Path(str(file.locate()))).is_file()
    )
    assert 0.7e9 < size < 1.5e9, f"{size / 1e9:.2f} GB"


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
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "aioqueue._version.__version__"
    }
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
