// The page's views: the run list (sub-team runs nested under their parent's step) and one
// run live (its graph, timeline and a step's panel). Events are applied as they come and
// drawn once per animation frame, so a burst of hundreds costs one redraw.
//
// The events other modules (actions.js) listen to on `document`:
//   "plancast:list" after the run list renders (detail: {runs}, GET /runs's rows);
//   "plancast:run" after each drawn batch of a run's events (detail: {runId, state}: the
//     run model, its fields documented in model.js: steps with their attempts, reviews and
//     gates; awaitingPlan, awaitingGates; ended, outcome; events).
// selectStep(stepId) opens that step's panel in view; currentRun() is the run shown.
import { $, NoToken, age, api, el, follow } from "./api.js";
import { Dag } from "./dag.js";
import { apply, newRun } from "./model.js";
import { renderPanel, usageText } from "./panel.js";
import { Timeline } from "./timeline.js";

let view = null, listTimer = null;

/** What drawing cost, measured in the page (benchmarks/dashboard.py reads it): first paint
 * is the first frame with the plan drawn, in ms since the page's navigation began. */
export const perf = { events: 0, duplicates: 0, applyMs: 0, frames: 0, renderMs: 0,
  maxFrameMs: 0, slowest: null, firstPaint: null, endPaint: null, connections: 0, drops: 0 };

export const currentRun = () => view?.run ?? null;

export function selectStep(stepId) {
  if (!view) return;
  const id = Number(stepId);
  view.selected = id;
  view.dag.select(view.run, id);
  for (const row of document.querySelectorAll("#timeline .row.selected")) {
    row.classList.remove("selected");
  }
  document.querySelector(`#timeline .row[data-step="${id}"]`)?.classList.add("selected");
  renderPanel($("panel"), view.run, view.run.steps.get(id));
  history.replaceState(null, "", `#${view.run.runId}/${id}`);
  $("panel").scrollIntoView({ block: "nearest" });
}

function parentOf(r, known) {
  const p = r.parent;
  if (p && typeof p === "object") return { run: p.run_id, step: p.step_id };
  if (typeof p === "string" && p) return { run: p, step: null };
  const derived = /^(.+)-s(\d+)a\d+$/.exec(r.run_id);  // protocols.lineage.child_run_id
  return derived && known.has(derived[1]) ? { run: derived[1], step: Number(derived[2]) } : null;
}

async function showList() {
  $("list-view").hidden = false; $("run-view").hidden = true; $("title").textContent = "runs";
  let runs;
  try { runs = await (await api("runs?limit=100")).json(); } catch (error) {
    if (error instanceof NoToken) return;
    throw error;
  }
  const known = new Set(runs.map((r) => r.run_id)), children = new Map(), top = [];
  for (const r of runs) {
    const p = parentOf(r, known);
    r.parentStep = p;
    if (p && known.has(p.run)) {
      if (!children.has(p.run)) children.set(p.run, []);
      children.get(p.run).push(r);
    } else top.push(r);
  }
  const rows = [];
  const add = (r, depth) => {
    const goal = el("td", { className: "goal", style: `padding-left: ${0.6 + 1.5 * depth}em` });
    if (r.parentStep) {
      goal.append(el("a", { className: "parent-step", href: `#${r.parentStep.run}${
        r.parentStep.step !== null ? `/${r.parentStep.step}` : ""}`, textContent:
        `↳ ${r.parentStep.step !== null ? `step ${r.parentStep.step}` : r.parentStep.run}` }),
      " ");
    }
    goal.append(r.goal.slice(0, 80));
    rows.push(el("tr", { dataset: { run: r.run_id, parent: r.parentStep?.run ?? "",
      depth } },
    el("td", {}, el("a", { href: `#${r.run_id}`, textContent: r.run_id })), goal,
    el("td", { textContent: r.status, className: r.status === "active" ? "running" : r.status }),
    el("td", { textContent: `${r.steps_done}/${r.steps_total}` }),
    el("td", r.tokens_estimated ? { textContent: `~${r.tokens}`,
      title: "estimated in part: the model server reported no usage for some calls" }
      : { textContent: r.tokens }),
    el("td", { textContent: age(r.age) })));
    for (const c of (children.get(r.run_id) ?? []).reverse()) add(c, depth + 1);
  };
  for (const r of top) add(r, 0);
  $("runs").tBodies[0].replaceChildren(...rows);
  $("runs").hidden = !runs.length;
  $("empty").hidden = runs.length > 0;
  $("empty-form").hidden = !$("submit").childElementCount;
  document.dispatchEvent(new CustomEvent("plancast:list", { detail: { runs } }));
  listTimer = setTimeout(showList, 5000);
}

function showRun(runId, stepId) {
  $("list-view").hidden = true; $("run-view").hidden = false; $("title").textContent = runId;
  for (const id of ["goal", "outcome", "usage", "parent"]) $(id).textContent = "";
  $("outcome").className = "";
  const run = newRun(runId), source = new AbortController();
  const onSelect = (id) => selectStep(id);
  view = { run, source, selected: null, dirty: new Set(), frame: 0, pendingSelect: stepId,
    dag: new Dag($("dag"), onSelect), timeline: new Timeline($("timeline"), onSelect) };
  $("panel").hidden = true; $("connection").hidden = true;
  $("failed-only").checked = false;
  $("failed-only").onchange = () => {
    view.timeline.setFilter($("failed-only").checked); schedule();
  };
  const mine = view;
  follow(runId, (data) => {
    const t0 = performance.now();
    const changed = apply(run, JSON.parse(data));
    perf.applyMs += performance.now() - t0;
    if (changed === null) { perf.duplicates += 1; return run.ended; }
    perf.events += 1;
    for (const id of changed) mine.dirty.add(id);
    schedule();
    return run.ended;
  }, source.signal, (status) => {
    if (status === "connected") perf.connections += 1; else perf.drops += 1;
    $("connection").hidden = status === "connected";
  });
  view.ticker = setInterval(() => { if (!run.ended) schedule(); }, 1000);  // open bars grow
}

function schedule() {
  if (view && !view.frame) view.frame = requestAnimationFrame(draw);
}

function draw() {
  const t0 = performance.now(), v = view, run = v.run;
  v.frame = 0;
  const dirty = v.dirty; v.dirty = new Set();
  drawHeader(run);
  v.dag.render(run, dirty, schedule);
  v.timeline.render(run, dirty, Date.now() / 1000);
  if (v.pendingSelect !== undefined && run.steps.has(v.pendingSelect)) {
    const id = v.pendingSelect; v.pendingSelect = undefined; selectStep(id);
  } else if (v.selected !== null && (dirty.has(v.selected) || run.ended)) {
    renderPanel($("panel"), run, run.steps.get(v.selected));
    document.querySelector(`#timeline .row[data-step="${v.selected}"]`)?.classList
      .add("selected");
  }
  const took = performance.now() - t0;
  perf.frames += 1; perf.renderMs += took;
  if (took > perf.maxFrameMs) {
    perf.maxFrameMs = took;
    perf.slowest = { steps: run.steps.size, changed: dirty.size, ended: run.ended };
  }
  if (perf.firstPaint === null && run.steps.size) perf.firstPaint = performance.now();
  if (run.ended && perf.endPaint === null) perf.endPaint = performance.now();
  document.dispatchEvent(new CustomEvent("plancast:run",
    { detail: { runId: run.runId, state: run } }));
}

function drawHeader(run) {
  $("goal").textContent = run.goal;
  const parent = $("parent");
  if (run.parent && !parent.childElementCount) {
    parent.replaceChildren(`a sub-team's run (${run.parent.role || "team"}) for `,
      el("a", { href: `#${run.parent.run_id}/${run.parent.step_id}`, textContent:
        `step ${run.parent.step_id} of run ${run.parent.run_id}` }),
      ` (attempt ${run.parent.attempt})`);
  }
  const o = run.outcome;
  if (o) {
    $("outcome").className = o.kind === "finished" ? "finished" : o.cause === "cancelled"
      ? "failed cancelled" : "failed";
    $("outcome").textContent = o.kind === "finished" ? `answer: ${o.answer}`
      : `failed (${o.stage}): ${o.reason}`;
  } else if (run.start !== null) {
    $("outcome").textContent = run.awaitingPlan ? "the plan awaits approval"
      : run.awaitingGates.size ? `${run.awaitingGates.size} step(s) await approval` : "running";
  }
  if (run.usage && run.usage.calls) {
    const parts = [["planner", run.plannerUsage], ["synthesis", run.synthesisUsage]]
      .filter(([, u]) => u.calls).map(([who, u]) => `${who}: ${usageText(u)}`);
    $("usage").textContent = `usage: ${usageText(run.usage)}${parts.length ? ` — ${
      parts.join("; ")}` : ""}`;
  }
}

function route() {
  const [runId, step] = decodeURIComponent(location.hash.slice(1)).split("/");
  if (view && runId && view.run.runId === runId) {  // the same run: only the step changed
    if (step) selectStep(step);
    return;
  }
  if (view) { view.source.abort(); clearInterval(view.ticker); cancelAnimationFrame(view.frame); }
  view = null;
  clearTimeout(listTimer);
  if (runId) showRun(runId, step ? Number(step) : undefined); else showList();
}
window.onhashchange = route;
route();
