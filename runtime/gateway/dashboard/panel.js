// One step's panel: what it was asked (instruction or tool call), its output (or a button
// fetching a long one whole), its attempts with their causes, its critic reviews, its
// sub-team runs, its tokens and cost, and its events. All as text.
import { api, el } from "./api.js";
import { isCut } from "./model.js";
import { fmt } from "./timeline.js";

export function usageText(u) {
  if (!u || !u.calls) return "";
  const tokens = u.prompt_tokens + u.completion_tokens;
  return `${u.calls} model call${u.calls === 1 ? "" : "s"}, ${u.estimated ? "~" : ""}${tokens} ` +
    `tokens (${u.prompt_tokens} in, ${u.completion_tokens} out)` +
    (u.cost_usd > 0 ? `, $${u.cost_usd >= 0.01 ? u.cost_usd.toFixed(2)  // cost only where
      : u.cost_usd.toPrecision(2)}` : "");  // prices are set, and never read $0.0000
}

const section = (title, ...body) => el("section", {}, el("h3", { textContent: title }), ...body);

export function renderPanel(root, run, s) {
  if (!s) { root.hidden = true; root.replaceChildren(); return; }
  root.hidden = false;
  const since = (t) => run.start === null ? "" : `+${fmt(t - run.start)}`;
  const def = s.step;
  const asked = def.tool
    ? section("tool call", el("pre", { className: "call",
      textContent: `${def.tool}(${JSON.stringify(def.args ?? {}, null, 2)})` }))
    : section("instruction", el("pre", { className: "instruction",
      textContent: def.instruction ?? "" }));
  const facts = [
    def.depends_on?.length ? `depends on ${def.depends_on.join(", ")}` : "no dependencies",
    `round ${s.round}`, def.review ? "reviewed by the critic" : "",
    def.success_criteria ? `success: ${def.success_criteria}` : "",
    def.on_failure && def.on_failure !== "replan" ? `on failure: ${def.on_failure}` : "",
    def.timeout ? `timeout ${def.timeout}s` : "",
  ].filter(Boolean).join(" · ");
  const output = el("pre", { id: "detail", textContent: s.output ||
    s.attempts.findLast((a) => a.error)?.error || "(no output yet)" });
  const outputBody = [output];
  if (s.output && isCut(s.output)) {
    const whole = el("button", { type: "button", className: "whole-output",
      textContent: "load the whole output" });
    whole.onclick = async () => {
      whole.disabled = true;
      const response = await api(`runs/${encodeURIComponent(run.runId)}/steps/${s.id}/output`);
      if (response.ok) { output.textContent = await response.text(); whole.remove(); }
      else whole.textContent = `the whole output could not be read (HTTP ${response.status})`;
    };
    outputBody.push(whole);
  }
  const attempts = el("table", { className: "attempts" }, el("tr", {},
    ...["attempt", "on", "from", "took", "outcome"].map((h) => el("th", { textContent: h }))),
  ...s.attempts.flatMap((a) => [el("tr", { dataset: { attempt: a.n, state: a.state } },
    el("td", { textContent: String(a.n) }), el("td", { textContent: a.executor || "—" }),
    el("td", { textContent: since(a.from) }),
    el("td", { textContent: a.to === null ? "…" : a.to - a.from < 1
      ? `${Math.round((a.to - a.from) * 1000)}ms` : fmt(a.to - a.from) }),
    el("td", { textContent: a.state, className: `state ${a.state}` })),
  ...(a.cause || a.error ? [el("tr", { className: "cause-row" }, el("td", {}),
    el("td", { colSpan: 4, className: "cause", textContent:
      [a.cause, a.error].filter(Boolean).join(": ") }))] : [])]));
  const reviews = s.reviews.map((r) => el("p", { className: "review", textContent:
    `attempt ${r.attempt}: ${r.approved === null ? "under review" : r.approved ? "approved"
      : "rejected"}${r.critique ? ` — ${r.critique}` : ""}` }));
  const events = el("pre", { className: "events", textContent: s.events.map((e) =>
    `${since(e.ts).padEnd(8)} #${e.seq} ${e.type.replace(/^event\./, "")}${eventNote(e)}`)
    .join("\n") });
  root.replaceChildren(
    el("h2", { id: "detail-title", textContent: `step ${s.id}: ${s.title}` }),
    el("p", { className: "facts", textContent: `${s.role} · ${s.state} · ${facts}` }),
    ...(s.childRuns.length ? [section("sub-team runs", ...s.childRuns.map((c) =>
      el("p", {}, el("a", { href: `#${c}`, className: "child-link", textContent: c }))))] : []),
    asked,
    section("output", ...outputBody),
    section("attempts", attempts),
    ...(reviews.length ? [section("critic reviews", ...reviews)] : []),
    section("tokens and cost", el("p", { textContent: usageText(s.usage) || "no model calls" })),
    section("events", events));
}

function eventNote(e) {
  const parts = [];
  if (e.attempt) parts.push(`attempt ${e.attempt}`);
  if (e.executor) parts.push(e.executor);
  if (e.cause) parts.push(e.cause);
  if (e.error) parts.push(e.error.slice(0, 200));
  if (e.reason) parts.push(e.reason.slice(0, 200));
  if (e.by) parts.push(`by ${e.by}`);
  if (e.child_run) parts.push(`sub-run ${e.child_run}`);
  if (e.type === "event.critic.verdict") parts.push(e.approved ? "approved" : "rejected");
  return parts.length ? ` (${parts.join(", ")})` : "";
}
