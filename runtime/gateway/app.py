"""``plancast serve``: an HTTP gateway to a deployment, for clients without NATS.

It is one more NATS client (it runs anywhere): ``POST /runs`` submits, ``GET /runs`` and
``GET /runs/{id}`` read the run state, ``GET /`` is a live dashboard, and
``GET /runs/{id}/events`` streams a run's events
as Server-Sent Events, each ``data:`` the event's JSON exactly as on the wire and each
``id:`` its sequence number, so a client that reconnects with ``Last-Event-ID`` resumes
without gaps or repeats. Needs the ``serve`` extra (starlette, uvicorn, sse-starlette).
Every request but ``GET /`` and ``GET /openapi.json`` needs the gateway's token
(``runtime.gateway.access``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import uvicorn
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from protocols import (
    UNREADABLE,
    PlanAwaitingApproval,
    RunAccepted,
    RunRequest,
    Step,
    decode,
    encode,
)

from ..bus import Bus
from ..client import (
    NothingAwaitsApproval,
    RunNotAccepted,
    RunRefused,
    collect_runs,
    decide_plan,
    follow,
    plan_awaiting,
    read_run,
    submit,
)
from .access import Access, Guard

PING = 15.0
"""Seconds between keep-alive comments on an idle event stream."""


def gateway(bus: Bus, access: Access) -> Starlette:
    """The ASGI application, serving the deployment ``bus`` is connected to to those that
    ``access`` lets in."""
    app = Starlette(middleware=[Middleware(Guard, access=access)], routes=[
        Route("/runs", submit_run, methods=["POST"]),
        Route("/runs", list_runs, methods=["GET"]),
        Route("/runs/{run_id}", get_run, methods=["GET"]),
        Route("/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/runs/{run_id}/plan", plan_awaiting_approval, methods=["GET"]),
        Route("/runs/{run_id}/plan", decide_on_plan, methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/", dashboard, methods=["GET"]),
        Route("/dashboard/{name:path}", dashboard_file, methods=["GET"]),
    ])
    app.state.bus = bus
    return app


def _bus(request: Request) -> Bus:
    bus: Bus = request.app.state.bus
    return bus


def _json(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status)


async def submit_run(request: Request) -> Response:
    """A ``run.request`` in the body (``goal`` at least); 202 with ``run.accepted``."""
    try:
        run_request = decode(await request.body(), RunRequest)
    except UNREADABLE as exc:
        return _error(422, f"not a run.request: {exc}")
    try:
        accepted: RunAccepted = await submit(_bus(request), run_request)
    except RunRefused as exc:
        return _error(422, f"the planner refused the run: {exc}")
    except RunNotAccepted as exc:
        return _error(503, str(exc))
    return _json(accepted, 202)


async def list_runs(request: Request) -> Response:
    """The most recent runs (``?limit=``, 20 by default)."""
    try:
        limit = int(request.query_params.get("limit", "20"))
    except ValueError:
        return _error(422, "limit must be a whole number")
    return _json(await collect_runs(_bus(request), active_only=False, limit=max(limit, 1)))


async def get_run(request: Request) -> Response:
    """The run's stored state: status, and its answer (or failure) once it ended."""
    record = await read_run(_bus(request), request.path_params["run_id"])
    if record is None:
        return _error(404, f"no run {request.path_params['run_id']}")
    return _json({"run_id": record.run_id, "goal": record.request.goal,
                  "status": record.status, "outcome": record.outcome, "owner": record.owner,
                  "usage": record.usage, "started_at": record.started_at})


async def run_events(request: Request) -> Response:
    """The run's events as Server-Sent Events, from the first (or after ``Last-Event-ID``)
    to the last; the stream ends after ``event.run.finished`` or ``event.run.failed``."""
    bus, run_id = _bus(request), request.path_params["run_id"]
    if await read_run(bus, run_id) is None:
        return _error(404, f"no run {run_id}")
    try:
        after = int(request.headers.get("last-event-id", "0") or 0)
    except ValueError:
        return _error(422, "Last-Event-ID must be an event's sequence number")

    async def events() -> AsyncIterator[dict[str, Any]]:
        async for event in follow(bus, run_id):
            if event.seq > after:
                yield {"id": str(event.seq), "event": "message",
                       "data": encode(event).decode()}

    return EventSourceResponse(events(), ping=PING)


class PlanDecisionBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``POST /runs/{id}/plan``: the decision on the plan the run holds for approval."""

    approved: bool
    """True runs it (``steps`` if given); False sends it back to the planner's model."""
    steps: list[Step] | None = None
    """An edited plan, checked like the model's."""
    reason: str = ""
    """Why it is rejected."""
    by: str = ""
    """Who decides, for the run's record."""


async def plan_awaiting_approval(request: Request) -> Response:
    """The plan the run holds for approval (``event.plan.awaiting_approval``); 404 if none."""
    try:
        return _json(await plan_awaiting(_bus(request), request.path_params["run_id"]))
    except NothingAwaitsApproval as exc:
        return _error(404, str(exc))


async def decide_on_plan(request: Request) -> Response:
    """Approve, edit or reject the awaiting plan; 202 once the decision is stored (the run's
    events say whether it counted: ``event.plan.approved`` or ``event.outcome.refused``)."""
    try:
        body = msgspec.json.decode(await request.body(), type=PlanDecisionBody)
    except UNREADABLE as exc:
        return _error(422, f"not a plan decision ({{approved, steps?, reason?, by?}}): {exc}")
    try:
        plan = await decide_plan(_bus(request), request.path_params["run_id"],
                                 approved=body.approved, steps=body.steps, reason=body.reason,
                                 by=body.by or "gateway")
    except NothingAwaitsApproval as exc:
        return _error(404, str(exc))
    return _json({"round": plan.round, "digest": plan.digest}, 202)


DASHBOARD = Path(__file__).with_name("dashboard") / "index.html"
"""One page, plain JavaScript: the run list, and for one run its DAG and timeline, live."""


async def dashboard(request: Request) -> Response:
    return HTMLResponse(DASHBOARD.read_text(encoding="utf-8"))


DASHBOARD_FILES = {"js": "text/javascript", "css": "text/css"}
"""What the page loads besides itself, by suffix: its modules and styles, from the package."""


async def dashboard_file(request: Request) -> Response:
    """One of the page's own files (``dashboard/app.js``, ``dashboard/vendor/...``): only
    files under the dashboard's directory with a known suffix, nothing else on disk."""
    name = request.path_params["name"]
    root = DASHBOARD.parent.resolve()
    path = (root / name).resolve()
    media = DASHBOARD_FILES.get(path.suffix.lstrip("."))
    if media is None or not path.is_relative_to(root) or not path.is_file():
        return _error(404, f"the dashboard has no file {name!r}")
    return Response(path.read_bytes(), media_type=media,
                    headers={"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"})


async def openapi(request: Request) -> Response:
    return JSONResponse(OPENAPI)


_SCHEMAS = msgspec.json.schema_components(
    (RunRequest, RunAccepted, PlanAwaitingApproval, PlanDecisionBody),
    ref_template="#/components/schemas/{name}")[1]
OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "plancast gateway", "version": "1",
             "description": "Submit runs and follow their events over HTTP."},
    "paths": {
        "/runs": {
            "post": {"summary": "Submit a run",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/RunRequest"}}}},
                     "responses": {
                         "202": {"description": "accepted", "content": {"application/json": {
                             "schema": {"$ref": "#/components/schemas/RunAccepted"}}}},
                         "422": {"description": "not a valid run.request, or the planner "
                                                "refused it (run.rejected: the reason)"},
                         "503": {"description": "no planner accepted it"}}},
            "get": {"summary": "The most recent runs",
                    "parameters": [{"name": "limit", "in": "query",
                                    "schema": {"type": "integer", "minimum": 1}}],
                    "responses": {"200": {"description": "runs, newest first"}}},
        },
        "/runs/{run_id}": {"get": {
            "summary": "A run's status and outcome",
            "parameters": [{"name": "run_id", "in": "path", "required": True,
                            "schema": {"type": "string"}}],
            "responses": {"200": {"description": "the run"},
                          "404": {"description": "no such run"}}}},
        "/runs/{run_id}/events": {"get": {
            "summary": "A run's events as Server-Sent Events (id: the event's seq)",
            "parameters": [
                {"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}},
                {"name": "Last-Event-ID", "in": "header", "schema": {"type": "integer"},
                 "description": "Resume after this event."}],
            "responses": {"200": {"description": "text/event-stream; data: the event's JSON "
                                                 "as on the wire (see `plancast schema`)"},
                          "404": {"description": "no such run"}}}},
        "/runs/{run_id}/plan": {
            "get": {"summary": "The plan the run holds for approval",
                    "parameters": [{"name": "run_id", "in": "path", "required": True,
                                    "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "the plan", "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/PlanAwaitingApproval"}}}},
                        "404": {"description": "no plan awaits approval"}}},
            "post": {"summary": "Approve (maybe edited) or reject the awaiting plan",
                     "parameters": [{"name": "run_id", "in": "path", "required": True,
                                     "schema": {"type": "string"}}],
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/PlanDecisionBody"}}}},
                     "responses": {"202": {"description": "stored; the run's events tell "
                                                         "whether it counted"},
                                   "404": {"description": "no plan awaits approval"},
                                   "422": {"description": "not a plan decision"}}},
        },
    },
    "components": {"schemas": _SCHEMAS, "securitySchemes": {"token": {
        "type": "http", "scheme": "bearer",
        "description": "The token `plancast serve` prints (kept in gateway.token in its data "
                       "directory, or PLANCAST_GATEWAY_TOKEN). A request with another "
                       "Origin than the gateway's is refused 403, a POST whose body is not "
                       "application/json 415."}}},
    "security": [{"token": []}],
}


async def serve_http(bus: Bus, access: Access, *, host: str, port: int,
                     verbose: bool = False) -> None:
    """Serve the gateway on ``host:port`` until cancelled (uvicorn, no lifespan events)."""
    config = uvicorn.Config(gateway(bus, access), host=host, port=port, lifespan="off",
                            log_level="debug" if verbose else "warning")
    await uvicorn.Server(config).serve()
