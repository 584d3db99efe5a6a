"""Every import of a source tree, read from its syntax, and the circles they close.

The layout test reads imports from the AST rather than from ``sys.modules``: an import inside a
function or under ``if TYPE_CHECKING`` never runs at import time, yet it ties two modules together
just the same, and a circle through one is a circle to cut.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = (
    "Import",
    "find_modules",
    "imports_in",
    "module_graph",
    "module_name",
    "strongly_connected",
    "unit_graph",
    "unit_of",
)


@dataclass(frozen=True)
class Import:
    """One imported module or name, as one line of one file asks for it."""

    source: str  # the importing module, dotted (``runtime.bus.core``)
    path: Path  # its file
    line: int
    # The absolute module imported: a module of the tree when it names one (the longest prefix
    # that does), the dotted name as written otherwise (``nats.js``, ``msgspec``).
    target: str
    name: str | None  # the name taken from ``target`` (``from target import name``), else None

    @property
    def top(self) -> str:
        """The distribution-level name: ``nats`` for ``nats.js.api``."""
        return self.target.partition(".")[0]


def module_name(root: Path, path: Path) -> str:
    """``runtime/bus/__init__.py`` → ``runtime.bus``; ``runtime/errors.py`` → ``runtime.errors``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, directories: Iterable[str]) -> dict[str, Path]:
    """Every ``.py`` file under ``root/<directory>`` for each directory, by dotted module name."""
    modules: dict[str, Path] = {}
    for directory in directories:
        for path in sorted((root / directory).rglob("*.py")):
            modules[module_name(root, path)] = path
    return modules


def _absolute_base(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a (possibly relative) ``from … import`` reads from."""
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join([*package, *([node.module] if node.module else [])])


def _in_tree(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is a module of the tree, if any."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_in(module: str, path: Path, modules: Mapping[str, Path]) -> Iterator[Import]:
    """Every import in ``path`` (module level, inside functions, under ``TYPE_CHECKING``).

    ``from pkg import sub`` counts as importing the module ``pkg.sub`` when it is one, as Python
    does; ``from pkg import Name`` as importing ``pkg`` and taking ``Name`` from it.
    """
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _in_tree(alias.name, modules) or alias.name
                yield Import(module, path, node.lineno, target, None)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute_base(module, is_package, node)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in modules:
                    yield Import(module, path, node.lineno, submodule, None)
                else:
                    target = _in_tree(base, modules) or base
                    yield Import(module, path, node.lineno, target, alias.name)


def module_graph(imports: Iterable[Import], modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Which modules of the tree each module of the tree imports (itself left out)."""
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for imp in imports:
        if imp.source in graph and imp.target in modules and imp.target != imp.source:
            graph[imp.source].add(imp.target)
    return graph


def unit_of(module: str, units: Iterable[str]) -> str | None:
    """The longest unit (package or module of a layout table) that ``module`` is or lies in."""
    best: str | None = None
    for unit in units:
        if (module == unit or module.startswith(unit + ".")) and len(unit) > len(best or ""):
            best = unit
    return best


def unit_graph(graph: Mapping[str, set[str]], units: Iterable[str]) -> dict[str, set[str]]:
    """The module graph seen from above: which units import which other units."""
    units = tuple(units)
    folded: dict[str, set[str]] = {}
    for source, targets in graph.items():
        source_unit = unit_of(source, units)
        if source_unit is None:
            continue
        edges = folded.setdefault(source_unit, set())
        for target in targets:
            target_unit = unit_of(target, units)
            if target_unit is not None and target_unit != source_unit:
                edges.add(target_unit)
    return folded


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member: the import circles.

    Iterative, so a deep tree does not hit the recursion limit. Each circle's members are sorted,
    and circles are sorted by their first member, so a failure message reads the same every run.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph.get(successor, ())))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component: list[str] = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return sorted(circles)
