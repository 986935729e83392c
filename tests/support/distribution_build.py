"""Building the sdist and the wheel as a release does, offline, for the packaging tests."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Built:
    wheel: Path
    sdist: Path
    output: str


def copy_of_the_checkout(target: Path) -> Path:
    """The source tree without virtualenvs, caches and build leftovers: building from a copy
    leaves the checkout untouched (setuptools writes egg-info and build/ beside the source)."""
    ignored = shutil.ignore_patterns(
        ".git", ".venv", "*.egg-info", "build", "dist", "site", "__pycache__", ".*_cache",
        ".hypothesis",
    )  # fmt: skip
    return Path(shutil.copytree(ROOT, target, ignore=ignored))


def build(source: Path, out: Path, *only: str) -> subprocess.CompletedProcess[str]:
    """`python -m build` of `source` into `out`; `only` is "--sdist" or "--wheel", or empty.

    Without a flag, `build` makes the sdist and then the wheel *from the sdist*, as pip does
    from an index: a file the sdist lacks is missing from the wheel too. --no-isolation uses
    this environment's setuptools (the `test` extra pins one that reads SPDX licenses)
    instead of downloading one per run; the release workflow builds with isolation.
    """
    return subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", *only, "--outdir", str(out), str(source)],
        capture_output=True,
        text=True,
        check=False,
    )


def build_both(source: Path) -> Built:
    out = source.parent / "dist"
    result = build(source, out)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    [wheel] = out.glob("*.whl")
    [sdist] = out.glob("*.tar.gz")
    return Built(wheel, sdist, output)
