// A run's timeline: a time axis (seconds from the run's start), a legend for every colour,
// a row for the planner's rounds, one for plan reviews, one per step (each attempt, each
// critic review and each wait at an approval gate its own segment, its cause on hover) and
// one for the synthesis; replans marked across all rows. While the run goes on the scale
// doubles when the run outgrows it, so finished bars move only then, not on every tick;
// rows are kept and redrawn only when their step changed or has an open segment.
import { el } from "./api.js";

/** Every colour the timeline and the graph use: class, what it means. */
export const LEGEND = [
  ["pending", "pending: not started"],
  ["awaiting", "waiting for a person's approval (gate or plan)"],
  ["planning", "planner: a plan round streaming"],
  ["running", "running"],
  ["reviewed", "output written, under the critic's review"],
  ["reviewing", "critic review"],
  ["done", "done"],
  ["retried", "attempt failed, retried"],
  ["rejected", "refused by the critic"],
  ["timeout", "timed out"],
  ["failed", "failed"],
  ["cancelled", "cancelled (stopped by the run's end)"],
  ["synthesis", "synthesis of the answer"],
  ["replan", "replan"],
];

const LIVE_MIN_SPAN = 10;

/** A round step for ticks: 1, 2 or 5 times a power of ten, about a tenth of the span. */
function tickStep(span) {
  const raw = span / 8, p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
}

/** The span shown (seconds): live, the smallest 10·2ⁿ that holds the run (so bars stay put
 * until it doubles); ended, the run's length rounded up to a tick. */
export function spanFor(elapsed, ended) {
  if (ended) { const s = tickStep(Math.max(elapsed, 0.5)); return Math.ceil(elapsed / s) * s || s; }
  let span = LIVE_MIN_SPAN;
  while (span < elapsed) span *= 2;
  return span;
}

export const fmt = (s) => s < 60 ? `${+s.toFixed(1)}s` : `${Math.floor(s / 60)}m${
  Math.round(s % 60) ? ` ${Math.round(s % 60)}s` : ""}`;

export class Timeline {
  constructor(root, onSelect) {
    this.root = root; this.onSelect = onSelect;
    this.axis = el("div", { className: "tl-lane tl-axis" });
    this.overlay = el("div", { className: "tl-overlay" });
    this.body = el("div", { className: "tl-rows" });
    this.rows = new Map();  // step id -> row element
    this.phases = { planner: this.phaseRow("planner", "planner"),
      review: this.phaseRow("plan-review", "plan review"),
      synthesis: this.phaseRow("synthesis", "synthesis") };
    this.span = null; this.structure = -1; this.filter = false; this.open = new Set();
    root.replaceChildren(
      el("div", { className: "legend" }, ...LEGEND.map(([cls, text]) =>
        el("span", { className: "key" }, el("i", { className: `swatch ${cls}` }), text))),
      el("div", { className: "tl-head" }, el("div", { className: "tl-label" }), this.axis,
        el("div", { className: "tl-badges" })),
      this.body);
  }

  phaseRow(name, label) {
    const lane = el("div", { className: "tl-lane" });
    const row = el("div", { className: "phase-row", dataset: { phase: name } },
      el("div", { className: "tl-label", textContent: label }), lane,
      el("div", { className: "tl-badges" }));
    row.lane = lane; row.badges = row.lastChild;
    return row;
  }

  setFilter(failedOnly) { this.filter = failedOnly; this.structure = -1; }

  /** Redraws what changed: `dirty` step ids (all when the scale changed), open segments. */
  render(run, dirty, now) {
    if (run.start === null) return;
    const until = run.end ?? Math.max(now, run.lastTs ?? now);
    const span = spanFor(until - run.start, run.ended);
    const all = span !== this.span;
    if (all) { this.span = span; this.drawAxis(); }
    const x = (t) => (100 * (t - run.start)) / span;
    this.ctx = { run, until, x };
    const ids = all ? [...run.steps.keys()] : new Set([...dirty, ...this.open]);
    for (const id of ids) {
      const s = run.steps.get(id);
      if (s) this.drawStep(s);
    }
    this.drawPhases(run);
    if (run.structure !== this.structure || all || this.filter) {  // filtered: states move
      this.structure = run.structure;
      const steps = [...run.steps.values()].filter((s) => !this.filter || s.state === "failed");
      for (const s of steps) if (!this.rows.has(s.id)) this.drawStep(s);
      this.body.replaceChildren(...(this.filter ? [] : [this.phases.planner]),
        ...(this.filter || !run.planReviews.length ? [] : [this.phases.review]),
        ...steps.map((s) => this.rows.get(s.id)),
        ...(this.filter ? [] : [this.phases.synthesis]), this.overlay);
    } else if (run.planReviews.length && !this.phases.review.isConnected && !this.filter) {
      this.phases.planner.after(this.phases.review);
    }
    this.overlay.replaceChildren(...run.replans.map((r) => el("div", { className: "replan",
      title: `replan, round ${r.round} (${r.source}): ${r.reason}`,
      style: `left: ${x(r.ts)}%` })));
  }

  drawAxis() {
    const step = tickStep(this.span), ticks = [];
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    for (let n = 0; n * step <= this.span + 1e-9; n += 1) {
      const t = n * step;
      ticks.push(el("span", { className: "tick", textContent: t < 60 || step < 1
        ? `${+t.toFixed(decimals)}s` : fmt(t),
        style: `left: ${(100 * t) / this.span}%` }));
    }
    this.axis.replaceChildren(...ticks);
  }

  seg(cls, from, to, title, extra = {}) {
    const { x, until } = this.ctx, left = x(from), right = x(to ?? until);
    return el("div", { className: `seg ${cls}`, title, ...extra,
      style: `left: ${left}%; width: ${Math.max(right - left, 0)}%` });
  }

  drawStep(s) {
    let row = this.rows.get(s.id);
    if (!row) {
      const lane = el("div", { className: "tl-lane" });
      const label = el("div", { className: "tl-label" });
      row = el("div", { className: "row", dataset: { step: s.id } }, label, lane,
        el("div", { className: "tl-badges" }));
      row.lane = lane; row.label = label; row.badges = row.lastChild;
      row.onclick = (event) => { if (!event.target.closest("a")) this.onSelect(s.id); };
      this.rows.set(s.id, row);
    }
    row.dataset.state = s.state;
    const text = `${s.id}. ${s.role}: ${s.title}`;
    row.label.textContent = text; row.label.title = text;
    const segs = [];
    let open = false;
    for (const g of s.gates) {
      open ||= g.to === null;
      segs.push(this.seg("awaiting", g.from, g.to, `attempt ${g.attempt}: waiting at its ` +
        `approval gate (${g.reason})${g.by ? `, approved by ${g.by}` : ""}${
          g.declined ? ", declined" : ""}`));
    }
    for (const a of s.attempts) {
      open ||= a.to === null;
      segs.push(this.seg(a.state, a.from, a.to, attemptTitle(a),
        { dataset: { attempt: a.n, state: a.state } }));
    }
    for (const r of s.reviews) {
      open ||= r.to === null;
      const verdict = r.approved === null ? "under review" : r.approved ? "approved"
        : "rejected";
      segs.push(this.seg(`reviewing${r.approved === false ? " refused" : ""}`, r.from, r.to,
        `critic review of attempt ${r.attempt}: ${verdict}${r.critique ? ` — ${r.critique}`
          : ""}`, { dataset: { review: r.attempt, verdict } }));
    }
    if (open) this.open.add(s.id); else this.open.delete(s.id);
    row.lane.replaceChildren(...segs);
    const badges = [];
    if (s.attempts.length > 1) badges.push(`${s.attempts.length} attempts`);
    const verdicts = s.reviews.filter((r) => r.approved !== null)
      .map((r) => r.approved ? "approved" : "rejected");
    if (verdicts.length) badges.push(`critic: ${verdicts.join(", ")}`);
    const last = s.attempts.at(-1);
    if (last && last.cause && last.state !== "done") badges.push(last.cause);
    row.badges.replaceChildren(el("span", { className: "badge", textContent:
      badges.join(" · ") }), ...s.childRuns.map((c) => el("a", { className: "child-link",
      href: `#${c}`, textContent: "sub-run →", title: `the sub-team's run ${c}` })));
  }

  drawPhases(run) {
    const planner = run.rounds.map((r) => this.seg("planning", r.from, r.to,
      `plan round ${r.round}${r.model ? ` (${r.model})` : ""}: ${r.to === null ? "streaming"
        : `${r.steps} steps`}${r.rejected.length ? `; refused ${r.rejected.length}×: ` +
          r.rejected.map((x) => x.error).join("; ") : ""}`, { dataset: { round: r.round } }));
    for (const r of run.rounds) for (const x of r.rejected) {
      planner.push(this.seg("failed mark", x.ts, x.ts, `plan of round ${r.round} refused: ${
        x.error}${x.retrying ? " (asking the model again)" : ""}`));
    }
    this.phases.planner.lane.replaceChildren(...planner);
    this.phases.planner.badges.textContent = run.rounds.length > 1
      ? `${run.rounds.length} rounds` : "";
    this.phases.review.lane.replaceChildren(...run.planReviews.map((r) => this.seg(
      "awaiting", r.from, r.to, `plan of round ${r.round} awaiting approval (${r.reviewer})${
        r.decision ? (r.decision.approved ? `: approved${r.decision.by ? ` by ${r.decision.by}`
          : ""}${r.decision.edited ? ", edited" : ""}` : ": not approved") : ""}`)));
    const syn = run.synthesis;
    this.phases.synthesis.lane.replaceChildren(...(syn ? [this.seg(
      syn.failed ? "failed" : syn.to === null ? "running synthesis" : "synthesis",
      syn.from, syn.to, `synthesis${syn.to === null ? ": writing the answer" : syn.failed
        ? `: ${run.outcome?.reason ?? "failed"}` : ""}`)] : []));
  }
}

export function attemptTitle(a) {
  const what = { running: "running", reviewed: "output under the critic's review",
    done: "done", retried: "failed, retried", rejected: "refused by the critic",
    timeout: "timed out", failed: "failed", cancelled: "cancelled" }[a.state] ?? a.state;
  return `attempt ${a.n}: ${what}${a.executor ? ` on ${a.executor}` : ""}${
    a.cause ? ` (${a.cause})` : ""}${a.error ? ` — ${a.error}` : ""}`;
}
