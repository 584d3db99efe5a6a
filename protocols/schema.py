"""The JSON Schema of every public message, as printed by ``plancast schema``."""

from __future__ import annotations

from typing import Any

import msgspec

from ._base import SCHEMA_VERSION
from .events import EventBatch, RunEvent
from .messages import (
    ActorError,
    Heartbeat,
    Offloaded,
    ReplanRequest,
    RunAccepted,
    RunCancel,
    RunRejected,
    RunRequest,
    StepClaimed,
    StepOutcomes,
    StepResult,
    StepStop,
    StepTask,
    SynthesisDecision,
    SynthesisTask,
    WorkError,
)
from .plan import Plan, Step
from .reviews import PlanDecision, PlanReviewTask, ReviewTask, StepDecision, Verdict
from .state import RunOwner, RunRecord, StepRecord, StepRecords

PUBLIC_MESSAGES: tuple[Any, ...] = (
    RunRequest,
    RunAccepted,
    RunRejected,
    StepTask,
    StepClaimed,
    StepResult,
    StepOutcomes,
    StepStop,
    ReviewTask,
    Verdict,
    PlanReviewTask,
    PlanDecision,
    StepDecision,
    SynthesisTask,
    SynthesisDecision,
    ReplanRequest,
    RunCancel,
    WorkError,
    Heartbeat,
    ActorError,
    Offloaded,
    RunRecord,
    StepRecord,
    StepRecords,
    RunOwner,
    *RunEvent.__args__,
    EventBatch,
)
"""Every message type that crosses the bus."""


def json_schema() -> dict[str, Any]:
    """One JSON Schema document: ``$defs`` for every type, ``oneOf`` over the messages."""
    refs, defs = msgspec.json.schema_components((*PUBLIC_MESSAGES, Plan, Step))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "plancast wire messages",
        "description": f"plancast wire contract, schema_version {SCHEMA_VERSION}",
        "oneOf": list(refs[: len(PUBLIC_MESSAGES)]),
        "$defs": defs,
    }
