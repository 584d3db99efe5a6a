"""The gateway's OpenAPI document (``GET /openapi.json``): every route, what it reads and
what it answers, the schemas taken from the msgspec types the routes decode and encode."""

from __future__ import annotations

from typing import Any

import msgspec

from protocols import PlanAwaitingApproval, RunAccepted, RunRequest, StepAwaitingApproval

from ..client import RunStatus
from .bodies import (
    Accepted,
    CancelBody,
    DecisionAnswer,
    Error,
    Me,
    PlanDecisionBody,
    ReplanBody,
    RunView,
    SavedPlanRun,
    SavedPlanSummary,
    StepDecisionBody,
)

_SCHEMAS = msgspec.json.schema_components(
    (RunRequest, SavedPlanRun, RunAccepted, RunStatus, RunView, PlanAwaitingApproval,
     PlanDecisionBody, StepAwaitingApproval, StepDecisionBody, DecisionAnswer, CancelBody,
     ReplanBody, Accepted, SavedPlanSummary, Me, Error),
    ref_template="#/components/schemas/{name}")[1]


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": schema}}}


RUN_ID = {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}
STEP_ID = {"name": "step_id", "in": "path", "required": True,
           "schema": {"type": "integer", "minimum": 1}}
NO_RUN = _error("no such run")
BAD_BODY = _error("the body is not what the route reads (the reason says which field)")
DECIDED = {
    "200": _json(_ref("DecisionAnswer"), "the run took the decision"),
    "403": _error("the body's `by` names another user than the token's"),
    "404": NO_RUN,
    "409": _error("nothing awaits this decision now, or the run ended before taking it"),
    "422": _error("not a decision, or the run refused it: `error` is the planner's reason "
                  "(an edited plan that is invalid, a stale decision)"),
    "504": _error("the decision is stored but the run has not answered it within 10 s; "
                  "its events tell whether it counted"),
}
ASKED = {
    "202": _json(_ref("Accepted"), "stored for the run's planner; its events tell the rest"),
    "404": NO_RUN,
    "409": _error("the run has ended (or, for a replan, has no replans left)"),
    "422": BAD_BODY,
}

OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "plancast gateway", "version": "2",
             "description": "Submit runs, follow their events, and act on them over HTTP: "
                            "decide on plans and steps held for approval, cancel, replan. "
                            "Each decision is recorded in the run's events as made by the "
                            "user whose token sent it (`<user> (gateway)`)."},
    "paths": {
        "/me": {"get": {
            "summary": "Who the token says you are",
            "responses": {"200": _json(_ref("Me"), "your user name")}}},
        "/runs": {
            "post": {"summary": "Submit a run: a goal (a run.request's fields), or a saved "
                                "plan filled with params",
                     "requestBody": _body({"oneOf": [_ref("RunRequest"),
                                                     _ref("SavedPlanRun")]}),
                     "responses": {
                         "202": _json(_ref("RunAccepted"), "accepted"),
                         "422": _error("not a valid run.request; a saved plan unknown, or "
                                       "a param missing or unknown; or the planner refused "
                                       "it (run.rejected: the reason)"),
                         "503": _error("no planner accepted it")}},
            "get": {"summary": "The most recent runs (a sub-team's run names its parent)",
                    "parameters": [{"name": "limit", "in": "query",
                                    "schema": {"type": "integer", "minimum": 1}}],
                    "responses": {"200": _json({"type": "array", "items": _ref("RunStatus")},
                                               "runs, newest first")}},
        },
        "/plans": {"get": {
            "summary": "The plans stored in the deployment (`plancast plan save --name`)",
            "responses": {
                "200": _json({"type": "array", "items": _ref("SavedPlanSummary")},
                             "plans, by name"),
                "503": _error("the deployment has no plans bucket (run `plancast "
                              "provision`)")}}},
        "/runs/{run_id}": {"get": {
            "summary": "A run's status and outcome, its parent step and its child runs",
            "parameters": [RUN_ID],
            "responses": {"200": _json(_ref("RunView"), "the run"), "404": NO_RUN}}},
        "/runs/{run_id}/events": {"get": {
            "summary": "A run's events as Server-Sent Events (id: the event's seq)",
            "parameters": [
                RUN_ID,
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"},
                 "description": "Resume after this event."}],
            "responses": {"200": {"description": "text/event-stream; data: the event's JSON "
                                                 "as on the wire (see `plancast schema`)"},
                          "404": NO_RUN}}},
        "/runs/{run_id}/plan": {
            "get": {"summary": "The plan the run holds for approval",
                    "parameters": [RUN_ID],
                    "responses": {
                        "200": _json(_ref("PlanAwaitingApproval"), "the plan"),
                        "404": _error("no plan awaits approval")}},
            "post": {"summary": "Approve (maybe edited) or reject the awaiting plan, then "
                                "wait for the run's answer",
                     "parameters": [RUN_ID],
                     "requestBody": _body(_ref("PlanDecisionBody")),
                     "responses": DECIDED},
        },
        "/runs/{run_id}/steps/awaiting": {"get": {
            "summary": "The step attempts held at their approval gates",
            "parameters": [RUN_ID],
            "responses": {
                "200": _json({"type": "array", "items": _ref("StepAwaitingApproval")},
                             "held steps, by step id"),
                "404": NO_RUN}}},
        "/runs/{run_id}/steps/{step_id}/decision": {"post": {
            "summary": "Approve or reject a step held at its gate, then wait for the run's "
                       "answer",
            "parameters": [RUN_ID, STEP_ID],
            "requestBody": _body(_ref("StepDecisionBody")),
            "responses": DECIDED}},
        "/runs/{run_id}/steps/{step_id}/output": {"get": {
            "summary": "A finished step's whole output (its event carries the first 4000 "
                       "characters)",
            "parameters": [RUN_ID, STEP_ID],
            "responses": {
                "200": {"description": "the output",
                        "content": {"text/plain": {"schema": {"type": "string"}}}},
                "404": _error("no such run, or the step has no output (yet)"),
                "502": _error("the output kept in the object store cannot be fetched"),
                "504": _error("the object store did not answer in time")}}},
        "/runs/{run_id}/cancel": {"post": {
            "summary": "Cancel a run (recorded as the user's); it ends with "
                       "event.run.failed, cause cancelled",
            "parameters": [RUN_ID],
            "requestBody": _body(_ref("CancelBody")),
            "responses": ASKED}},
        "/runs/{run_id}/replan": {"post": {
            "summary": "Ask for a new plan round now (recorded as the user's, in "
                       "event.replan); the steps still running are dropped",
            "parameters": [RUN_ID],
            "requestBody": _body(_ref("ReplanBody")),
            "responses": ASKED}},
    },
    "components": {"schemas": _SCHEMAS, "securitySchemes": {"token": {
        "type": "http", "scheme": "bearer",
        "description": "The token `plancast serve` prints (kept in gateway.token in its data "
                       "directory, or PLANCAST_GATEWAY_TOKEN), or a user's own from its "
                       "users file (--users). A request with another Origin than the "
                       "gateway's is refused 403, a POST whose body is not "
                       "application/json 415; any request without a token 401."}}},
    "security": [{"token": []}],
}
"""Served as it is; ``GET /``, ``/dashboard/*`` and this document need no token."""
