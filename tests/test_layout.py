"""The import direction ``protocols ← runtime ← actors`` and the public API re-exports."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What each package may import from the project (besides itself).
ALLOWED = {"protocols": set(), "runtime": {"protocols"}, "actors": {"protocols", "runtime"}}
PROTOCOL_THIRD_PARTY = {"msgspec"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_go_one_way(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package}/ has no modules"
    for path in files:
        for name in _imports(path):
            if name in ALLOWED and name != package:
                assert name in ALLOWED[package], f"{path.relative_to(ROOT)} imports {name}"
            if package == "protocols" and name not in ALLOWED:
                assert name in PROTOCOL_THIRD_PARTY or name in sys.stdlib_module_names, (
                    f"{path.relative_to(ROOT)} imports {name}: protocols is msgspec + stdlib only"
                )


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_public_names_are_exported(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported, f"{package}/__init__.py must list its public names in __all__"
    for name in exported:
        assert not name.startswith("_")
        assert hasattr(module, name), f"{package}.__all__ names {name} but it is missing"


def test_the_run_is_used_through_its_face() -> None:
    """Outside ``actors/run/`` only ``actors.run`` itself is imported, never a module in it
    (its policies are typed against ``RunOps``, and may be cut differently tomorrow)."""
    run_dir = ROOT / "actors" / "run"
    for path in sorted(ROOT.rglob("*.py")):
        if run_dir in path.parents or ".git" in path.parts or "venv" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                base = node.module
                if node.level and path.parent == ROOT / "actors":
                    base = f"actors.{node.module}"
                names = [base]
            for name in names:
                assert not name.startswith("actors.run."), (
                    f"{path.relative_to(ROOT)} imports {name}: import actors.run instead")
