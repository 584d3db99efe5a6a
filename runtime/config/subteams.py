"""Hierarchical teams: which roles a run's plans may use, and the rules a ``team`` role keeps.

A ``team`` role's steps are done by a sub-team: a child run with the role's ``members`` as
its only executors and its ``planner_prompt`` as its planner's brief. A member may be a
team in turn, so decomposition recurses; ``max_team_depth`` bounds how deep. The planner
of any run reads the roles it may use from here: the request's (a child run's members),
else its planner role's ``members``, else every executor of the team.
"""

from __future__ import annotations

from protocols import RunRequest

from .team import MODEL_KINDS, SERVICE_KINDS, TEAM_KIND, RoleConfig, TeamConfig

TEAM_ONLY = ("planner_prompt", "max_replans", "max_steps", "synthesizer")
"""RoleConfig fields that mean something for a ``team`` role only."""
MEMBERS_KINDS = {TEAM_KIND, "planner"}
"""Kinds whose ``members`` mean something."""


def team_problems(team: TeamConfig) -> list[str]:
    """Every mistake in the team's sub-team settings, one line each (none: it is sound)."""
    problems: list[str] = []
    for name, role in team.roles.items():
        where = f"roles.{name}"
        for field in sorted(role.model_fields_set & set(TEAM_ONLY)):
            if role.kind != TEAM_KIND:
                problems.append(f"{where}.{field}: only a role of kind = \"team\" takes it "
                                f"(this one is {role.kind!r}); remove it")
        if role.members and role.kind not in MEMBERS_KINDS:
            problems.append(f"{where}.members: only a \"team\" or \"planner\" role takes "
                            f"members (this one is {role.kind!r}); remove it")
        if role.kind == TEAM_KIND:
            problems += _team_role_problems(team, name, role)
        elif role.kind == "planner":
            problems += _member_problems(team, name, role.members)
    return problems


def _team_role_problems(team: TeamConfig, name: str, role: RoleConfig) -> list[str]:
    where = f"roles.{name}"
    problems: list[str] = []
    if not role.members:
        problems.append(f"{where}: a team role needs members: add `members = [\"<role>\", "
                        "...]`, the executor roles its sub-team plans with")
    if name in role.members:
        problems.append(f"{where}.members: a team cannot be its own member; make another "
                        "team role its member to nest sub-teams")
    joiner = team.roles.get(role.synthesizer) if role.synthesizer else None
    if role.synthesizer and (joiner is None or joiner.kind != "synthesizer"):
        problems.append(f"{where}.synthesizer: {role.synthesizer!r} is not a synthesizer "
                        "role of the team; name a role of kind = \"synthesizer\"")
    if role.tools or role.tool_steps_only:
        problems.append(f"{where}.tools: a team role runs no tools itself; give the tools "
                        "to its members")
    return problems + _member_problems(team, name, role.members)


def _member_problems(team: TeamConfig, name: str, members: list[str]) -> list[str]:
    problems: list[str] = []
    for member in members:
        other = team.roles.get(member)
        if other is None:
            problems.append(f"roles.{name}.members: no role {member!r} in the team; "
                            f"roles: {', '.join(sorted(team.roles))}")
        elif other.kind in MODEL_KINDS | SERVICE_KINDS:
            problems.append(f"roles.{name}.members: {member!r} is a {other.kind}, not a role "
                            "a plan can give steps to; list executor or team roles")
    return problems


def plan_roles(team: TeamConfig, request: RunRequest, planner: RoleConfig) -> list[RoleConfig]:
    """The roles this run's plans may give steps to."""
    names = request.roles if request.roles is not None else planner.members
    executors = team.executors()
    if not names:
        return executors
    wanted = set(names)
    return [r for r in executors if r.name in wanted]


def request_problem(team: TeamConfig, request: RunRequest) -> str:
    """Why this planner's team cannot take the request on ("" if it can)."""
    if request.roles is not None:
        plannable = {r.name for r in team.executors()}
        unknown = [r for r in request.roles if r not in plannable]
        if unknown:
            return (f"the run may use roles {', '.join(unknown)}, which this planner's team "
                    f"has no executor role of; its roles: {', '.join(sorted(plannable))}")
        if not request.roles:
            return "the run may use no role at all: give it at least one in `roles`"
    if request.synthesizer and request.synthesizer not in team.kind_roles("synthesizer"):
        return (f"the run names synthesizer {request.synthesizer!r}, which this planner's "
                f"team has no synthesizer role of; its synthesizers: "
                f"{', '.join(team.kind_roles('synthesizer')) or 'none'}")
    if request.parent is not None and request.parent.depth > team.max_team_depth:
        return (f"the run would be a sub-team at depth {request.parent.depth}, past "
                f"max_team_depth = {team.max_team_depth}")
    return ""


def is_team(team: TeamConfig, role: str) -> bool:
    """Whether steps of ``role`` are delegated to a sub-team."""
    config = team.roles.get(role)
    return config is not None and config.kind == TEAM_KIND
