// The run list and one run's DAG and timeline, live.
import { $, NoToken, age, api, el, follow, svg } from "./api.js";

let source = null, listTimer = null, current = null;

// The events other modules (actions.js) listen to on `document`:
//   "plancast:list" after the run list renders (detail: {runs}, GET /runs's rows);
//   "plancast:run" after each applied batch of a run's events, detail {runId, state}:
//     state.runId, state.goal, state.parent ({run_id, step_id, attempt, depth, role} or null)
//     state.start / state.end: Unix times (end null while the run goes on)
//     state.ended: true once event.run.finished or event.run.failed arrived
//     state.outcome: null, {kind: "finished", answer} or {kind: "failed", stage, reason, cause}
//     state.steps: Map step id -> {id, role, step (the planned Step as JSON), state
//       ("pending", "awaiting", "running", "reviewing", "retrying", "done", "failed",
//       "cancelled"), attempts: [{n, from, to, state, cause, error, output, executor,
//       childRun}], reviews: [{attempt, from, to, approved, critique}], usage}
//     state.awaitingPlan: the event.plan.awaiting_approval waiting for a decision, or null
//     state.awaitingGates: Map step id -> the event.step.awaiting_approval waiting, if any
//     state.events: every event applied, in seq order, each once
// selectStep(stepId) opens that step's panel and scrolls it into view.
export function selectStep(stepId) {
  if (!current) return;
  current.selected = Number(stepId); render(current);
  $("detail-title").scrollIntoView({ block: "start" });
}

async function showList() {
  $("list-view").hidden = false; $("run-view").hidden = true; $("title").textContent = "runs";
  let runs;
  try { runs = await (await api("runs?limit=50")).json(); } catch (error) {
    if (error instanceof NoToken) return;
    throw error;
  }
  const body = $("runs").tBodies[0];
  body.replaceChildren(...runs.map((r) => el("tr", { dataset: { run: r.run_id } },
    el("td", {}, el("a", { href: `#${r.run_id}`, textContent: r.run_id })),
    el("td", { textContent: r.goal.slice(0, 80) }),
    el("td", { textContent: r.status, className: r.status === "active" ? "running" : r.status }),
    el("td", { textContent: `${r.steps_done}/${r.steps_total}` }),
    el("td", r.tokens_estimated ? { textContent: `~${r.tokens}`,
      title: "estimated in part: the model server reported no usage for some calls" }
      : { textContent: r.tokens }),
    el("td", { textContent: age(r.age) }))));
  document.dispatchEvent(new CustomEvent("plancast:list", { detail: { runs } }));
  listTimer = setTimeout(showList, 5000);
}

function showRun(runId) {
  $("list-view").hidden = true; $("run-view").hidden = false; $("title").textContent = runId;
  const run = { runId, steps: new Map(), replans: [], start: null, end: null, selected: null,
    ended: false, outcome: null, awaitingPlan: null, awaitingGates: new Map(), events: [] };
  current = run;
  source = new AbortController();
  follow(runId, (data) => {
    const e = JSON.parse(data); run.events.push(e); apply(run, e); render(run);
    document.dispatchEvent(new CustomEvent("plancast:run", { detail: { runId, state: run } }));
    return run.end !== null;
  }, source.signal);
  $("failed-only").onchange = () => render(run);
  setInterval(() => { if (!run.end) render(run); }, 1000);  // running bars grow
}

function apply(run, e) {
  const t = e.ts, step = run.steps.get(e.step_id);
  switch (e.type) {
    case "event.run.started": run.start = t; $("goal").textContent = e.goal; break;
    case "event.step.planned":
      run.steps.set(e.step.id, { id: e.step.id, role: e.step.role, deps: e.step.depends_on,
        title: e.step.title || e.step.tool || (e.step.instruction || "").slice(0, 40),
        state: "pending", attempt: 0, from: null, to: null, output: "", error: "",
        verdicts: [], executor: "" });
      break;
    case "event.step.dispatched":
      Object.assign(step, { state: "running", attempt: e.attempt, to: null });
      step.from = step.from ?? t; break;
    case "event.step.started": step.executor = e.executor; break;
    case "event.step.finished":
      Object.assign(step, { state: "done", to: t, output: e.output, executor: e.executor });
      break;
    case "event.step.failed":
      Object.assign(step, { state: e.will_retry ? "retrying" : "failed", error: e.error });
      if (!e.will_retry) step.to = t;
      break;
    case "event.step.reviewing": step.state = "reviewing"; break;
    case "event.critic.verdict": step.verdicts.push(e.approved ? "approved" : "rejected"); break;
    case "event.replan": run.replans.push(t); break;
    case "event.usage":
      $("usage").textContent = `usage: ${e.total.calls} model calls, ` +
        `${e.total.prompt_tokens + e.total.completion_tokens} tokens, ` +
        `$${e.total.cost_usd.toFixed(4)}`;
      break;
    case "event.run.finished": case "event.run.failed":
      run.end = t;
      $("outcome").className = e.type === "event.run.finished" ? "finished" : "failed";
      $("outcome").textContent = e.type === "event.run.finished" ? `answer: ${e.answer}`
        : `failed (${e.stage}): ${e.reason}`;
      break;
  }
}

function render(run) {
  renderDag(run); renderTimeline(run);
  const s = run.steps.get(run.selected);
  $("detail").hidden = !s;
  $("detail-title").textContent = s ? `step ${s.id} (${s.role}${s.executor ? ", " +
    s.executor : ""})` : "";
  if (s) $("detail").textContent = s.output || s.error || "(no output yet)";
}

function renderDag(run) {
  const dag = $("dag"), depth = new Map(), rows = new Map();
  for (const s of run.steps.values()) {  // steps arrive after their dependencies
    depth.set(s.id, Math.max(0, ...s.deps.map((d) => (depth.get(d) ?? 0) + 1)));
  }
  const pos = new Map();
  for (const s of run.steps.values()) {
    const d = depth.get(s.id), r = rows.get(d) ?? 0;
    rows.set(d, r + 1); pos.set(s.id, { x: 10 + d * 230, y: 10 + r * 44 });
  }
  dag.replaceChildren(dag.firstElementChild);
  dag.setAttribute("height", 20 + 44 * Math.max(1, ...rows.values()));
  for (const s of run.steps.values()) for (const d of s.deps) {
    const a = pos.get(d), b = pos.get(s.id);
    if (a) dag.append(svg("line", { x1: a.x + 180, y1: a.y + 15, x2: b.x, y2: b.y + 15 }));
  }
  for (const s of run.steps.values()) {
    const p = pos.get(s.id), g = svg("g", { "data-step": s.id, class: "node" });
    g.append(svg("rect", { x: p.x, y: p.y, width: 180, height: 30, rx: 4, class: s.state }));
    const text = svg("text", { x: p.x + 6, y: p.y + 19 });
    const label = `${s.id}. ${s.role}: ${s.title}`;
    text.textContent = label.length > 26 ? `${label.slice(0, 25)}…` : label;
    g.append(text); g.onclick = () => { run.selected = s.id; render(run); };
    dag.append(g);
  }
}

function renderTimeline(run) {
  const now = run.end ?? Date.now() / 1000, start = run.start ?? now;
  const span = Math.max(now - start, 0.001), pct = (t) => `${(100 * (t - start)) / span}%`;
  const only = $("failed-only").checked;
  $("timeline").replaceChildren(...[...run.steps.values()]
    .filter((s) => !only || s.state === "failed")
    .map((s) => {
      const lane = el("div", { className: "lane" });
      if (s.from !== null) {
        lane.append(el("div", { className: `bar ${s.state}`, title: s.state,
          style: `left: ${pct(s.from)}; width: calc(${pct(s.to ?? now)} - ${pct(s.from)})` }));
      }
      for (const t of run.replans) lane.append(el("div", { className: "replan", title: "replan",
        style: `left: ${pct(t)}` }));
      const badges = [s.attempt > 1 ? `attempt ${s.attempt}` : "",
        ...s.verdicts.map((v) => `critic ${v}`)].filter(Boolean).join(", ");
      const row = el("div", { className: "row", dataset: { step: s.id, state: s.state } },
        el("span", { className: "label", textContent: `${s.id}. ${s.role}: ${s.title}` },
          el("span", { className: "badge", textContent: badges })), lane);
      row.onclick = () => { run.selected = s.id; render(run); };
      return row;
    }));
}

function route() {
  if (source) source.abort();
  clearTimeout(listTimer);
  const runId = decodeURIComponent(location.hash.slice(1));
  if (runId) showRun(runId); else showList();
}
window.onhashchange = route;
route();
