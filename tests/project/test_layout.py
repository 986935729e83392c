"""The package's layers: every import inside aioqueue points down (docs/development/layout.md).

A module may import its own group and any group of a lower layer, never a higher layer nor
another group of its own layer (delivery and admin do not know each other).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "aioqueue"

# group -> layer; a group is a top-level module or subpackage of aioqueue.
LAYERS = {
    "testing": 0,
    "_model": 0,
    "_version": 0,
    "_transport": 1,
    "_wire": 2,
    "_producing": 3,
    "_delivery": 3,
    "_admin": 4,
    "_recurring": 4,
    "_sync": 4,
    "_service": 5,
    "__init__": 6,
    "tracing": 6,
    "prometheus": 6,
    "pytest_plugin": 7,
    "spark": 6,
    "django": 6,
    "http": 7,
    "_cli": 8,
    "__main__": 9,
}


def _group(module: str) -> str:
    """`aioqueue._wire.store` -> `_wire`; `aioqueue` itself -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The aioqueue modules `path` imports, relative imports resolved."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target == "aioqueue" or target.startswith("aioqueue."):
                found.add(target)
        elif isinstance(node, ast.Import):
            found |= {
                alias.name
                for alias in node.names
                if alias.name == "aioqueue" or alias.name.startswith("aioqueue.")
            }
    return found


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_group_has_a_layer() -> None:
    groups = {_group(_module_name(path)) for path in _modules()}
    assert groups <= set(LAYERS), f"give these a layer: {sorted(groups - set(LAYERS))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda path: str(path.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    source_group = _group(_module_name(path))
    for target in sorted(_imports(path)):
        target_group = _group(target)
        if target_group == source_group:
            continue
        assert LAYERS[target_group] < LAYERS[source_group], (
            f"{_module_name(path)} (layer {LAYERS[source_group]}) imports {target} "
            f"(layer {LAYERS[target_group]}): imports must point down"
        )


def test_the_test_helpers_need_nothing_else_from_aioqueue() -> None:
    for path in (PACKAGE / "testing").glob("*.py"):
        outside = {target for target in _imports(path) if _group(target) != "testing"}
        assert not outside, f"{path.name} imports {outside}"


def test_the_layout_check_sees_a_wrong_import() -> None:
    # The check itself must be able to fail: a delivery module importing the service would.
    assert _group("aioqueue._service") == "_service"
    assert LAYERS[_group("aioqueue._service")] > LAYERS["_delivery"]
    consumer = PACKAGE / "_delivery" / "consumer.py"
    assert "aioqueue._wire.store" in _imports(consumer)
