"""benchmarks/ holds only what the benchmark page and the chaos run use: every script is
named in the Files table of benchmarks/README.md, and each is run by `run.sh`, named on a
docs page or in the chaos run's section, or imported or run by a script that is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"


def _scripts() -> dict[str, Path]:
    return {path.name: path for path in sorted(BENCHMARKS.glob("*.py"))}


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _reaches(path: Path, scripts: dict[str, Path]) -> set[str]:
    """The scripts `path` imports or names by file name (the driver runs scripts by name)."""
    text = path.read_text()
    named = {name for name in scripts if re.search(rf"\b{re.escape(name)}\b", text)}
    return (named | _imports(path)) & set(scripts)


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.partition(".")[0])
    return {f"{name}.py" for name in names}


def test_every_benchmark_script_is_in_the_files_table() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    table = set(re.findall(r"`([\w.-]+\.(?:py|sh))`", _section(readme, "Files")))
    assert sorted(set(_scripts()) - table) == []
    assert "run.sh" in table


def test_every_benchmark_script_is_used_by_the_page_the_chaos_run_or_run_sh() -> None:
    readme = (BENCHMARKS / "README.md").read_text()
    pages = "\n".join(path.read_text() for path in (ROOT / "docs").rglob("*.md"))
    entry_points = (BENCHMARKS / "run.sh").read_text() + pages + _section(readme, "Chaos run")
    scripts = _scripts()
    used = {name for name in scripts if re.search(rf"\b{re.escape(name)}\b", entry_points)}
    assert used, "nothing found: the entry points moved"
    frontier = set(used)
    while frontier:  # what a used script imports or runs is used too
        reached = set().union(*(_reaches(scripts[name], scripts) for name in frontier))
        frontier = reached - used
        used |= frontier
    assert sorted(set(scripts) - used) == []
