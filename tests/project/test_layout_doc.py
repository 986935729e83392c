"""The package layout page (docs/development/layout.md) keeps up with the package: every
package and top-level module of aioqueue has its paragraph there."""

from __future__ import annotations

import re
from pathlib import Path

from tests.project.test_layout import LAYERS

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "development" / "layout.md"


def described() -> set[str]:
    """The packages and modules the page's paragraphs open with (`aioqueue/_wire/` ->
    `_wire`, `prometheus.py` -> `prometheus`, `aioqueue/__init__.py` -> `__init__`)."""
    heads = re.findall(r"^\*\*(.+?)\*\*: ", PAGE.read_text(), flags=re.MULTILINE)
    names = re.findall(r"`([^`]+)`", " ".join(heads))
    return {Path(name.rstrip("/")).name.removesuffix(".py") for name in names}


def test_every_package_has_its_paragraph_and_what_it_may_import() -> None:
    missing = set(LAYERS) - {"__main__"} - described()
    assert not missing, f"docs/development/layout.md has no paragraph for {sorted(missing)}"
    paragraphs = re.findall(r"^\*\*.+?\*\*: ", PAGE.read_text(), flags=re.MULTILINE)
    assert PAGE.read_text().count("*May import:*") == len(paragraphs)
