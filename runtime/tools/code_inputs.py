"""``$N`` in program text is bound as data, never spliced into the source.

A step's output is untrusted text: spliced into a program (``data = "$1"``) it could close
the string and run what it likes. So a tool argument named ``code`` is not substituted by
the planner; the ``python`` tool turns each ``$N`` written as an expression into
``INPUTS[N]`` (step N's output, a ``str`` read from a JSON file), a string literal that
is exactly ``"$N"`` into the same, and refuses ``$N`` inside a longer literal, which
cannot be bound safely. To run a program another step wrote, say so: ``exec($1)``.
"""

from __future__ import annotations

import io
import re
import tokenize
from collections.abc import Mapping

from ..dag import REF, ref_id
from .errors import ToolArgumentsError

INPUTS_FILE = "inputs.json"
PRELUDE = ("import json as _plancast_json; INPUTS = {int(k): v for k, v in "
           f"_plancast_json.load(open({INPUTS_FILE!r}, encoding='utf-8')).items()}}; "
           "del _plancast_json\n")
"""The program's first line: ``INPUTS`` from the file the tool writes beside it."""

_MARK = "__plancast_input_{}__"
_MARKED = re.compile(r"__plancast_input_(\d+)__")


def bind_inputs(code: str, inputs: Mapping[int, str]) -> tuple[str, dict[int, str]]:
    """The program with its ``$N`` bound, and the inputs it uses; raises
    ``ToolArgumentsError`` for a reference it cannot bind."""
    used = {ref_id(m) for m in REF.finditer(code)}
    if not used:
        return code, {}
    if missing := sorted(used - inputs.keys()):
        raise ToolArgumentsError(f"the code refers to steps {missing}, whose outputs this "
                                 "step was not given (list them in depends_on)")
    marked = REF.sub(lambda m: _MARK.format(ref_id(m)), code)
    lines = marked.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (start offset, end offset, replacement)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    try:
        for tok in tokenize.generate_tokens(io.StringIO(marked).readline):
            if not _MARKED.search(tok.string) or tok.type == tokenize.COMMENT:
                continue
            start = starts[tok.start[0] - 1] + tok.start[1]
            end = starts[tok.end[0] - 1] + tok.end[1]
            edits.append((start, end, _bound(tok)))
    except (tokenize.TokenError, SyntaxError) as exc:
        raise ToolArgumentsError(f"the code does not parse: {exc}") from None
    for start, end, text in reversed(edits):
        marked = marked[:start] + text + marked[end:]
    marked = _MARKED.sub(lambda m: f"${m[1]}", marked)  # comments keep their $N
    return PRELUDE + marked, {n: inputs[n] for n in used}


def _bound(tok: tokenize.TokenInfo) -> str:
    if tok.type == tokenize.NAME:
        return f"INPUTS[{_MARKED.fullmatch(tok.string)[1]}]"  # type: ignore[index]
    literal = re.fullmatch(r"""[rRuU]?('''|\"\"\"|'|")(__plancast_input_(\d+)__)\1""",
                           tok.string)
    if tok.type == tokenize.STRING and literal:
        return f"INPUTS[{literal[3]}]"
    n = _MARKED.search(tok.string)[1]  # type: ignore[index]
    raise ToolArgumentsError(
        f"${n} is inside a longer string in the code: it cannot be put there safely. Write "
        f"it on its own, as a value (text = ${n}; it is step {n}'s output, a str), and "
        "build the string in Python")
