"""How steps refer to each other: ``$N`` references in tool arguments, and the path a new
step's dependencies would close into a cycle. Pure functions; the scheduler, the plan
grammars and the tools that bind program inputs share them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CODE_ARGS = frozenset({"code"})
"""Tool arguments that are program text: the planner leaves their ``$N`` to the tool (the
``python`` tool binds them as data, never spliced into the source)."""

REF = re.compile(r"\$(?:\{([1-9]\d*)\}|([1-9]\d*)(?!\d))")
"""``$N`` or ``${N}``; ``$1`` never matches inside ``$10``, ``${1}x`` works glued to text."""


def ref_id(match: re.Match[str]) -> int:
    """The step id a ``REF`` match names."""
    return int(match[1] or match[2])


def references(args: Any) -> list[int]:
    """The step ids named by ``$N`` / ``${N}`` in tool arguments (string values, any depth),
    in order."""
    found: list[int] = []
    _collect(args, found)
    return found


def _collect(args: Any, found: list[int]) -> None:
    if isinstance(args, str):
        if "$" in args:  # most arguments name no step: no regular expression for them
            found.extend(ref_id(match) for match in REF.finditer(args))
    elif isinstance(args, dict):
        for item in args.values():
            _collect(item, found)
    elif isinstance(args, list | tuple):
        for item in args:
            _collect(item, found)


def substitute(args: Any, results: Mapping[int, str]) -> Any:
    """``args`` with every reference replaced by that step's output."""
    if isinstance(args, str):
        return REF.sub(lambda m: results[ref_id(m)], args)
    if isinstance(args, list | tuple):
        return [substitute(item, results) for item in args]
    if isinstance(args, dict):
        return {key: substitute(item, results) for key, item in args.items()}
    return args


def cycle_through(new_id: int, deps: Iterable[int],
                  deps_of: Mapping[int, Sequence[int]]) -> list[int]:
    """A path new_id -> ... -> new_id through known steps' dependencies, or ``[]``."""
    needed_by: dict[int, int] = {}
    stack = [(dep, new_id) for dep in deps]
    while stack:
        sid, parent = stack.pop()
        if sid == new_id:
            path = [parent]
            while path[-1] != new_id:
                path.append(needed_by[path[-1]])
            return [*reversed(path), new_id]
        if sid in needed_by:
            continue
        needed_by[sid] = parent
        stack.extend((dep, sid) for dep in deps_of.get(sid, ()))
    return []
