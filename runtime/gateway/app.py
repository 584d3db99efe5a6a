"""``plancast serve``: an HTTP gateway to a deployment, for clients without NATS.

It is one more NATS client (it runs anywhere): ``POST /runs`` submits, ``GET /runs`` and
``GET /runs/{id}`` read the run state, ``GET /`` is a live dashboard, and
``GET /runs/{id}/events`` streams a run's events
as Server-Sent Events, each ``data:`` the event's JSON exactly as on the wire and each
``id:`` its sequence number, so a client that reconnects with ``Last-Event-ID`` resumes
without gaps or repeats. A client acts on a run as the CLI does: decides on a plan or a
step held for approval, cancels, asks for a replan; each is recorded as made by the user
whose token sent it (``access``), and a decision's answer is the run's own (taken, or
refused with the planner's reason). Needs the ``serve`` extra (starlette, uvicorn,
sse-starlette). Every request but ``GET /``, the page's files and ``GET /openapi.json``
needs a token (``runtime.gateway.access``); ``openapi`` documents every route.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
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
    OutcomeRefused,
    PlanApproved,
    PlanRejected,
    RunAccepted,
    RunFailed,
    RunFinished,
    RunRequest,
    StepApproved,
    StepFailed,
    decode,
    encode,
)

from ..bus import TRANSIENT, Bus, ObjectRefused
from ..client import (
    Answer,
    NothingAwaitsApproval,
    PlanFileError,
    RunNotAccepted,
    RunRefused,
    awaiting_steps,
    cancel,
    child_runs,
    collect_runs,
    decide_plan,
    decide_step,
    decision_answer,
    events_so_far,
    fill,
    follow,
    last_event,
    parameters,
    plan_awaiting,
    read_run,
    request_replan,
    step_output,
    stored_plan,
    stored_plans,
    submit,
)
from .access import USER_KEY, Access, Guard
from .bodies import (
    Accepted,
    CancelBody,
    DecisionAnswer,
    Me,
    PlanDecisionBody,
    ReplanBody,
    RunView,
    SavedPlanRun,
    SavedPlanSummary,
    StepDecisionBody,
)
from .errors import GatewayListenError
from .openapi import OPENAPI

PING = 15.0
"""Seconds between keep-alive comments on an idle event stream."""
DECISION_WAIT = 10.0
"""Seconds a decision's request waits for the run to answer it (the planner takes one in
milliseconds); then 504, the decision stored all the same."""
STARTING = 10.0
"""Seconds the gateway may take to start listening."""
STOPPING = 3
"""Seconds a stopping gateway gives open requests (a page's event stream) to end."""
DEFAULT_MAX_STEPS = 64
"""``max_steps`` of a run submitted with a saved plan (or the plan's length, if longer)."""


def gateway(bus: Bus, access: Access) -> Starlette:
    """The ASGI application, serving the deployment ``bus`` is connected to to those that
    ``access`` lets in."""
    app = Starlette(middleware=[Middleware(Guard, access=access)], routes=[
        Route("/me", me, methods=["GET"]),
        Route("/runs", submit_run, methods=["POST"]),
        Route("/runs", list_runs, methods=["GET"]),
        Route("/plans", list_plans, methods=["GET"]),
        Route("/runs/{run_id}", get_run, methods=["GET"]),
        Route("/runs/{run_id}/events", run_events, methods=["GET"]),
        Route("/runs/{run_id}/plan", plan_awaiting_approval, methods=["GET"]),
        Route("/runs/{run_id}/plan", decide_on_plan, methods=["POST"]),
        Route("/runs/{run_id}/steps/awaiting", steps_awaiting_approval, methods=["GET"]),
        Route("/runs/{run_id}/steps/{step_id:int}/decision", decide_on_step,
              methods=["POST"]),
        Route("/runs/{run_id}/steps/{step_id:int}/output", output_of_step, methods=["GET"]),
        Route("/runs/{run_id}/cancel", cancel_run, methods=["POST"]),
        Route("/runs/{run_id}/replan", replan_run, methods=["POST"]),
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/", dashboard, methods=["GET"]),
        Route("/dashboard/{name:path}", dashboard_file, methods=["GET"]),
    ])
    app.state.bus = bus
    return app


def _bus(request: Request) -> Bus:
    bus: Bus = request.app.state.bus
    return bus


def _user(request: Request) -> str:
    """The user whose token the request carries (``Guard`` let it in)."""
    return str(request.scope[USER_KEY])


def _by(user: str) -> str:
    """How the run's events name a user deciding through the gateway."""
    return f"{user} (gateway)"


def _json(value: Any, status: int = 200) -> Response:
    return Response(msgspec.json.encode(value), status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status)


async def me(request: Request) -> Response:
    """Who the request's token says the caller is."""
    return _json(Me(user=_user(request)))


async def submit_run(request: Request) -> Response:
    """A ``run.request`` in the body (``goal`` at least), or a saved plan to run
    (``saved_plan``, ``params``); 202 with ``run.accepted``."""
    raw = await request.body()
    try:
        fields = msgspec.json.decode(raw)
        if isinstance(fields, dict) and fields.keys() & {"saved_plan", "params"}:
            if "saved_plan" not in fields:
                return _error(422, "params fill a saved plan: name it in saved_plan "
                                   "(GET /plans lists them)")
            run_request = await _saved_plan_request(_bus(request),
                                                    decode(raw, SavedPlanRun))
        else:
            run_request = decode(raw, RunRequest)
    except UNREADABLE as exc:
        return _error(422, f"not a run.request: {exc}")
    except PlanFileError as exc:
        return _error(422, str(exc))
    try:
        accepted: RunAccepted = await submit(_bus(request), run_request)
    except RunRefused as exc:
        return _error(422, f"the planner refused the run: {exc}")
    except RunNotAccepted as exc:
        return _error(503, str(exc))
    return _json(accepted, 202)


async def _saved_plan_request(bus: Bus, body: SavedPlanRun) -> RunRequest:
    """The run a saved plan makes, filled with the body's params; PlanFileError says
    which plan or parameter is wrong."""
    saved = await stored_plan(bus, body.saved_plan)
    needed, given = parameters(saved), set(body.params)
    if missing := sorted(needed - given):
        raise PlanFileError(f"saved plan {body.saved_plan!r} needs a value for "
                            f"{', '.join(missing)} in params")
    if unknown := sorted(given - needed):
        raise PlanFileError(f"saved plan {body.saved_plan!r} has no parameter "
                            f"{', '.join(unknown)}; its parameters: "
                            f"{', '.join(sorted(needed)) or 'none'}")
    filled = fill(saved, body.params)
    goal = body.goal or filled.goal
    if not goal:
        raise PlanFileError(f"saved plan {body.saved_plan!r} has no goal: give one in goal")
    return RunRequest(goal=goal, run_id=body.run_id, plan=filled.steps,
                      max_replans=body.max_replans, timeout=body.timeout,
                      review_plan=body.review_plan,
                      max_steps=max(DEFAULT_MAX_STEPS, len(filled.steps)))


async def list_plans(request: Request) -> Response:
    """The plans stored in the deployment (``plancast plan save --name``)."""
    try:
        found = await stored_plans(_bus(request))
    except PlanFileError as exc:
        return _error(503, str(exc))
    return _json([SavedPlanSummary(name=name, goal=plan.goal,
                                   params=sorted(parameters(plan)), steps=len(plan.steps))
                  for name, plan in found.items()])


async def list_runs(request: Request) -> Response:
    """The most recent runs (``?limit=``, 20 by default)."""
    try:
        limit = int(request.query_params.get("limit", "20"))
    except ValueError:
        return _error(422, "limit must be a whole number")
    return _json(await collect_runs(_bus(request), active_only=False, limit=max(limit, 1)))


async def get_run(request: Request) -> Response:
    """The run's stored state: status, and its answer (or failure) once it ended; its
    parent step and its children (hierarchical teams)."""
    bus, run_id = _bus(request), request.path_params["run_id"]
    record = await read_run(bus, run_id)
    if record is None:
        return _error(404, f"no run {run_id}")
    return _json(RunView(run_id=record.run_id, goal=record.request.goal,
                         status=record.status, outcome=record.outcome, owner=record.owner,
                         usage=record.usage, started_at=record.started_at,
                         parent=record.request.parent,
                         children=await child_runs(bus, run_id)))


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


async def plan_awaiting_approval(request: Request) -> Response:
    """The plan the run holds for approval (``event.plan.awaiting_approval``); 404 if none."""
    try:
        return _json(await plan_awaiting(_bus(request), request.path_params["run_id"]))
    except NothingAwaitsApproval as exc:
        return _error(404, str(exc))


async def _decision(request: Request, body_type: type[PlanDecisionBody | StepDecisionBody],
                    ) -> tuple[PlanDecisionBody | StepDecisionBody, str] | Response:
    """The decision in the body and who makes it, or why it is refused: not a decision
    (422), in someone else's name (403), on a run the deployment does not know (404)."""
    what = "{approved, steps?, reason?}" if body_type is PlanDecisionBody \
        else "{approved, reason?}"
    try:
        body = decode(await request.body(), body_type)
    except UNREADABLE as exc:
        return _error(422, f"not a decision ({what}): {exc}")
    user = _user(request)
    if body.by and body.by not in (user, _by(user)):
        return _error(403, f"you are {user}: a decision is recorded as made by the user "
                           "whose token sent it, never in another's name; leave `by` out")
    if await read_run(_bus(request), request.path_params["run_id"]) is None:
        return _error(404, f"no run {request.path_params['run_id']}")
    return body, _by(user)


async def decide_on_plan(request: Request) -> Response:
    """Approve, edit or reject the awaiting plan, as the request's user; then wait (at most
    DECISION_WAIT) for the run's answer: 200 taken, 422 refused (an invalid edit: the
    planner's reason), 504 no answer yet."""
    checked = await _decision(request, PlanDecisionBody)
    if isinstance(checked, Response):
        return checked
    body, by = checked
    assert isinstance(body, PlanDecisionBody)
    bus, run_id = _bus(request), request.path_params["run_id"]
    before = await last_event(bus, run_id)
    try:
        plan = await decide_plan(bus, run_id, approved=body.approved, steps=body.steps,
                                 reason=body.reason, by=by)
    except NothingAwaitsApproval as exc:
        return _error(409, str(exc))
    answer = await decision_answer(bus, run_id, after=before.seq if before else 0,
                                   step_id=None, by=by, wait=DECISION_WAIT)
    match answer:
        case PlanApproved():
            return _json(DecisionAnswer(outcome="approved", by=by, round=plan.round,
                                        digest=plan.digest, edited=answer.edited,
                                        changes=answer.changes))
        case PlanRejected():
            return _json(DecisionAnswer(outcome="rejected", by=by, round=plan.round,
                                        digest=plan.digest, reason=body.reason))
        case RunFailed() if not body.approved:
            return _json(DecisionAnswer(outcome="rejected", by=by, round=plan.round,
                                        digest=plan.digest, run="failed",
                                        reason=answer.reason))
    return _unanswered(run_id, answer)


def _unanswered(run_id: str, answer: Answer | None) -> Response:
    """A decision the run refused (422, its reason), did not take before it ended (409),
    or has not answered yet (504)."""
    if isinstance(answer, OutcomeRefused):
        return _error(422, answer.reason)
    if isinstance(answer, RunFinished | RunFailed):
        how = "finished" if isinstance(answer, RunFinished) else \
            f"failed ({answer.reason})"
        return _error(409, f"run {run_id} {how} before it took the decision")
    return _error(504, f"the decision is stored, but run {run_id} has not answered it "
                       f"within {DECISION_WAIT:g}s: its events will tell whether it counted "
                       f"(GET /runs/{run_id}/events)")


async def steps_awaiting_approval(request: Request) -> Response:
    """The step attempts the run holds at their approval gates, by step id."""
    bus, run_id = _bus(request), request.path_params["run_id"]
    if await read_run(bus, run_id) is None:
        return _error(404, f"no run {run_id}")
    waiting = awaiting_steps(await events_so_far(bus, run_id))
    return _json([waiting[sid] for sid in sorted(waiting)])


async def decide_on_step(request: Request) -> Response:
    """Approve or reject a step held at its gate, as the request's user; answered like a
    plan decision (200, 422, 504)."""
    checked = await _decision(request, StepDecisionBody)
    if isinstance(checked, Response):
        return checked
    body, by = checked
    bus, run_id = _bus(request), request.path_params["run_id"]
    step_id: int = request.path_params["step_id"]
    before = await last_event(bus, run_id)
    try:
        gate = await decide_step(bus, run_id, step_id, approved=body.approved,
                                 reason=body.reason, by=by)
    except NothingAwaitsApproval as exc:
        return _error(409, str(exc))
    answer = await decision_answer(bus, run_id, after=before.seq if before else 0,
                                   step_id=step_id, by=by, wait=DECISION_WAIT)
    match answer:
        case StepApproved():
            return _json(DecisionAnswer(outcome="approved", by=by, step_id=step_id,
                                        attempt=gate.attempt))
        case StepFailed():
            return _json(DecisionAnswer(outcome="rejected", by=by, step_id=step_id,
                                        attempt=gate.attempt, reason=answer.error))
    return _unanswered(run_id, answer)


async def output_of_step(request: Request) -> Response:
    """The whole output of a finished step, as text (an event shows its first part)."""
    bus, run_id = _bus(request), request.path_params["run_id"]
    step_id: int = request.path_params["step_id"]
    if await read_run(bus, run_id) is None:
        return _error(404, f"no run {run_id}")
    try:
        output = await step_output(bus, run_id, step_id)
    except ObjectRefused as exc:
        return _error(502, f"the output of step {step_id} cannot be fetched: {exc}")
    except TRANSIENT as exc:  # a server that does not let this user read it answers nothing
        return _error(504, f"the output of step {step_id} did not come from the object "
                           f"store ({type(exc).__name__}): try again; if it never comes, "
                           "the gateway's NATS user may not read state.* objects (run "
                           "`plancast auth init` again)")
    if output is None:
        return _error(404, f"step {step_id} of run {run_id} has no output (yet)")
    return Response(output, media_type="text/plain; charset=utf-8", headers={
        "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache",
        "Content-Security-Policy": "default-src 'none'; sandbox"})


async def _active_run(request: Request) -> tuple[Any, str] | Response:
    """The run the request names and who asks, or why it cannot be asked to change: no
    such run (404), it has ended (409)."""
    bus, run_id = _bus(request), request.path_params["run_id"]
    record = await read_run(bus, run_id)
    if record is None:
        return _error(404, f"no run {run_id}")
    if record.status != "active":
        return _error(409, f"run {run_id} has {record.status} already")
    return record, _by(_user(request))


async def cancel_run(request: Request) -> Response:
    """Ask the run's planner to stop it, as the request's user; 202 once stored (the run
    ends with ``event.run.failed``, cause ``cancelled``, naming the user)."""
    try:
        body = decode(await request.body() or b"{}", CancelBody)
    except UNREADABLE as exc:
        return _error(422, f"not a cancel request ({{reason?}}): {exc}")
    checked = await _active_run(request)
    if isinstance(checked, Response):
        return checked
    record, by = checked
    await cancel(_bus(request), record.run_id, body.reason, source=by)
    return _json(Accepted(run_id=record.run_id, by=by), 202)


async def replan_run(request: Request) -> Response:
    """Ask the run's planner for a new plan round now, as the request's user; 202 once
    stored (``event.replan`` follows, naming the user)."""
    try:
        body = decode(await request.body(), ReplanBody)
    except UNREADABLE as exc:
        return _error(422, f"not a replan request ({{reason}}): {exc}")
    checked = await _active_run(request)
    if isinstance(checked, Response):
        return checked
    record, by = checked
    if record.round >= record.request.max_replans:
        return _error(409, f"run {record.run_id} has no replans left (max_replans = "
                           f"{record.request.max_replans}, round {record.round}): a replan "
                           "would fail it; cancel it instead")
    await request_replan(_bus(request), record.run_id, body.reason, source=by)
    return _json(Accepted(run_id=record.run_id, by=by), 202)


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


async def serve_http(bus: Bus, access: Access, *, host: str, port: int,
                     verbose: bool = False) -> None:
    """Serve the gateway on ``host:port`` until cancelled or SIGINT/SIGTERM (uvicorn, no
    lifespan events)."""
    config = uvicorn.Config(gateway(bus, access), host=host, port=port, lifespan="off",
                            log_level="debug" if verbose else "warning")
    await uvicorn.Server(config).serve()


class _Quiet(uvicorn.Server):
    """A uvicorn server that leaves signals to its caller (it would take SIGINT and
    SIGTERM for itself, then raise them again once it stopped)."""

    @contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@asynccontextmanager
async def serving(bus: Bus, access: Access, *, host: str, port: int,
                  verbose: bool = False) -> AsyncIterator[int]:
    """Serve the gateway on ``host:port`` (0: a free port) while the block runs; yields
    the port, once it listens. Signals are the caller's (``plancast demo --serve``)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host.strip("[]"), port))
    except OSError as exc:
        listener.close()
        raise GatewayListenError(f"cannot listen on {host}:{port}: {exc.strerror}; pass "
                                 "another --port") from None
    server = _Quiet(uvicorn.Config(gateway(bus, access), lifespan="off",
                                   timeout_graceful_shutdown=STOPPING,
                                   log_level="debug" if verbose else "warning"))
    with listener:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [listener])
            with anyio.fail_after(STARTING):
                while not server.started:  # noqa: ASYNC110 - uvicorn sets a flag
                    await anyio.sleep(0.02)
            try:
                yield listener.getsockname()[1]
            finally:
                server.should_exit = True
