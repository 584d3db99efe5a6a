"""A real local model, every role: how often the planner writes a valid plan, with and
without a constraint, and whether usage is counted honestly.

``python -m benchmarks.local_model --goals 3 --runs 5`` starts SmolLM2-135M-Instruct on
llama.cpp (``plancast local-model``'s launcher; the ``local`` extra), an embedded
nats-server, and the team of ``examples/local_model/team.toml``, then runs each goal
``--runs`` times in each ``--mode`` (the preset's ``structured`` setting: ``off`` sends no
constraint, ``grammar`` the per-request GBNF plan grammar); ``--goals 7`` runs all of
:data:`GOALS`, the last three added to measure ``math``'s expression grammar. It reports
per mode:

- planner outputs that were valid plans, and first plans valid on the first attempt;
- runs finished; replans asked for, and replan rounds whose plan was valid;
- math steps whose result was the expected number;
- tokens plancast reported (and how many of those calls it estimated: llama.cpp sends
  no usage in streams), and a check of the estimate against the server's own count: the
  planner's prompt sent unstreamed (the server counts its prompt tokens) and the plans'
  lines counted by the server's tokenizer (``/extras/tokenize``).

Writes ``local_model.json`` and ``local_model.md`` in ``--out`` (``benchmarks/results``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import math
import operator
import os
import platform
import secrets
import sys
import time
import tomllib
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import msgspec

from protocols import (
    PlanFinished,
    PlanRejected,
    PlanStarted,
    ReplanStarted,
    RunEvent,
    RunFailed,
    RunFinished,
    RunRequest,
    StepFailed,
    StepFinished,
    StepPlanned,
    Usage,
)
from runtime.bus import open_embedded_server
from runtime.client import follow, submit
from runtime.config import Settings, TeamConfig, team_from_dict
from runtime.models import LlamaServer, estimate_messages, estimate_text
from runtime.tools import builtin_tools
from runtime.worker import open_deployment

ROOT = Path(__file__).resolve().parents[1]
TEAM_FILE = ROOT / "examples" / "local_model" / "team.toml"
RUN_TIMEOUT = 300.0
MAX_STEPS = 4
"""Steps one plan may have: a 135M model does not stop writing steps by itself."""


@dataclass(frozen=True)
class Goal:
    text: str
    expect: str
    """A number some math step's result must be (a check of the tool results)."""


GOALS = [
    Goal("Compute (17 + 25) * 3 with the math tool.", "126"),
    Goal("Compute 12 * 12 + 5 with the math tool, then write one sentence with the result.",
         "149"),
    Goal("Compute 7 / 0 with the math tool.", ""),  # the step fails: a replan follows
    Goal("Compute 2 ** 10 with the math tool and 1000 / 8 with the math tool.", "1024"),
    # Three arithmetic goals more (issue 33): a power, a division, a function.
    Goal("Compute 3 ** 4 - 1 with the math tool.", "80"),
    Goal("Compute (100 - 36) / 8 with the math tool.", "8"),
    Goal("Compute the square root of 144 with the math tool.", "12"),
]


_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.Pow: operator.pow, ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv}


def arithmetic(expression: str) -> float | None:
    """The value of a plain arithmetic expression (numbers, + - * / ** % //, parentheses),
    computed here, independently of the math tool; None for anything else."""
    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return float(_OPS[type(node.op)](value(node.left), value(node.right)))
        raise ValueError(ast.dump(node))

    try:
        return value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None


@dataclass
class RunFigures:
    mode: str
    goal: int
    finished: bool
    seconds: float
    planner_calls: int
    valid_plans: int
    first_attempt_valid: bool
    replans: int
    replans_valid: int
    expected_found: bool | None
    math_steps: int
    """Math steps that ran to a result or a refusal (those with ``$N`` aside, and results
    of expressions beyond :func:`arithmetic`, e.g. ``sqrt``)."""
    math_agree: int
    """Of those, the ones an independent evaluation agrees with: the same number, or a
    refusal of what is no plain arithmetic."""
    usage: dict[str, Any]
    reason: str = ""
    rejections: list[str] = field(default_factory=list)
    plan_lines: list[str] = field(default_factory=list)


def local_team(base_url: str, structured: str) -> TeamConfig:
    """The example team, on ``base_url``, with ``structured`` on every preset."""
    data = tomllib.loads(TEAM_FILE.read_text())
    for preset in data["models"].values():
        preset["base_url"] = base_url
        preset["structured"] = structured
        if structured == "off":
            preset.pop("structured")  # also where the setting does not exist (yet)
    return team_from_dict(data, source=str(TEAM_FILE))


def figures(mode: str, goal_index: int, events: list[RunEvent], seconds: float) -> RunFigures:
    """What one run's events say."""
    starts = [e for e in events if isinstance(e, PlanStarted)]
    finished = [e for e in events if isinstance(e, PlanFinished)]
    first_rejected = next((i for i, e in enumerate(events) if isinstance(e, PlanRejected)),
                          len(events))
    first_finished = next((i for i, e in enumerate(events) if isinstance(e, PlanFinished)),
                          len(events))
    last = events[-1]
    usage = last.usage if isinstance(last, RunFinished | RunFailed) else Usage()
    goal = GOALS[goal_index]
    outputs = [e.output.strip() for e in events if isinstance(e, StepFinished)]
    expected = any(goal.expect == o or o.startswith(goal.expect + ".") for o in outputs) \
        if goal.expect else None
    math_steps, math_agree = _math_checks(events)
    return RunFigures(
        mode=mode, goal=goal_index, finished=isinstance(last, RunFinished), seconds=seconds,
        planner_calls=len(starts), valid_plans=len(finished),
        first_attempt_valid=first_finished < first_rejected,
        replans=sum(isinstance(e, ReplanStarted) for e in events),
        replans_valid=sum(e.round > 0 for e in finished), expected_found=expected,
        math_steps=math_steps, math_agree=math_agree,
        usage=msgspec.to_builtins(usage),
        reason=last.reason if isinstance(last, RunFailed) else "",
        rejections=[e.error for e in events if isinstance(e, PlanRejected)],
        plan_lines=[msgspec.json.encode(e.step).decode() for e in events
                    if isinstance(e, StepPlanned)])


def _math_checks(events: list[RunEvent]) -> tuple[int, int]:
    """Math steps with a plain arithmetic expression, and how many of their results (or
    refusals) agree with :func:`arithmetic`."""
    outputs = {e.step_id: e.output for e in events if isinstance(e, StepFinished)}
    refused = {e.step_id for e in events if isinstance(e, StepFailed)}
    checked = agree = 0
    for e in events:
        if not isinstance(e, StepPlanned) or e.step.tool != "math":
            continue
        text = str(e.step.args.get("expression", ""))
        if "$" in text:  # depends on another step's output
            continue
        expected = arithmetic(text)
        if e.step.id in outputs and expected is not None:
            checked += 1
            with contextlib.suppress(ValueError):
                agree += math.isclose(float(outputs[e.step.id]), expected, rel_tol=1e-9)
        elif e.step.id in refused:  # right to refuse only what is no arithmetic here
            checked += 1
            agree += expected is None
    return checked, agree


async def run_goals(nats_url: str, base_url: str, modes: list[str], goals: int, runs: int,
                    log: Any) -> list[RunFigures]:
    results: list[RunFigures] = []
    for mode in modes:
        team = local_team(base_url, mode)
        tools = builtin_tools(files_root=team.files_root, sandbox=team.sandbox, plugins=False)
        settings = Settings(nats_url=nats_url, prefix=f"lm{secrets.token_hex(4)}")
        async with open_deployment(settings, team, tools) as bus:
            for goal_index in range(goals):
                for n in range(runs):
                    started = time.monotonic()
                    accepted = await submit(bus, RunRequest(
                        goal=GOALS[goal_index].text, max_replans=1, max_steps=MAX_STEPS))
                    with anyio.fail_after(RUN_TIMEOUT):
                        events = [e async for e in follow(bus, accepted.run_id)]
                    run = figures(mode, goal_index, events, time.monotonic() - started)
                    results.append(run)
                    log(f"{mode} goal {goal_index + 1} run {n + 1}: "
                        f"{'finished' if run.finished else 'failed'} in {run.seconds:.1f}s, "
                        f"{run.valid_plans}/{run.planner_calls} plans valid, "
                        f"{run.usage['calls']} calls {run.reason[:120]}")
    return results


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.load(response)


def usage_check(server: LlamaServer, results: list[RunFigures], goals: int) -> dict[str, Any]:
    """The token estimate against the server's own count of the same text."""
    from actors import prompts

    team = local_team(server.base_url, "off")
    planner = team.roles["planner"]
    tools = builtin_tools(plugins=False)
    prompt_est = prompt_server = 0
    for goal in GOALS[:goals]:
        messages = [{"role": "system", "content": planner.system_prompt or prompts.PLANNER},
                    {"role": "user", "content": prompts.planner_request(
                        goal.text, team.executors(), tools, first_id=1, done={},
                        done_steps={})}]
        answer = _post(f"{server.base_url}/chat/completions",
                       {"model": server.alias, "messages": messages, "max_tokens": 1})
        prompt_server += answer["usage"]["prompt_tokens"]
        prompt_est += estimate_messages(messages)
    lines = sorted({line for r in results for line in r.plan_lines})[:200]
    text_est = sum(estimate_text(line + "\n") for line in lines)
    base = server.base_url.removesuffix("/v1")
    text_server = sum(
        _post(f"{base}/extras/tokenize/count", {"input": line + "\n"})["count"]
        for line in lines)
    return {"planner_prompts": goals, "prompt_tokens_estimated": prompt_est,
            "prompt_tokens_server": prompt_server, "plan_lines": len(lines),
            "plan_tokens_estimated": text_est, "plan_tokens_server": text_server}


def summary(results: list[RunFigures], check: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for mode in dict.fromkeys(r.mode for r in results):
        mine = [r for r in results if r.mode == mode]
        checked = [r for r in mine if r.expected_found is not None]
        usage = [r.usage for r in mine]
        rows.append({
            "mode": mode, "runs": len(mine),
            "first_attempt_valid": sum(r.first_attempt_valid for r in mine),
            "planner_outputs": sum(r.planner_calls for r in mine),
            "valid_plans": sum(r.valid_plans for r in mine),
            "finished": sum(r.finished for r in mine),
            "replans": sum(r.replans for r in mine),
            "replans_valid": sum(r.replans_valid for r in mine),
            "goal_number_checked": len(checked),
            "goal_number_found": sum(bool(r.expected_found) for r in checked),
            "math_steps": sum(r.math_steps for r in mine),
            "math_agree": sum(r.math_agree for r in mine),
            "failed_at": dict(Counter(r.reason.split(";")[0][:60] for r in mine
                                      if not r.finished)),
            "calls": sum(u["calls"] for u in usage),
            "prompt_tokens": sum(u["prompt_tokens"] for u in usage),
            "completion_tokens": sum(u["completion_tokens"] for u in usage),
            "runs_with_estimates": sum(bool(u["estimated"]) for u in usage),
            "runs_with_zero_tokens": sum(u["prompt_tokens"] + u["completion_tokens"] == 0
                                         and u["calls"] > 0 for u in usage),
            "median_seconds": sorted(r.seconds for r in mine)[len(mine) // 2],
        })
    return rows


def markdown(rows: list[dict[str, Any]], check: dict[str, Any], meta: dict[str, Any]) -> str:
    out = [f"# Local model: {meta['model']} on llama.cpp, every role", "",
           f"{meta['goals']} goals x {meta['runs']} runs per mode, {meta['date']}, "
           f"{meta['cores']} cores; `python -m benchmarks.local_model "
           f"--goals {meta['goals']} --runs {meta['runs']}`.", "",
           "| structured | first plan valid at once | valid planner outputs | runs finished "
           "| replans with a valid plan | math results right for the expression written "
           "| goal's number found | model calls | tokens in / out | runs with estimated usage "
           "| median run |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        out.append(
            f"| {r['mode']} | {r['first_attempt_valid']}/{r['runs']} | "
            f"{r['valid_plans']}/{r['planner_outputs']} | {r['finished']}/{r['runs']} | "
            f"{r['replans_valid']}/{r['replans']} | {r['math_agree']}/{r['math_steps']} | "
            f"{r['goal_number_found']}/{r['goal_number_checked']} | "
            f"{r['calls']} | {r['prompt_tokens']} / {r['completion_tokens']} | "
            f"{r['runs_with_estimates']}/{r['runs']} | {r['median_seconds']:.1f}s |")
    for r in rows:
        if r["failed_at"]:
            reasons = "; ".join(f"{n} x {why}" for why, n in r["failed_at"].items())
            out.append(f"\n{r['mode']}: runs that failed: {reasons}")
    c = check
    out += ["", "Token estimate (used where the server reports no usage: llama.cpp's streams) "
            "against the server's own count of the same text:", "",
            f"- planner prompts ({c['planner_prompts']}): estimated "
            f"{c['prompt_tokens_estimated']}, server {c['prompt_tokens_server']} "
            f"({_ratio(c['prompt_tokens_estimated'], c['prompt_tokens_server'])})",
            f"- plan lines ({c['plan_lines']}): estimated {c['plan_tokens_estimated']}, "
            f"server's tokenizer {c['plan_tokens_server']} "
            f"({_ratio(c['plan_tokens_estimated'], c['plan_tokens_server'])})", ""]
    return "\n".join(out)


def _ratio(estimated: int, actual: int) -> str:
    return f"{estimated / actual:.2f}x" if actual else "n/a"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.local_model",
                                     description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--goals", type=int, default=3, choices=range(1, len(GOALS) + 1))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--modes", default="off,grammar",
                        help="structured settings to compare, comma-separated")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    with LlamaServer() as server:
        async def bench() -> list[RunFigures]:
            async with open_embedded_server() as nats:
                return await run_goals(nats.url, server.base_url, modes, args.goals,
                                       args.runs, log)

        results = anyio.run(bench)
        check = usage_check(server, results, args.goals)
    rows = summary(results, check)
    meta = {"model": "SmolLM2-135M-Instruct Q4_1", "goals": args.goals, "runs": args.runs,
            "modes": modes, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cores": os.cpu_count(), "python": platform.python_version()}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "local_model.json").write_text(json.dumps(
        {"meta": meta, "summary": rows, "usage_check": check,
         "runs": [asdict(r) for r in results]}, indent=1) + "\n")
    table = markdown(rows, check, meta)
    (args.out / "local_model.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
