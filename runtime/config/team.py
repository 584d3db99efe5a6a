"""Team configuration: which roles exist, their prompts, models, tools and concurrency.

Written in TOML (``plancast.toml``, ``--team`` or ``PLANCAST_ROLES_FILE``) or built in
code. Models are named presets or inline tables; nothing is implied, so a role that
needs a model and has none is a startup error that names the setting to add::

    [models.strong]
    model = "gpt-4.1"

    [roles.planner]
    kind = "planner"
    model = "strong"

    [roles.researcher]
    description = "looks facts up"
    model = { model = "gpt-4.1-mini" }
    tools = ["http_get", "math"]
    concurrency = 4
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .errors import TeamConfigError
from .mcp import MCP_SEPARATOR, McpServerConfig
from .model import ModelSettings

MODEL_KINDS = {"planner", "critic", "synthesizer"}
"""Kinds that always talk to a model."""
SERVICE_KINDS = {"supervisor"}
"""Kinds that are neither executors nor model users."""
TEAM_KIND = "team"
"""A role whose steps a sub-team does: each starts a child run (``actors.team_lead``)."""

DEFAULT_MAX_TOKENS = {"planner": 2048, "executor": 2048, "critic": 512, "synthesizer": 1024}
"""Completion tokens a role's model call may take when its model preset sets no
``max_tokens``: a model that rambles (a small one does) stops instead of writing thousands
of tokens. Kinds not listed (plugins) get the executor's."""


def default_max_tokens(kind: str) -> int:
    """The ``max_tokens`` of a role of this kind whose model preset sets none."""
    return DEFAULT_MAX_TOKENS.get(kind, DEFAULT_MAX_TOKENS["executor"])


_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,29}")


class Timeouts(BaseModel):
    """How long the planner waits for each thing before it gives up on it (seconds).

    The defaults fit real LLM latencies: an agent step with a few tool rounds takes
    minutes, a worker process starts in seconds. Passing one fails the attempt (which is
    retried or replanned like any failure) or the run, with an event that says which.
    """

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    step: float = Field(default=600.0, gt=0)
    """Start-to-close: one attempt, from its executor's claim to its result."""
    heartbeat: float = Field(default=20.0, gt=0)
    """The claiming executor's heartbeats stop listing the step for this long (it died, hung
    or acknowledged the task and forgot it)."""
    claim: float = Field(default=10.0, gt=0)
    """A task delivered to an executor and not claimed (``step.claimed``) for this long:
    the attempt fails with cause ``not_claimed`` (the executor took it and dropped it, or
    acknowledged it without a claim) and is retried."""
    unserved: float = Field(default=30.0, gt=0)
    """A step (or review, or synthesis) waits this long while no live process serves its role."""
    review: float = Field(default=600.0, gt=0)
    """From sending an output to the critic to its verdict."""
    synthesis: float = Field(default=300.0, gt=0)
    """From asking the synthesizer to its decision."""
    plan: float = Field(default=300.0, gt=0)
    """One streamed plan, from the request to its last line."""
    approval: float = Field(default=3600.0, gt=0)
    """A plan awaiting approval (``review_plan``), or a step at its approval gate, from the
    moment it is announced to the decision; with ``auto`` plan review the critic has
    ``review`` seconds instead."""
    run: float = Field(default=0.0, ge=0)
    """The whole run, unless its request sets ``timeout``; 0 means no overall deadline."""
    storage: float = Field(default=30.0, gt=0)
    """The results stream has no room for an outcome (it is at ``PLANCAST_MAX_STREAM_BYTES``):
    after this long, the runs waiting on it fail with cause ``storage``."""


class ToolConfig(BaseModel):
    """What the team says of one tool, whichever role uses it (``[tools.NAME]``)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    effects: Literal["default", "once", "none"] = "default"
    """``once``: a call acts on the world and must not be repeated, even by another
    attempt (as a role's ``effects``, for every step that may call this tool). ``none``: a
    call only computes its output (no effect on the world, so running it again harms
    nothing): its tool steps' finished attempts are not recorded (two stored messages and
    a round trip fewer per step), and a task delivered again may run it again."""


class RoleConfig(BaseModel):
    """One role: a kind of actor (an entry point in ``plancast.roles``) and its settings."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    """The role's name, used in plans (``step.role``) and subjects."""
    kind: str = "executor"
    """The entry point that builds it: ``planner``, ``executor``, ``critic``, ``synthesizer``..."""
    description: str = ""
    """What the role is good at; the planner reads it when assigning steps."""
    system_prompt: str = ""
    """The role's system prompt; empty uses the kind's built-in prompt."""
    model: ModelSettings | None = None
    """The model it talks to; required unless the role only runs tool steps."""
    tools: list[str] = Field(default_factory=list)
    """Tools the role may use (tool steps and agent steps alike)."""
    concurrency: int = Field(default=1, ge=1, le=1024)
    """Tasks one instance works on at once."""
    max_tool_rounds: int = Field(default=6, ge=1, le=50)
    """Model/tool round trips one agent step may take."""
    step_timeout: float | None = Field(default=None, gt=0)
    """Start-to-close timeout of this role's steps; None uses ``[timeouts] step``."""
    approval: bool = False
    """Each step of this role waits for a person's approval before it runs (high-risk
    work: ``plancast plan approve RUN --step N``), each attempt anew."""
    tool_steps_only: bool = False
    """An executor that only runs tool steps, so it needs no model."""
    max_object_bytes: int | None = Field(default=None, ge=1024)
    """Largest payload this role may send through the object store (an offloaded message
    or output); the planner refuses a reference to more without fetching it. None: the
    deployment's ``PLANCAST_MAX_OBJECT_BYTES`` (64 MiB), which also caps it."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Kind-specific options (see each role's docs)."""
    members: list[str] = Field(default_factory=list)
    """For a ``team`` role: the roles its child runs' plans may use (executors, or teams in
    turn). For a ``planner``: the roles top-level plans may use (empty: every executor)."""
    planner_prompt: str = Field(default="", max_length=20_000)
    """For a ``team`` role: its sub-team's brief, added to the planner's system prompt when
    it plans a child run."""
    max_replans: int = Field(default=1, ge=0, le=10)
    """For a ``team`` role: replan rounds each child run may take inside its own budget."""
    max_steps: int = Field(default=64, ge=1, le=1000)
    """For a ``team`` role: most steps one plan of a child run may have."""
    synthesizer: str = ""
    """For a ``team`` role: the synthesizer role that joins its child runs (its own model
    and prompt); empty: any synthesizer of the deployment."""

    effects: Literal["default", "once"] = "default"
    """``once``: this role's steps act on the world and must not act twice, even across
    attempts: an attempt that timed out or whose executor went silent is not run again
    blindly (its tool is asked by key, else the step fails with cause
    ``outcome_unknown``). ``default``: at least once, as every step."""

    def needs_model(self) -> bool:
        if self.kind in SERVICE_KINDS or self.kind == TEAM_KIND:
            return False
        return self.kind in MODEL_KINDS or not self.tool_steps_only


class TeamConfig(BaseModel):
    """Every role of a deployment and the run policies the planner applies."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    roles: dict[str, RoleConfig]
    """Roles by name."""
    step_attempts: int = Field(default=2, ge=1, le=10)
    """Tries of a failing step before it fails into a replan."""
    review_attempts: int = Field(default=2, ge=1, le=10)
    """Critic rejections of a step before it fails into a replan."""
    plan_attempts: int = Field(default=2, ge=1, le=10)
    """Times the planner asks its model again after an invalid plan."""
    files_root: Path | None = None
    """Directory the ``read_file`` tool may read; None disables it."""
    http_allow: list[str] = Field(default_factory=list)
    """Hosts, addresses and networks (``10.0.0.0/8``) that ``http_get`` may fetch although
    they are loopback, private or link-local (refused by default)."""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    """Where the ``python`` tool runs model-written code: inside bubblewrap (it refuses to
    run where bubblewrap is missing), or ``none``, unsandboxed, by explicit choice only."""
    max_active_runs: int = Field(default=100, ge=1)
    """Runs one planner process takes on from submissions at once; a submit beyond it is
    answered ``run.rejected`` (runs it adopts from a dead planner are always taken on)."""
    review_plan: Literal["off", "human", "auto"] = "off"
    """Hold every plan round for approval before any of it runs: by a person (``plancast
    plan approve``/``reject``) or by the critic (``auto``), who checks it against
    ``plan_policy``. A run's request may set its own."""
    plan_policy: str = ""
    """What an ``auto`` reviewer checks each plan against, in plain words."""
    approve_tools: list[str] = Field(default_factory=list)
    """Steps that call, or may call, these tools wait for a person's approval before each
    attempt runs (``rm``, ``deploy``, ``http_post`` ...), whatever their role."""
    max_team_depth: int = Field(default=2, ge=0, le=10)
    """How deep sub-teams may nest: a step of a ``team`` role in a run at this depth (0 is
    a top-level run) fails instead of starting a child run."""
    timeouts: Timeouts = Field(default_factory=Timeouts)
    """How long the planner waits for steps, reviews, syntheses, plans and whole runs."""
    tools: dict[str, ToolConfig] = Field(default_factory=dict)
    """Settings of tools by name (``[tools.NAME]``), for every role that uses them."""
    mcp: dict[str, McpServerConfig] = Field(default_factory=dict)
    """MCP servers by name (``[mcp.NAME]``): a role uses one's tool by listing
    ``NAME__TOOL`` in its ``tools`` (docs/mcp.md)."""

    @model_validator(mode="after")
    def _check(self) -> TeamConfig:
        for server in self.mcp:
            if not _SERVER_NAME.fullmatch(server) or MCP_SEPARATOR in server:
                raise ValueError(
                    f"MCP server name {server!r} must be letters, digits, - and single _ "
                    f"(at most 30; its tools are called {server}{MCP_SEPARATOR}TOOL): rename "
                    f"[mcp.{server}]")
        used = self.tool_names()
        for tool in self.tools:
            if tool not in used:
                raise ValueError(
                    f"[tools.{tool}] names a tool no executor role lists in its tools: add it "
                    f"to a role's tools, or remove the table")
        for name, role in self.roles.items():
            if role.needs_model() and role.model is None:
                raise ValueError(
                    f"role {name!r} has no model: add `model = \"<preset>\"` or "
                    f"`model = {{ model = \"<name>\" }}` under [roles.{name}] "
                    "(or `tool_steps_only = true` for an executor that only runs tools)"
                )
        return self

    def executors(self) -> list[RoleConfig]:
        """The roles a plan may assign steps to."""
        return [r for r in self.roles.values() if r.kind not in MODEL_KINDS | SERVICE_KINDS]

    def senders(self, kind: str) -> list[str]:
        """The roles whose outcomes of this kind count: the team's roles of the kind, or a
        role named like the kind when the team declares none (served from elsewhere)."""
        return self.kind_roles(kind) or [kind]

    def kind_roles(self, kind: str) -> list[str]:
        """Names of the roles of one kind (``critic``, ``synthesizer`` ...)."""
        return [r.name for r in self.roles.values() if r.kind == kind]

    def step_timeout(self, role: str, step_timeout: float | None) -> float:
        """A step's start-to-close timeout: the step's own, else its role's, else the team's."""
        if step_timeout is not None:
            return step_timeout
        config = self.roles.get(role)
        if config is not None and config.step_timeout is not None:
            return config.step_timeout
        return self.timeouts.step

    def dedicated_synthesizers(self) -> set[str]:
        """Synthesizer roles a ``team`` role names: they join that team's runs only."""
        return {r.synthesizer for r in self.roles.values()
                if r.kind == TEAM_KIND and r.synthesizer}

    def tool_names(self) -> set[str]:
        """Every tool some executor role may use (they may live only on the workers)."""
        return {t for r in self.executors() for t in r.tools}

    def effects_once(self, role: str, tools: Iterable[str]) -> bool:
        """Whether a step of ``role`` that may call ``tools`` must not act twice: the role,
        or one of those tools, says ``effects = "once"``."""
        config = self.roles.get(role)
        if config is not None and config.effects == "once":
            return True
        return any(self.tools[t].effects == "once" for t in tools if t in self.tools)

    def effects_none(self, role: str, tool: str) -> bool:
        """Whether a tool step of ``role`` calling ``tool`` has no effect on the world: the
        tool says ``effects = "none"`` and the role does not say ``once``."""
        config = self.roles.get(role)
        if config is not None and config.effects == "once":
            return False
        return tool in self.tools and self.tools[tool].effects == "none"

    def role(self, name: str) -> RoleConfig:
        try:
            return self.roles[name]
        except KeyError:
            raise TeamConfigError(
                f"no role {name!r} in the team; configured roles: {', '.join(sorted(self.roles))}"
            ) from None
