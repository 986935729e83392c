"""The documentation site builds with `mkdocs build --strict` (no broken link or anchor, no
page outside the navigation, no docstring mkdocstrings cannot render), and its API reference
holds every public name; the README is a front page that links into it."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The modules whose public names the reference documents.
PUBLIC_MODULES = (
    "aioqueue",
    "aioqueue.testing",
    "aioqueue.spark",
    "aioqueue.prometheus",
    "aioqueue.tracing",
    "aioqueue.django",
    "aioqueue.http",
    "aioqueue.pytest_plugin",
)
# Public names whose docstrings are still to be written (mkdocstrings leaves out what has
# none). Each is listed until it has one; the test fails once an entry is no longer needed.
PENDING_DOCSTRINGS: set[str] = set()
README_MAX_LINES = 250

# The build takes a few seconds, more on a loaded machine.
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        # Material prints a notice about its successor on every build; it is not ours to act on.
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return target


def documented(site: Path) -> set[str]:
    """The Python objects the site documents: the inventory mkdocstrings writes."""
    raw = (site / "objects.inv").read_bytes()
    header_lines = 4  # "# Sphinx inventory version 2", project, version, compression note
    body = raw.split(b"\n", header_lines)[header_lines]
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}


def _members(cls: type) -> Iterator[str]:
    """The public methods and properties a class of aioqueue defines or inherits from
    another class of aioqueue (data attributes are described by the class's docstring)."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("aioqueue"):
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            if isinstance(value, (property, staticmethod, classmethod)) or inspect.isfunction(
                value
            ):
                yield name


def public_names() -> set[str]:
    names = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            names.add(f"{module_name}.{name}")
            value = getattr(module, name)
            if inspect.isclass(value) and value.__module__.startswith("aioqueue"):
                names |= {f"{module_name}.{name}.{member}" for member in _members(value)}
    return names


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    # The changelog page includes CHANGELOG.md itself, and the examples page the programs.
    assert "Keep a Changelog" in (site / "changelog" / "index.html").read_text()
    assert "create_service" in (site / "guides" / "examples" / "index.html").read_text()


def test_every_public_name_is_in_the_api_reference(site: Path) -> None:
    expected = public_names()
    assert {"aioqueue.EventService.enqueue", "aioqueue.pytest_plugin.aioqueue_url"} <= expected
    missing = expected - documented(site)
    assert sorted(missing - PENDING_DOCSTRINGS) == [], "give these a docstring and a page"
    assert sorted(PENDING_DOCSTRINGS - missing) == [], "documented now: drop from the list"


def test_the_readme_is_a_front_page_linking_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= README_MAX_LINES
    for needed in ("## Install", "pip install aioqueue-redis\n", "./dev demo\n./dev test"):
        assert needed in readme, needed
    targets = re.findall(r"\]\(((?:docs/|CHANGELOG|LICENSE)[^)#]*)(?:#[^)]*)?\)", readme)
    assert len(targets) > 10
    assert [target for target in targets if not (ROOT / target).is_file()] == []


def _text(html: str) -> str:
    """What a page says, without its markup, on one line."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _readme_table_rows(section: str) -> list[str]:
    """The first cell of each table row of a part of the README shared with the site."""
    readme = (ROOT / "README.md").read_text()
    start, end = f"<!-- --8<-- [start:{section}] -->", f"<!-- --8<-- [end:{section}] -->"
    shared = readme[readme.index(start) : readme.index(end)]
    cells = [line.split("|")[1] for line in shared.splitlines() if line.startswith("| ")]
    return [" ".join(cell.replace("`", "").split()) for cell in cells if cell.strip()]


def test_the_home_page_carries_the_readmes_comparison_and_the_dashboard(site: Path) -> None:
    home = (site / "index.html").read_text()
    rows = _readme_table_rows("why")
    assert {"Runs in", "Redis Cluster", "Redis memory per pending event"} <= set(rows)
    assert [row for row in rows if row not in _text(home)] == []
    assert 'class="footnote"' in home  # the comparison's note on Celery's ETA tasks
    [picture] = re.findall(r'<img [^>]*src="([^"]*dashboard\.png)"', home)
    assert (site / picture).is_file()


def test_getting_started_carries_the_readmes_install_section(site: Path) -> None:
    page = _text((site / "getting-started" / "index.html").read_text())
    assert "pip install '.[http,uvloop]'" in page
    assert "pip install aioqueue-redis" in page
    rows = _readme_table_rows("install")
    assert {"a web app that only schedules events", "a worker", "trying everything"} <= set(rows)
    assert [row for row in rows if row not in page] == []
