"""Every install command the docs show names an extra that pyproject.toml defines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# `pip install 'aioqueue[http]'`, `pip install -e '.[demo,spark]'`, ...
INSTALL = re.compile(r"pip install (?:-e )?'(?:aioqueue|\.\.?)\[([a-z,]+)\]'")


def documents() -> list[Path]:
    return [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "benchmarks").glob("*.md"),
        *(ROOT / "examples").glob("*.py"),
        *(ROOT / "aioqueue").rglob("*.py"),
    ]


def defined_extras() -> dict[str, list[str]]:
    tomllib = pytest.importorskip("tomllib")
    with (ROOT / "pyproject.toml").open("rb") as file:
        extras: dict[str, list[str]] = tomllib.load(file)["project"]["optional-dependencies"]
    return extras


def test_every_extra_named_in_the_docs_exists() -> None:
    named = {
        (path.relative_to(ROOT).as_posix(), extra)
        for path in documents()
        for match in INSTALL.finditer(path.read_text())
        for extra in match[1].split(",")
    }
    assert {extra for _, extra in named} >= {"all", "demo", "http", "spark"}
    extras = defined_extras()
    assert [(path, extra) for path, extra in sorted(named) if extra not in extras] == []


def test_all_installs_every_optional_part() -> None:
    extras = defined_extras()
    [requirement] = extras["all"]
    bundled = set(re.fullmatch(r"aioqueue\[([a-z,]+)\]", requirement)[1].split(","))  # type: ignore[index]
    assert bundled == {name for name, needs in extras.items() if needs} - {"all", "test"}
