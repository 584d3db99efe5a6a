"""The client's side of a deployment: submit a run, follow its events (and its sub-team
runs), cancel it, review its plan and gates, read what the deployment is doing, keep and
fill reusable plans. No terminal output here: the CLI and the gateway render it."""

from .errors import NothingAwaitsApproval as NothingAwaitsApproval
from .errors import PlanFileError as PlanFileError
from .errors import RunNotAccepted as RunNotAccepted
from .errors import RunRefused as RunRefused
from .errors import RunStalled as RunStalled
from .outputs import step_output as step_output
from .outputs import step_record as step_record
from .plans import check_plan as check_plan
from .plans import check_tool_allowed as check_tool_allowed
from .plans import dump as dump
from .plans import fill as fill
from .plans import load as load
from .plans import parameters as parameters
from .plans import parse_params as parse_params
from .plans import plan_of_run as plan_of_run
from .plans import store_plan as store_plan
from .plans import stored_plan as stored_plan
from .plans import stored_plans as stored_plans
from .review import Answer as Answer
from .review import awaiting_plan as awaiting_plan
from .review import awaiting_steps as awaiting_steps
from .review import decide_plan as decide_plan
from .review import decide_step as decide_step
from .review import decision_answer as decision_answer
from .review import plan_awaiting as plan_awaiting
from .runs import cancel as cancel
from .runs import events_so_far as events_so_far
from .runs import follow as follow
from .runs import last_event as last_event
from .runs import request_replan as request_replan
from .runs import submit as submit
from .status import HEARTBEAT_WINDOWS as HEARTBEAT_WINDOWS
from .status import ChildRun as ChildRun
from .status import DeploymentStatus as DeploymentStatus
from .status import RunStatus as RunStatus
from .status import child_runs as child_runs
from .status import collect_runs as collect_runs
from .status import collect_status as collect_status
from .status import read_run as read_run
from .status import run_status as run_status
from .tree import follow_tree as follow_tree

__all__ = (
    "HEARTBEAT_WINDOWS",
    "Answer",
    "ChildRun",
    "DeploymentStatus",
    "NothingAwaitsApproval",
    "PlanFileError",
    "RunNotAccepted",
    "RunRefused",
    "RunStalled",
    "RunStatus",
    "awaiting_plan",
    "awaiting_steps",
    "cancel",
    "check_plan",
    "check_tool_allowed",
    "child_runs",
    "collect_runs",
    "collect_status",
    "decide_plan",
    "decide_step",
    "decision_answer",
    "dump",
    "events_so_far",
    "fill",
    "follow",
    "follow_tree",
    "last_event",
    "load",
    "parameters",
    "parse_params",
    "plan_awaiting",
    "plan_of_run",
    "read_run",
    "request_replan",
    "run_status",
    "step_output",
    "step_record",
    "store_plan",
    "stored_plan",
    "stored_plans",
    "submit",
)
