"""The scripts of benchmarks/ that tests import: modules of a folder of scripts, not of a
package, which import each other by bare name."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def import_benchmark_script(monkeypatch: pytest.MonkeyPatch, name: str) -> ModuleType:
    """benchmarks/<name>.py, imported as the scripts import each other: with their folder on
    sys.path, which `monkeypatch` takes off again after the test."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module(name)
