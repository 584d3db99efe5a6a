"""The constraint a plan request carries: only plans the scheduler would accept can be written.

Built anew for every request from what the planner knows at that moment
(:class:`PlanShape`): the first id of this attempt, the ids later steps may name (done
steps, and steps of this round already accepted), each executor role with its tools, and
each tool's argument schema. :func:`plan_grammar` writes it as GBNF, one JSON object per
line and one set of rules per line: line ``k`` has id ``first + k``, may depend (in
``depends_on`` or as ``$N`` in its args) only on those ids and on lines before it, names
a role and a tool that role has, with arguments of the tool's schema, or gives the role's
model a non-blank instruction with a subset of the role's tools. So ids are consecutive,
no step depends on itself, a later step or a dropped one, and no cycle can be written.
:mod:`runtime.models.grammar.plan_schema` says as much as JSON Schema can. The scheduler
stays the final judge either way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from protocols import StepId

from .gbnf import Expr, Grammar, Lit, Ref, Rep, alt, opt, seq
from .gbnf_json import JsonRules

if TYPE_CHECKING:
    from ...config import RoleConfig, TeamConfig
    from ...tools import ToolRegistry

__all__ = ["MAX_CONSTRAINED_STEPS", "TEXT_CHARS", "PlanShape", "RoleTools", "plan_grammar",
           "plan_shape"]

MAX_CONSTRAINED_STEPS = 64
"""Most new steps one constrained plan attempt may write (the grammar has rules per line)."""
TEXT_CHARS = 2000
"""Default longest instruction or tool-argument string of a constrained plan."""
_MAX_ID = 100_000
"""The largest step id (``protocols.plan.StepId``)."""
assert _MAX_ID == StepId.__metadata__[0].le  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RoleTools:
    """An executor role as a plan may use it."""

    name: str
    tools: tuple[str, ...]
    """Tools its tool steps may call (and its agent steps may be given)."""
    agent: bool
    """Whether it takes agent steps (an instruction for its model)."""


@dataclass(frozen=True)
class PlanShape:
    """What a plan written now may contain."""

    first_id: int
    """The id of the first new step; the next ones follow one by one."""
    prior: tuple[int, ...]
    """Ids new steps may depend on besides each other: done steps and this round's."""
    roles: tuple[RoleTools, ...]
    """Executor roles with at least one kind of step they can take."""
    schemas: Mapping[str, dict[str, Any] | None] = field(default_factory=dict)
    """Each tool's argument schema; None (or missing) for a tool known by name only."""
    max_steps: int = MAX_CONSTRAINED_STEPS
    """Most new steps."""
    min_steps: int = 1
    """Fewest new steps (0 when steps of this round were accepted already)."""
    text_chars: int = TEXT_CHARS
    """Longest instruction, and longest string in a tool's arguments (a small model loops
    inside a string until its max_tokens; a bound makes it go on)."""
    title_chars: int = 80
    """Longest ``title`` (a short label)."""
    criteria_chars: int = 500
    """Longest ``success_criteria``."""

    def __post_init__(self) -> None:
        if not 1 <= self.first_id <= _MAX_ID:
            raise ValueError(f"first_id must be 1..{_MAX_ID}, not {self.first_id}")
        if min(self.text_chars, self.title_chars, self.criteria_chars) < 1:
            raise ValueError("string bounds must be at least 1 character")
        if not 0 <= self.min_steps <= self.max_steps:
            raise ValueError(f"need 0 <= min_steps <= max_steps, not {self.min_steps}, "
                             f"{self.max_steps}")

    @property
    def count(self) -> int:
        """How many lines the constraint has rules for."""
        return min(self.max_steps, MAX_CONSTRAINED_STEPS, _MAX_ID - self.first_id + 1)

    def tool_names(self) -> list[str]:
        """Every tool some role may call, sorted."""
        return sorted({t for role in self.roles for t in role.tools})

    def ids(self) -> range:
        """The ids the new steps get, in order."""
        return range(self.first_id, self.first_id + self.count)


def plan_shape(team: TeamConfig, tools: ToolRegistry, *, first_id: int,
               prior: Collection[int], max_steps: int, min_steps: int = 1,
               text_chars: int = TEXT_CHARS,
               allowed: Collection[RoleConfig] | None = None) -> PlanShape | None:
    """The shape of a plan for ``team`` using the ``allowed`` roles (every executor role by
    default); None when no role can take a step. A sub-team takes instructions."""
    roles = []
    for role in team.executors() if allowed is None else allowed:
        # A sub-team (kind "team") has no model of its own but takes instructions.
        agent = role.kind == "team" or (not role.tool_steps_only and role.model is not None)
        if role.tools or agent:
            roles.append(RoleTools(role.name, tuple(dict.fromkeys(role.tools)), agent))
    if not roles or max_steps < max(min_steps, 1):
        return None
    schemas = {t: tools.get(t).parameters if t in tools else None
               for r in roles for t in r.tools}
    return PlanShape(first_id=first_id, prior=tuple(sorted(set(prior))), roles=tuple(roles),
                     schemas=schemas, max_steps=max_steps, min_steps=min(min_steps, 1),
                     text_chars=text_chars, title_chars=min(80, text_chars),
                     criteria_chars=min(500, text_chars))


def plan_grammar(shape: PlanShape) -> str:
    """The GBNF of every plan of ``shape``: its lines, each ending in a newline."""
    g = Grammar()
    json = JsonRules(g)
    ids: Ref | None = g.rule("ids-0", alt(*map(str, shape.prior))) if shape.prior else None
    lines = []
    for k, step_id in enumerate(shape.ids()):
        if k:
            ids = g.rule(f"ids-{k}", alt(ids, str(step_id - 1)) if ids else Lit(str(step_id - 1)))
        lines.append(g.rule(f"line-{k}", _line(g, json, shape, k, step_id, ids)))
    tail: Expr | None = None
    for k in reversed(range(len(lines))):
        more = seq(lines[k], "\n", opt(tail) if tail is not None else Lit(""))
        tail = g.rule(f"plan-{k}", more)
    assert tail is not None
    g.rule("root", tail if shape.min_steps else opt(tail))
    return g.render()


def _line(g: Grammar, json: JsonRules, shape: PlanShape, k: int, step_id: int,
          ids: Ref | None) -> Expr:
    sp = json.sp
    allowed = [*shape.prior, *range(shape.first_id, step_id)]
    string = json.ref_string(str(k), ids, allowed, shape.text_chars)
    meta: list[Expr] = [opt(seq('"title":', sp, json.short_string(shape.title_chars), ",", sp))]
    if ids is not None:
        deps = seq("[", opt(_ascending(g, json, shape, k)), "]")
        meta.append(opt(seq('"depends_on":', sp, deps, ",", sp)))
    head = g.rule(f"meta-{k}", seq(*meta))
    choices = [seq(f'"{role.name}"', ",", sp, head, _body(g, json, shape, k, r, role, string))
               for r, role in enumerate(shape.roles)]
    return seq('{"id":', sp, str(step_id), ",", sp, '"role":', sp, alt(*choices), "}")


def _ascending(g: Grammar, json: JsonRules, shape: PlanShape, k: int) -> Expr:
    """Line ``k``'s ``depends_on`` items: distinct, ascending, each an id it may name (so a
    list always ends: a small model cannot repeat ids forever). Earlier rounds' ids share
    their rules; this round's ids (below line ``k``'s own) get rules per line."""
    new = list(range(shape.first_id, shape.first_id + k))
    prior = _chain(g, json, "p", list(shape.prior)) if shape.prior else None
    fresh = _chain(g, json, f"n{k}", new) if new else None
    if prior is not None and fresh is not None:
        return alt(seq(prior, opt(seq(",", json.sp, fresh))), fresh)
    result = prior or fresh
    assert result is not None, "a line with nothing to depend on has no depends_on"
    return result


def _chain(g: Grammar, json: JsonRules, tag: str, ids: list[int]) -> Ref:
    """``<tag>-start``: a non-empty ascending selection of ``ids`` (sorted), comma-separated.

    ``<tag>-take-i`` writes ids[i] and may go on; ``<tag>-from-i`` starts at ids[i] or later."""
    name = f"{tag}-start"
    if name in g.rules:
        return Ref(name)
    last = len(ids) - 1
    for i in reversed(range(len(ids))):
        later = Ref(f"{tag}-from-{i + 1}")
        g.rule(f"{tag}-take-{i}", seq(str(ids[i]), opt(seq(",", json.sp, later)))
               if i < last else Lit(str(ids[i])))
        take = Ref(f"{tag}-take-{i}")
        g.rule(f"{tag}-from-{i}", alt(take, later) if i < last else take)
    return g.rule(name, Ref(f"{tag}-from-0"))


def _body(g: Grammar, json: JsonRules, shape: PlanShape, k: int, r: int, role: RoleTools,
          string: Ref) -> Expr:
    sp = json.sp
    kinds: list[Expr] = []
    for tool in role.tools:
        name = f"args-t{shape.tool_names().index(tool)}-{k}"
        args = Ref(name) if name in g.rules else g.rule(name, _args(json, shape, tool, k, string))
        kinds.append(seq('"tool":', sp, f'"{tool}"', ",", sp, '"args":', sp, args))
    if role.agent:
        extras: list[Expr] = []
        if role.tools:
            one = g.rule(f"tool-r{r}", alt(*(f'"{t}"' for t in role.tools)))
            listed = seq("[", opt(seq(one, Rep(seq(",", sp, one)))), "]")
            extras.append(opt(seq(",", sp, '"tools":', sp, listed)))
        extras.append(opt(seq(",", sp, '"review":', sp, json.bool)))
        criteria = json.short_string(shape.criteria_chars)
        extras.append(opt(seq(",", sp, '"success_criteria":', sp, criteria)))
        kinds.append(seq('"instruction":', sp, json.text(shape.text_chars), *extras))
    return alt(*kinds)


def _args(json: JsonRules, shape: PlanShape, tool: str, k: int, string: Ref) -> Expr:
    """The tool's arguments: its schema's objects, or any object for a tool we only name."""
    schema = shape.schemas.get(tool)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        schema = {"type": "object"}
    value = json.value(schema, str(k), string)
    if isinstance(value, Ref) and value.name.startswith("val-"):
        return Ref(f"obj-{k}")  # "any value" of an object schema: still an object
    return value
