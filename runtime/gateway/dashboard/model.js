// One run as the page knows it, built from its events alone (no DOM here): what the views
// draw and what actions.js reads. Each event counts once (by its seq), so a reconnect that
// is sent an event again changes nothing.
//
// The run model (`state` in the "plancast:run" event):
//   runId, goal, parent: {run_id, step_id, attempt, depth, role} for a sub-team's run, or null
//   start / end: Unix times of event.run.started and of the run's end (end null while it goes)
//   ended: true once event.run.finished or event.run.failed arrived
//   outcome: null, {kind: "finished", answer} or {kind: "failed", stage, reason, cause}
//   steps: Map step id -> Step, in plan order:
//     {id, role, round, step (the planned Step, as JSON), title, deps, state: "pending",
//      "awaiting" (at its approval gate), "running", "reviewing", "retrying", "done",
//      "failed" or "cancelled"; attempts: [Attempt], reviews: [Review], gates: [Gate],
//      usage: {calls, prompt_tokens, completion_tokens, cost_usd}, childRuns: [run id],
//      output (the last finished attempt's, maybe cut: see `truncated`), events: [event]}
//   Attempt: {n, from, to (null while open), state: "running", "reviewed" (its output went
//     to the critic), "done", "retried", "rejected", "timeout", "failed" or "cancelled";
//     cause (event.step.failed's word, or the run's end for one closed by it), error,
//     executor, childRun, output}
//   Review (a critic's): {attempt, from, to, approved (null until the verdict), critique}
//   Gate (an approval gate's wait): {attempt, from, to, reason, by, declined}
//   rounds: the planner's rounds [{round, from, to, model, rejected: [{ts, error}], steps}]
//   planReviews: [{round, from, to, reviewer, digest, decision: {approved, by, edited} | null}]
//   awaitingPlan: the event.plan.awaiting_approval not decided yet, or null
//   awaitingGates: Map step id -> its event.step.awaiting_approval not decided yet
//   replans: [{ts, round, reason, source}]
//   synthesis: {from, to, failed} once every step of the plan is done, else null
//   usage: the run's total {calls, prompt_tokens, completion_tokens, cost_usd, estimated};
//     plannerUsage, synthesisUsage likewise
//   events: every event applied, in seq order, each once
export function newRun(runId) {
  return {
    runId, goal: "", parent: null, start: null, end: null, ended: false, outcome: null,
    steps: new Map(), rounds: [], planReviews: [], awaitingPlan: null,
    awaitingGates: new Map(), replans: [], synthesis: null, usage: null,
    plannerUsage: emptyUsage(), synthesisUsage: emptyUsage(), events: [], seen: new Set(),
    lastTs: null, structure: 0,
  };
}

const emptyUsage = () => ({ calls: 0, prompt_tokens: 0, completion_tokens: 0, cost_usd: 0 });
const addUsage = (a, b) => {
  a.calls += b.calls ?? 0; a.prompt_tokens += b.prompt_tokens ?? 0;
  a.completion_tokens += b.completion_tokens ?? 0; a.cost_usd += b.cost_usd ?? 0;
};

/** The cause words of event.step.failed that mean the attempt ran out of time. */
const TIMEOUTS = new Set(["timeout", "heartbeat", "review_timeout", "not_claimed", "approval"]);

function attemptOf(step, n, ts) {
  let a = step.attempts.find((x) => x.n === n);
  if (!a) {
    a = { n, from: ts, to: null, state: "running", cause: "", error: "", executor: "",
      childRun: "", output: "" };
    step.attempts.push(a);
    step.attempts.sort((x, y) => x.n - y.n);
  }
  return a;
}

/** Applies one event; returns the ids of the steps it changed (or [] for run-wide), or null
 * if the event was seen before. */
export function apply(run, e) {
  if (e.seq && run.seen.has(e.seq)) return null;
  if (e.seq) run.seen.add(e.seq);
  run.events.push(e);
  const t = e.ts;
  run.lastTs = Math.max(run.lastTs ?? t, t);
  const step = e.step_id != null ? run.steps.get(e.step_id) : undefined;
  if (step) step.events.push(e);
  switch (e.type) {
    case "event.run.started":
      run.start = t; run.goal = e.goal; run.parent = e.parent ?? null; break;
    case "event.plan.started":
      closePlanReviews(run, t, false);
      run.rounds.push({ round: e.round, from: t, to: null, model: e.model ?? "",
        rejected: [], steps: 0 });
      break;
    case "event.plan.rejected": {
      const r = run.rounds.at(-1);
      if (r) r.rejected.push({ ts: t, error: e.error, retrying: e.retrying });
      closePlanReviews(run, t, false);
      break;
    }
    case "event.plan.finished": {
      const r = run.rounds.findLast((x) => x.round === e.round) ?? run.rounds.at(-1);
      if (r) { r.to ??= t; r.steps = e.steps; }
      break;
    }
    case "event.step.planned": {
      const s = e.step, old = run.steps.get(s.id);
      const title = s.title || s.tool || (s.instruction || "").slice(0, 60);
      if (old) Object.assign(old, { role: s.role, round: e.round, step: s, title,
        deps: s.depends_on ?? [] });
      else {
        run.steps.set(s.id, { id: s.id, role: s.role, round: e.round, step: s, title,
          deps: s.depends_on ?? [], state: "pending", attempts: [], reviews: [], gates: [],
          usage: emptyUsage(), childRuns: [], output: "", events: [e] });
      }
      run.synthesis = null;
      run.structure += 1;
      return [s.id];
    }
    case "event.plan.awaiting_approval": {
      const r = run.rounds.findLast((x) => x.round === e.round);
      if (r && r.to === null) { r.to = t; r.steps = e.steps.length; }  // written: it waits
      run.planReviews.push({ round: e.round, from: t, to: null, reviewer: e.reviewer,
        digest: e.digest, decision: null });
      run.awaitingPlan = e;
      break;
    }
    case "event.plan.approved": {
      const r = run.planReviews.findLast((x) => x.to === null);
      if (r) { r.to = t; r.decision = { approved: true, by: e.by, edited: e.edited }; }
      run.awaitingPlan = null;
      break;
    }
    case "event.step.awaiting_approval":
      if (!step) break;
      step.gates.push({ attempt: e.attempt, from: t, to: null, reason: e.reason, by: "",
        declined: false });
      step.state = "awaiting"; run.awaitingGates.set(step.id, e);
      return [step.id];
    case "event.step.approved":
      if (!step) break;
      closeGate(step, t, e.by, false); run.awaitingGates.delete(step.id);
      return [step.id];
    case "event.step.dispatched": {
      if (!step) break;
      for (const a of step.attempts) if (a.to === null && a.n !== e.attempt) close(a, t, "retried", "");
      const a = attemptOf(step, e.attempt, t);
      a.from = Math.min(a.from, t); step.state = "running";
      return [step.id];
    }
    case "event.step.started": {
      if (!step) break;
      const a = attemptOf(step, e.attempt, t);
      a.executor = e.executor;
      if (e.child_run) { a.childRun = e.child_run;
        if (!step.childRuns.includes(e.child_run)) step.childRuns.push(e.child_run); }
      return [step.id];
    }
    case "event.step.reviewing": {
      if (!step) break;
      const a = attemptOf(step, e.attempt, t);
      if (a.to === null) { a.to = t; a.state = "reviewed"; }
      if (e.executor) a.executor = e.executor;
      step.reviews.push({ attempt: e.attempt, from: t, to: null, approved: null, critique: "" });
      step.state = "reviewing";
      return [step.id];
    }
    case "event.critic.verdict": {
      if (!step) break;
      const r = step.reviews.findLast((x) => x.attempt === e.attempt && x.to === null)
        ?? step.reviews.findLast((x) => x.attempt === e.attempt);
      if (r) Object.assign(r, { to: r.to ?? t, approved: e.approved, critique: e.critique ?? "" });
      else step.reviews.push({ attempt: e.attempt, from: t, to: t, approved: e.approved,
        critique: e.critique ?? "" });
      return [step.id];
    }
    case "event.step.finished": {
      if (!step) break;
      const a = attemptOf(step, e.attempt, t);
      if (a.to === null) a.to = t;
      a.state = "done"; a.output = e.output; if (e.executor) a.executor = e.executor;
      step.output = e.output; step.state = "done";
      closeGate(step, t, "", false);
      startSynthesisIfDone(run, t);
      return [step.id];
    }
    case "event.step.failed": {
      if (!step) break;
      const a = attemptOf(step, e.attempt, t);
      const cause = e.cause || "error";
      const state = cause === "rejected" ? "rejected" : TIMEOUTS.has(cause) ? "timeout"
        : cause === "cancelled" ? "cancelled" : e.will_retry ? "retried" : "failed";
      if (a.to === null) a.to = t;
      a.state = state; a.cause = cause; a.error = e.error;
      if (cause === "declined") closeGate(step, t, "", true);
      else closeGate(step, t, "", false);
      run.awaitingGates.delete(step.id);
      step.state = e.will_retry ? "retrying" : cause === "cancelled" ? "cancelled" : "failed";
      return [step.id];
    }
    case "event.usage": {
      run.usage = e.total;
      const [who, id] = e.source.split(":");
      const target = id !== undefined ? run.steps.get(Number(id)) : null;
      if (target) { addUsage(target.usage, e.usage); return [target.id]; }
      if (who === "planner") addUsage(run.plannerUsage, e.usage);
      else if (who === "synthesizer") addUsage(run.synthesisUsage, e.usage);
      break;
    }
    case "event.replan":
      run.replans.push({ ts: t, round: e.round, reason: e.reason, source: e.source });
      closePlanReviews(run, t, false);
      run.synthesis = null;
      break;
    case "event.work.failed":
      if (e.work === "synthesis" && run.synthesis) run.synthesis.errors = [
        ...(run.synthesis.errors ?? []), e.error];
      return step ? [step.id] : [];
    case "event.outcome.refused":
      return step ? [step.id] : [];
    case "event.run.finished": case "event.run.failed":
      end(run, e);
      return [...run.steps.keys()];
  }
  return [];
}

function close(a, t, state, cause) {
  a.to = t; a.state = state; a.cause = cause;
}

function closeGate(step, t, by, declined) {
  const g = step.gates.findLast((x) => x.to === null);
  if (g) { g.to = t; g.by = by; g.declined = declined; }
}

function closePlanReviews(run, t, approved) {
  for (const r of run.planReviews) if (r.to === null) {
    r.to = t; r.decision = { approved, by: "", edited: false };
  }
  run.awaitingPlan = null;
}

/** Steps still to settle, or settling. */
const LIVE = new Set(["pending", "awaiting", "running", "reviewing", "retrying"]);

/** The synthesis starts when a step finishes and none is left to run (steps given up
 * before a replan stay failed; the replan's steps are those that count then). */
function startSynthesisIfDone(run, t) {
  if (![...run.steps.values()].some((s) => LIVE.has(s.state))) {
    run.synthesis = { from: t, to: null };
  }
}

/** The run ended: everything still open closes at its end, with the run's cause (a
 * cancelled run's in-flight step ends "cancelled"), so a finished run shows nothing running. */
function end(run, e) {
  const t = e.ts;
  run.end = t; run.ended = true;
  if (e.usage) run.usage = e.usage;
  run.outcome = e.type === "event.run.finished" ? { kind: "finished", answer: e.answer }
    : { kind: "failed", stage: e.stage, reason: e.reason, cause: e.cause ?? "" };
  const cause = e.type === "event.run.finished" ? "finished" : (e.cause || e.stage || "failed");
  const stopped = "cancelled";  // whatever ended the run (its cause says which) stopped it
  for (const r of run.rounds) if (r.to === null) r.to = t;
  closePlanReviews(run, t, false);
  for (const s of run.steps.values()) {
    for (const a of s.attempts) if (a.to === null || a.state === "running") {
      close(a, a.to ?? t, stopped, `the run ended (${cause})`);
    }
    for (const r of s.reviews) if (r.to === null) r.to = t;
    closeGate(s, t, "", false);
    if (!["done", "failed", "pending"].includes(s.state)) s.state = stopped;
  }
  run.awaitingGates.clear();
  if (!run.synthesis && e.type === "event.run.finished") {  // steps of an abandoned round
    const ends = [...run.steps.values()].flatMap((s) => s.attempts.map((a) => a.to ?? t));
    run.synthesis = { from: Math.max(run.start ?? t, ...ends), to: null };
  }
  if (run.synthesis && run.synthesis.to === null) {
    run.synthesis.to = t; run.synthesis.failed = e.type !== "event.run.finished";
  }
}

/** Whether an output was cut for its event (actors/run/state.py PREVIEW: 4000 characters
 * and "…"): the whole of it is at GET runs/{id}/steps/{step}/output. */
export const PREVIEW = 4000;
export const isCut = (output) => output.length > PREVIEW && output.endsWith("…");
