"""The plancast wire contract: typed messages, subject names and JSON Schema. No I/O."""

from ._base import SCHEMA_VERSION as SCHEMA_VERSION
from ._base import Message as Message
from ._base import ObjectRef as ObjectRef
from ._base import Usage as Usage
from .codec import UNREADABLE as UNREADABLE
from .codec import decode as decode
from .codec import decoder_for as decoder_for
from .codec import encode as encode
from .events import TERMINAL_EVENTS as TERMINAL_EVENTS
from .events import CriticVerdict as CriticVerdict
from .events import Event as Event
from .events import EventBatch as EventBatch
from .events import EventMessage as EventMessage
from .events import OutcomeRefused as OutcomeRefused
from .events import PlanApproved as PlanApproved
from .events import PlanAwaitingApproval as PlanAwaitingApproval
from .events import PlanFinished as PlanFinished
from .events import PlanRejected as PlanRejected
from .events import PlanStarted as PlanStarted
from .events import ReplanStarted as ReplanStarted
from .events import RunEvent as RunEvent
from .events import RunFailed as RunFailed
from .events import RunFinished as RunFinished
from .events import RunResumed as RunResumed
from .events import RunStarted as RunStarted
from .events import StepApproved as StepApproved
from .events import StepAwaitingApproval as StepAwaitingApproval
from .events import StepDispatched as StepDispatched
from .events import StepFailed as StepFailed
from .events import StepFinished as StepFinished
from .events import StepPlanned as StepPlanned
from .events import StepReviewing as StepReviewing
from .events import StepStarted as StepStarted
from .events import UsageRecorded as UsageRecorded
from .events import WorkFailed as WorkFailed
from .lineage import ParentStep as ParentStep
from .lineage import RunId as RunId
from .lineage import child_run_id as child_run_id
from .messages import ActorError as ActorError
from .messages import Heartbeat as Heartbeat
from .messages import Offloaded as Offloaded
from .messages import ReplanRequest as ReplanRequest
from .messages import RunAccepted as RunAccepted
from .messages import RunCancel as RunCancel
from .messages import RunRejected as RunRejected
from .messages import RunRequest as RunRequest
from .messages import StepClaimed as StepClaimed
from .messages import StepOutcomes as StepOutcomes
from .messages import StepResult as StepResult
from .messages import StepStop as StepStop
from .messages import StepTask as StepTask
from .messages import SynthesisDecision as SynthesisDecision
from .messages import SynthesisTask as SynthesisTask
from .messages import WorkError as WorkError
from .messages import cancel_id as cancel_id
from .messages import new_run_id as new_run_id
from .messages import nonce as nonce
from .objects import CHUNK_BYTES as CHUNK_BYTES
from .objects import chunk_subject as chunk_subject
from .objects import chunks_of as chunks_of
from .objects import object_name as object_name
from .objects import object_space as object_space
from .objects import space_of as space_of
from .objects import state_space as state_space
from .plan import Plan as Plan
from .plan import SavedPlan as SavedPlan
from .plan import Step as Step
from .plan import StepId as StepId
from .reviews import PlanDecision as PlanDecision
from .reviews import PlanReviewTask as PlanReviewTask
from .reviews import ReviewTask as ReviewTask
from .reviews import StepDecision as StepDecision
from .reviews import Verdict as Verdict
from .schema import PUBLIC_MESSAGES as PUBLIC_MESSAGES
from .schema import json_schema as json_schema
from .state import RunOwner as RunOwner
from .state import RunRecord as RunRecord
from .state import StepRecord as StepRecord
from .state import StepRecords as StepRecords
from .state import StepStatus as StepStatus
from .state import ended_key as ended_key
from .state import run_key as run_key
from .state import step_key as step_key
from .state import step_keys as step_keys
from .stored import readable_events as readable_events
from .stored import stored_events as stored_events
from .subjects import DEFAULT_PREFIX as DEFAULT_PREFIX
from .subjects import InvalidSubjectToken as InvalidSubjectToken
from .subjects import Stream as Stream
from .subjects import Verb as Verb
from .subjects import objects_bucket as objects_bucket
from .subjects import plans_bucket as plans_bucket
from .subjects import runs_bucket as runs_bucket
from .subjects import stream_name as stream_name
from .subjects import stream_of as stream_of
from .subjects import subject as subject
from .subjects import validate_prefix as validate_prefix
from .subjects import validate_token as validate_token

__all__ = (
    "CHUNK_BYTES",
    "DEFAULT_PREFIX",
    "PUBLIC_MESSAGES",
    "SCHEMA_VERSION",
    "TERMINAL_EVENTS",
    "UNREADABLE",
    "ActorError",
    "CriticVerdict",
    "Event",
    "EventBatch",
    "EventMessage",
    "Heartbeat",
    "InvalidSubjectToken",
    "Message",
    "ObjectRef",
    "Offloaded",
    "OutcomeRefused",
    "ParentStep",
    "Plan",
    "PlanApproved",
    "PlanAwaitingApproval",
    "PlanDecision",
    "PlanFinished",
    "PlanRejected",
    "PlanReviewTask",
    "PlanStarted",
    "ReplanRequest",
    "ReplanStarted",
    "ReviewTask",
    "RunAccepted",
    "RunCancel",
    "RunEvent",
    "RunFailed",
    "RunFinished",
    "RunId",
    "RunOwner",
    "RunRecord",
    "RunRejected",
    "RunRequest",
    "RunResumed",
    "RunStarted",
    "SavedPlan",
    "Step",
    "StepApproved",
    "StepAwaitingApproval",
    "StepClaimed",
    "StepDecision",
    "StepDispatched",
    "StepFailed",
    "StepFinished",
    "StepId",
    "StepOutcomes",
    "StepPlanned",
    "StepRecord",
    "StepRecords",
    "StepResult",
    "StepReviewing",
    "StepStarted",
    "StepStatus",
    "StepStop",
    "StepTask",
    "Stream",
    "SynthesisDecision",
    "SynthesisTask",
    "Usage",
    "UsageRecorded",
    "Verb",
    "Verdict",
    "WorkError",
    "WorkFailed",
    "cancel_id",
    "child_run_id",
    "chunk_subject",
    "chunks_of",
    "decode",
    "decoder_for",
    "encode",
    "ended_key",
    "json_schema",
    "new_run_id",
    "nonce",
    "object_name",
    "object_space",
    "objects_bucket",
    "plans_bucket",
    "readable_events",
    "run_key",
    "runs_bucket",
    "space_of",
    "state_space",
    "step_key",
    "step_keys",
    "stored_events",
    "stream_name",
    "stream_of",
    "subject",
    "validate_prefix",
    "validate_token",
)
