"""The shape of the tree, checked so it stays: packages, their faces, their imports, no circles.

The rules are data at the top of this module (``ALLOWED``, ``OWNS``, ``MAX_RUNTIME_MODULES``); the
tests below only read them. Imports are read from the syntax (module level, inside functions and
under ``if TYPE_CHECKING`` alike; relative ones resolved), by ``tests/_imports.py``.

A *package* here is an entry of ``ALLOWED``: a package directory (``runtime.bus``) or a module of
its own (``runtime.errors``). A module belongs to the longest entry it lies in, so
``runtime.bus.kv`` belongs to ``runtime.bus`` and ``actors.planner`` to ``actors``. A package's
*face* is its ``__init__.py`` (or the module itself).
"""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ._imports import (
    Import,
    find_modules,
    imports_in,
    module_graph,
    strongly_connected,
    unit_graph,
    unit_of,
)

ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("protocols", "runtime", "actors")
# Directories that use the project from outside: they import its faces only.
OUTSIDE = ("tests", "examples", "benchmarks")

# --- The rules -----------------------------------------------------------------------------------

_RUNTIME_CORE = frozenset({"protocols", "runtime.errors", "runtime.config"})
_RUNTIME_FACES = frozenset(
    {
        "runtime.errors", "runtime._proc", "runtime.agent", "runtime.nonces",
        "runtime.config", "runtime.dag", "runtime.bus", "runtime.models", "runtime.tools",
        "runtime.telemetry", "runtime.client", "runtime.actor", "runtime.worker",
    }
)  # fmt: skip
# What the built-in roles may reach: runtime's faces, never the worker that serves them.
_ROLE_REACH = _RUNTIME_FACES - {"runtime.worker", "runtime._proc"} | {"protocols", "runtime"}

# What each package may import from the project, besides itself. The direction is one way:
# protocols ← runtime ← actors; inside runtime, configuration and the plan graph sit at the bottom
# and the programs (worker, gateway, cli) at the top. Drawn from LAYOUT.md before the move: fit it
# to the packages the move makes (each package an entry, or test_table_covers_the_tree fails).
ALLOWED: dict[str, frozenset[str]] = {
    "protocols": frozenset(),
    # Modules directly in runtime/ (each its own face).
    "runtime.errors": frozenset(),
    "runtime._proc": frozenset({"runtime.errors"}),
    "runtime.nonces": frozenset({"runtime.errors", "runtime.config", "runtime.bus"}),
    "runtime.agent": _RUNTIME_CORE
    | {"runtime.models", "runtime.tools", "runtime.telemetry", "runtime.dag"},
    # Leaves: configuration types and the plan graph do no I/O.
    "runtime.config": frozenset({"protocols", "runtime.errors"}),
    "runtime.dag": frozenset({"protocols", "runtime.errors"}),
    "runtime.telemetry": _RUNTIME_CORE | {"runtime.bus"},
    "runtime.bus": _RUNTIME_CORE | {"runtime._proc"},
    "runtime.tools": _RUNTIME_CORE | {"runtime.dag"},
    "runtime.models": _RUNTIME_CORE
    | {"runtime._proc", "runtime.dag", "runtime.tools", "runtime.telemetry"},
    "runtime.client": _RUNTIME_CORE | {"runtime.bus", "runtime.dag", "runtime.telemetry"},
    "runtime.actor": _RUNTIME_CORE
    | {"runtime.bus", "runtime.dag", "runtime.models", "runtime.tools", "runtime.telemetry"},
    # The worker finds roles through entry points, so it never imports actors.
    "runtime.worker": _RUNTIME_CORE
    | {"runtime._proc", "runtime.agent", "runtime.nonces", "runtime.actor"}
    | {"runtime.bus", "runtime.models", "runtime.tools", "runtime.telemetry"},
    "runtime.gateway": _RUNTIME_CORE | {"runtime.bus", "runtime.client", "runtime.telemetry"},
    "runtime.testing": _RUNTIME_CORE | {"runtime._proc"},
    "runtime.cli": _RUNTIME_FACES | {"protocols", "runtime.gateway", "runtime.testing"},
    # The face for programs and plugin authors: everything but the programs themselves.
    "runtime": _RUNTIME_FACES,
    # Roles reach runtime through its faces; the run is used through its own face, and the
    # prompts, the answers' schema and what a planner hears of others are leaves the run and
    # the roles share.
    "actors.prompts": _ROLE_REACH,
    "actors.answers": _ROLE_REACH,
    "actors.liveness": _ROLE_REACH,
    "actors.run": _ROLE_REACH | {"actors.prompts", "actors.liveness"},
    "actors": _ROLE_REACH | {"actors.run", "actors.prompts", "actors.answers", "actors.liveness"},
}

# Third-party libraries one package owns: no other package of runtime/ or actors/ imports them.
OWNS: dict[str, str] = {
    "nats": "runtime.bus",
    "openai": "runtime.models",
    "starlette": "runtime.gateway",
    "sse_starlette": "runtime.gateway",
    "uvicorn": "runtime.gateway",
    "typer": "runtime.cli",
    "rich": "runtime.cli",
    "opentelemetry": "runtime.telemetry",
    # The MCP SDK (an optional extra) and the HTTP client it takes: MCP servers as tools.
    "mcp": "runtime.tools",
    "mcp_types": "runtime.tools",
    "httpx2": "runtime.tools",
}
# protocols is the wire contract: these and the standard library, nothing else.
PROTOCOLS_THIRD_PARTY = frozenset({"msgspec"})

# Modules directly in runtime/ (``runtime/*.py``; ``__init__.py``, the face, is not counted).
MAX_RUNTIME_MODULES = 12


# --- Reading the tree ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """The modules of a source tree and every import they make."""

    root: Path
    modules: dict[str, Path]
    imports: tuple[Import, ...]

    def where(self, imp: Import) -> str:
        return f"{imp.path.relative_to(self.root)}:{imp.line}"


def scan(root: Path, directories: Iterable[str]) -> Tree:
    modules = find_modules(root, directories)
    imports = tuple(
        imp for name, path in modules.items() for imp in imports_in(name, path, modules)
    )
    return Tree(root, modules, imports)


@functools.cache
def project_tree() -> Tree:
    return scan(ROOT, PROJECT + OUTSIDE)


def _top(module: str) -> str:
    return module.partition(".")[0]


def _in_project(module: str) -> bool:
    return _top(module) in PROJECT


@dataclass(frozen=True)
class Finding:
    """One broken rule: a line that says where, which rule and what to do, and who is involved."""

    message: str
    involves: tuple[str, ...]


def _fail_on(findings: Iterable[Finding]) -> None:
    reported = sorted({f.message for f in findings})
    if reported:
        pytest.fail(f"{len(reported)} broken:\n" + "\n".join(reported), pytrace=False)


# --- The checks, each a function of a tree (so a test can try one on a tree of its own) --------


def _project_graph(tree: Tree) -> dict[str, set[str]]:
    """Which project modules import which."""
    project = {name: path for name, path in tree.modules.items() if _in_project(name)}
    return module_graph(tree.imports, project)


def circle_findings(tree: Tree) -> list[Finding]:
    """Import circles among the project's modules, through any import at all."""
    graph = _project_graph(tree)
    lines = {(imp.source, imp.target): tree.where(imp) for imp in tree.imports}
    findings = []
    for circle in strongly_connected(graph):
        members = set(circle)
        edges = ", ".join(
            f"{a} → {b} ({lines[a, b]})" for a in circle for b in sorted(graph[a] & members)
        )
        findings.append(
            Finding(
                f"import circle among {', '.join(circle)}: {edges} — cut it: move what both need "
                "into a module they both import, or pass it in",
                tuple(circle),
            )
        )
    return findings


def package_circle_findings(tree: Tree, units: Iterable[str]) -> list[Finding]:
    """Circles among packages: each may import the other only one way."""
    graph = _project_graph(tree)
    units = tuple(units)
    first_line: dict[tuple[str, str], str] = {}  # (unit, unit) → where one such import is
    for imp in sorted(tree.imports, key=lambda imp: (str(imp.path), imp.line)):
        if imp.source in graph and imp.target in graph:
            pair = (unit_of(imp.source, units) or "", unit_of(imp.target, units) or "")
            first_line.setdefault(pair, tree.where(imp))
    findings = []
    for circle in strongly_connected(unit_graph(graph, units)):
        edges = ", ".join(
            f"{a} → {b} ({first_line[a, b]})"
            for a in circle
            for b in circle
            if a != b and (a, b) in first_line
        )
        findings.append(
            Finding(
                f"package circle among {', '.join(circle)}: {edges} — make the imports between "
                "them go one way",
                tuple(circle),
            )
        )
    return findings


# --- The table itself ----------------------------------------------------------------------------


def test_table_covers_the_tree() -> None:
    """Every entry of ALLOWED exists, names only entries, and every module belongs to one."""
    tree = project_tree()
    findings = []
    for unit, allowed in ALLOWED.items():
        if not any(unit_of(m, (unit,)) for m in tree.modules):
            findings.append(
                Finding(
                    f"ALLOWED names {unit}, which does not exist: create it or drop the entry",
                    (unit,),
                )
            )
        for other in sorted(allowed - ALLOWED.keys()):
            findings.append(
                Finding(
                    f"ALLOWED[{unit!r}] names {other}, which is not an entry: add it or drop it",
                    (unit,),
                )
            )
    for name, path in tree.modules.items():
        if not _in_project(name):
            continue
        if unit_of(name, ALLOWED) is None:
            findings.append(
                Finding(f"{path.relative_to(ROOT)} is in no package of ALLOWED: add one", (name,))
            )
        elif unit_of(name, ALLOWED) == "runtime" and name != "runtime":
            findings.append(
                Finding(
                    f"{path.relative_to(ROOT)} sits directly in runtime/ but is no entry of "
                    f"ALLOWED: move it into a package, or add {name!r} with what it may import",
                    (name,),
                )
            )
    _fail_on(findings)


def test_the_rules_go_one_way() -> None:
    """The table itself draws no circle: a package may not be allowed to import its importers."""
    circles = strongly_connected(ALLOWED)
    assert not circles, f"ALLOWED lets these packages import each other in a circle: {circles}"


# --- (1) Imports follow ALLOWED ------------------------------------------------------------------


def test_imports_follow_the_table() -> None:
    tree = project_tree()
    findings = []
    for imp in tree.imports:
        if not (_in_project(imp.source) and imp.target in tree.modules):
            continue
        source_unit = unit_of(imp.source, ALLOWED)
        target_unit = unit_of(imp.target, ALLOWED)
        if source_unit is None or target_unit is None or source_unit == target_unit:
            continue  # outside the table: test_table_covers_the_tree reports it
        if target_unit not in ALLOWED[source_unit]:
            findings.append(
                Finding(
                    f"{tree.where(imp)}: {imp.source} imports {imp.target}, but {target_unit} is "
                    f"not in ALLOWED[{source_unit!r}] — reach it through a package listed there, "
                    "or change the rule if the layout changed",
                    (imp.source, imp.target),
                )
            )
    _fail_on(findings)


# --- (2) Third-party libraries have one owner ----------------------------------------------------


def test_third_party_libraries_have_one_owner() -> None:
    tree = project_tree()
    findings = []
    for imp in tree.imports:
        if not _in_project(imp.source) or imp.target in tree.modules:
            continue
        library = imp.top
        if library == "__future__":
            continue
        unit = unit_of(imp.source, ALLOWED)
        owner = OWNS.get(library)
        if owner is not None and unit != owner:
            findings.append(
                Finding(
                    f"{tree.where(imp)}: {imp.source} imports {library}, which only {owner} may "
                    f"import — use {owner}'s face, or move this code into {owner}",
                    (imp.source,),
                )
            )
        if _top(imp.source) == "protocols" and not (
            library in PROTOCOLS_THIRD_PARTY or library in sys.stdlib_module_names
        ):
            findings.append(
                Finding(
                    f"{tree.where(imp)}: protocols imports {library}; protocols is "
                    f"{', '.join(sorted(PROTOCOLS_THIRD_PARTY))} + stdlib only — keep the code "
                    "that needs it in runtime",
                    (imp.source,),
                )
            )
    _fail_on(findings)


# --- (3) No circle -------------------------------------------------------------------------------


def test_no_import_circle_among_modules() -> None:
    _fail_on(circle_findings(project_tree()))


def test_no_import_circle_among_packages() -> None:
    _fail_on(package_circle_findings(project_tree(), ALLOWED))


# --- (4) A face per package ----------------------------------------------------------------------


def _bound_names(module: ast.Module) -> set[str]:
    """Names a module binds at its top level (also inside top-level ``if``/``try`` blocks)."""
    names: set[str] = set()
    statements: list[ast.stmt] = list(module.body)
    while statements:
        node = statements.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).partition(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.If | ast.Try | ast.With):
            statements.extend(node.body)
            statements.extend(getattr(node, "orelse", []))
            for handler in getattr(node, "handlers", []):
                statements.extend(handler.body)
            statements.extend(getattr(node, "finalbody", []))
    return names


def face_findings(tree: Tree) -> list[Finding]:
    findings = []
    for name, path in tree.modules.items():
        if not (_in_project(name) and path.name == "__init__.py"):
            continue
        where = path.relative_to(tree.root)
        module = ast.parse(path.read_text(), filename=str(path))
        declared = [
            node
            for node in module.body
            if isinstance(node, ast.Assign | ast.AnnAssign)
            and any(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        ]
        if not declared:
            findings.append(
                Finding(
                    f"{where}: no __all__ — declare a tuple of the package's public names",
                    (f"{name}.__all__",),
                )
            )
            continue
        node = declared[-1]
        value = node.value
        if not (
            isinstance(value, ast.Tuple)
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)
        ):
            findings.append(
                Finding(
                    f"{where}:{node.lineno}: __all__ is not a tuple of names — write it as a "
                    'literal tuple of strings (`__all__ = ("Name", ...)`)',
                    (f"{name}.__all__",),
                )
            )
            continue
        bound = _bound_names(module)
        for element in value.elts:
            assert isinstance(element, ast.Constant)
            exported = str(element.value)
            if exported.startswith("_"):
                findings.append(
                    Finding(
                        f"{where}:{element.lineno}: __all__ lists the private {exported} — "
                        "drop it or give it a public name",
                        (f"{name}.__all__",),
                    )
                )
            elif exported not in bound:
                findings.append(
                    Finding(
                        f"{where}:{element.lineno}: __all__ lists {exported}, which the face "
                        "does not define — import it there or drop it",
                        (f"{name}.__all__",),
                    )
                )
    return findings


def test_every_package_has_a_face() -> None:
    """Every package ``__init__.py`` declares a tuple ``__all__`` of names it defines."""
    _fail_on(face_findings(project_tree()))


def _packages() -> list[str]:
    return sorted(
        name
        for name, path in project_tree().modules.items()
        if _in_project(name) and path.name == "__init__.py"
    )


@pytest.mark.parametrize("package", _packages())
def test_faces_export_what_they_list(package: str) -> None:
    """Importing each face gives every name of its ``__all__``, and only public ones."""
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", ())
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{package}.__all__ lists {missing}, which it does not have"


# --- (5) Code outside a package imports its face -------------------------------------------------


def face_import_findings(tree: Tree, units: Iterable[str]) -> list[Finding]:
    """Imports that reach past another package's face, or take a private name from it."""
    units = tuple(units)
    findings = []
    for imp in tree.imports:
        if imp.target not in tree.modules or not _in_project(imp.target):
            continue
        if not (_in_project(imp.source) or _top(imp.source) in OUTSIDE):
            continue
        source_unit = unit_of(imp.source, units) if _in_project(imp.source) else None
        target_unit = unit_of(imp.target, units)
        if target_unit is None or source_unit == target_unit:
            continue
        if imp.target != target_unit:
            findings.append(
                Finding(
                    f"{tree.where(imp)}: {imp.source} imports {imp.target}, inside {target_unit} "
                    f"— import from its face (`from {target_unit} import …`), exporting the name "
                    "there if it is missing",
                    (imp.source, imp.target),
                )
            )
        elif imp.name is not None and imp.name.startswith("_"):
            findings.append(
                Finding(
                    f"{tree.where(imp)}: {imp.source} imports the private {imp.name} from "
                    f"{target_unit} — make it public in that face, or keep the code that needs it "
                    f"inside {target_unit}",
                    (imp.source, imp.target),
                )
            )
    return findings


def test_code_outside_a_package_imports_its_face() -> None:
    """Across packages, and from tests/, examples/ and benchmarks/: faces and public names only."""
    _fail_on(face_import_findings(project_tree(), ALLOWED))


# --- (6) A handful of modules directly in runtime/ -----------------------------------------------


def test_runtime_has_a_handful_of_top_level_modules() -> None:
    flat = sorted(
        path.stem
        for path in (ROOT / "runtime").glob("*.py")
        if path.name != "__init__.py"
    )
    assert len(flat) <= MAX_RUNTIME_MODULES, (
        f"runtime/ holds {len(flat)} modules directly ({', '.join(flat)}), at most "
        f"{MAX_RUNTIME_MODULES} — group them into a package of their own"
    )


# --- (7) The checker catches a new circle --------------------------------------------------------


def _write(root: Path, files: dict[str, str]) -> Tree:
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return scan(root, ["runtime"])


NEW_CIRCLES = {
    "both inside functions": {
        "runtime/a.py": "def late() -> None:\n    from runtime.b import B\n",
        "runtime/b.py": "def late() -> None:\n    from .a import late\n",
    },
    "one under TYPE_CHECKING": {
        "runtime/a.py": "from .b import B\n",
        "runtime/b.py": "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from runtime import a\nclass B: ...\n",
    },
}


@pytest.mark.parametrize("files", NEW_CIRCLES.values(), ids=NEW_CIRCLES.keys())
def test_a_new_circle_is_found(tmp_path: Path, files: dict[str, str]) -> None:
    """Try it: two modules that import each other, though never both at import time."""
    tree = _write(tmp_path, {"runtime/__init__.py": "__all__ = ()\n", **files})
    assert [f.involves for f in circle_findings(tree)] == [("runtime.a", "runtime.b")]


def test_a_longer_circle_names_its_imports(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {
            "runtime/__init__.py": "__all__ = ()\n",
            "runtime/a.py": "def late() -> None:\n    from .b import thing\n",
            "runtime/b.py": "from runtime.c import other\nthing = 1\n",
            "runtime/c.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from . import a\nother = 2\n",
            "runtime/d.py": "from . import c\n",
        },
    )
    findings = circle_findings(tree)
    assert [f.involves for f in findings] == [("runtime.a", "runtime.b", "runtime.c")]
    assert "runtime.a → runtime.b (runtime/a.py:2)" in findings[0].message
    assert "runtime.c → runtime.a (runtime/c.py:3)" in findings[0].message


def test_a_circle_between_packages_is_found(tmp_path: Path) -> None:
    """Two packages importing each other through different modules: no module circle, yet one."""
    tree = _write(
        tmp_path,
        {
            "runtime/__init__.py": "__all__ = ()\n",
            "runtime/bus/__init__.py": "__all__ = ()\n",
            "runtime/bus/core.py": "class Bus:\n    def go(self) -> None:\n"
            "        from ..config.settings import Settings\n",
            "runtime/bus/kv.py": "class Bucket: ...\n",
            "runtime/config/__init__.py": "__all__ = ()\n",
            "runtime/config/settings.py": "class Settings: ...\n",
            "runtime/config/load.py": "from runtime.bus.kv import Bucket\n",
        },
    )
    assert circle_findings(tree) == []
    findings = package_circle_findings(tree, ["runtime", "runtime.bus", "runtime.config"])
    assert [f.involves for f in findings] == [("runtime.bus", "runtime.config")]
    assert "runtime.bus → runtime.config (runtime/bus/core.py:3)" in findings[0].message
    assert "runtime.config → runtime.bus (runtime/config/load.py:1)" in findings[0].message


def test_a_clean_tree_has_no_findings(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {
            "runtime/__init__.py": "from .bus import Bus as Bus\n__all__ = ('Bus',)\n",
            "runtime/bus/__init__.py": "from .core import Bus as Bus\n__all__ = ('Bus',)\n",
            "runtime/bus/core.py": "from ..errors import Failed\nclass Bus: ...\n",
            "runtime/errors.py": "class Failed(Exception): ...\n",
        },
    )
    units = ["runtime", "runtime.bus", "runtime.errors"]
    assert circle_findings(tree) == []
    assert package_circle_findings(tree, units) == []
    assert face_findings(tree) == []
    assert face_import_findings(tree, units) == []


def test_a_reach_past_a_face_is_found(tmp_path: Path) -> None:
    tree = _write(
        tmp_path,
        {
            "runtime/__init__.py": "from .bus.core import Bus\n__all__ = ['Bus']\n",
            "runtime/bus/__init__.py": "from .core import _Pool as _Pool\n__all__ = ('Bus',)\n",
            "runtime/bus/core.py": "class Bus: ...\nclass _Pool: ...\n",
            "runtime/cli.py": "from runtime.bus import _Pool\n",
        },
    )
    units = ["runtime", "runtime.bus", "runtime.cli"]
    messages = [f.message for f in face_import_findings(tree, units)]
    assert [m.split(" — ")[0] for m in messages] == [
        "runtime/__init__.py:1: runtime imports runtime.bus.core, inside runtime.bus",
        "runtime/cli.py:1: runtime.cli imports the private _Pool from runtime.bus",
    ]
    faces = [f.message.split(" — ")[0] for f in face_findings(tree)]
    assert faces == [
        "runtime/__init__.py:2: __all__ is not a tuple of names",
        "runtime/bus/__init__.py:2: __all__ lists Bus, which the face does not define",
    ]
