// Acting on runs from the page, through the gateway's HTTP API only (as any client would):
// in the run list a form submits a goal (review mode, a saved plan and its parameters); in
// the run view, while the run goes, what it waits for is offered: its plan awaiting
// approval (as editable JSON: approve, save an edit and approve, reject with a reason) and
// each step held at its approval gate (approve, reject with a reason), and it can be
// cancelled or asked to replan. A request disables the buttons until it is answered; every
// answer and error goes into the page as text, never markup. The gateway records each
// decision with its user (GET /me), whom the page names.
import { $, NoToken, api, el } from "./api.js";

const STYLE = `
  #submit fieldset, #actions fieldset { border: 1px solid #ccc; border-radius: 4px;
    margin: 1em 0; padding: .6em 1em; }
  #submit legend, #actions legend { font-weight: 600; }
  #submit label, #actions label { display: block; margin: .4em 0; }
  #submit textarea[name=goal] { width: 100%; max-width: 48em; box-sizing: border-box; }
  #actions textarea.plan-steps { width: 100%; box-sizing: border-box; font: 12px monospace;
    min-height: 12em; }
  #actions .plan-review, #actions .gate { border-left: 4px solid #b08ad8; padding-left: .8em;
    margin: .6em 0; }
  #actions .gate { border-left-color: #f0b050; }
  #actions .reason-form { display: inline-flex; gap: .4em; margin-left: .4em; }
  #actions .reason-form[hidden] { display: none; }
  #actions .reason-form input { min-width: 20em; }
  #actions .deadline { color: #555; font-size: .9em; }
  .action-error { color: #b02a2a; white-space: pre-wrap; margin: .4em 0; }
  .action-error:empty, .action-note:empty { display: none; }
  #actions pre.gated-work:empty { display: none; }
  .action-note { color: #2a7a2e; margin: .4em 0; }
  .actor { color: #555; font-weight: normal; font-size: .9em; }
  button { margin-right: .4em; }
`;
document.head.append(el("style", { textContent: STYLE }));

const enc = encodeURIComponent;

let user = null;
/** Who the gateway records decisions as (GET /me), asked once; "" if it would not say. */
function whoAmI() {
  user ??= api("me").then(async (response) =>
    response.ok ? String((await response.json()).user ?? "") : "", () => "");
  return user;
}

const post = (path, body) => api(path, { method: "POST", body: JSON.stringify(body),
  headers: { "Content-Type": "application/json" } });

/** The gateway's reason for a refusal, as text. */
async function refusal(response) {
  let said = "";
  try { said = (await response.json()).error; } catch { /* not JSON */ }
  if (typeof said === "string" && said) return said;
  if (response.status === 504) {
    return "the run did not answer in time; the decision may still count: watch its events";
  }
  return `the gateway answered HTTP ${response.status}`;
}

/** Send one request with `box` (a fieldset) disabled until it is answered; a failure to
 * reach the gateway is shown in `error`. Returns the response, or null. */
async function inFlight(box, error, request) {
  box.disabled = true;
  error.textContent = "";
  try {
    return await request();
  } catch (exc) {
    if (!(exc instanceof NoToken)) error.textContent = `could not reach the gateway: ${exc}`;
    return null;
  } finally {
    box.disabled = false;
  }
}

// ---- The run list: submit a goal. ----

let plans = new Map();  // saved plan name -> {params, goal}

function buildSubmit(host) {
  const goal = el("textarea", { name: "goal", rows: 2, required: true,
    placeholder: "What should the team achieve?" });
  const review = el("select", { name: "review_plan" }, ...[
    ["", "as the team says"], ["off", "off: plans run at once"],
    ["human", "human: a person approves each plan"],
    ["auto", "auto: the critic approves each plan"],
  ].map(([value, textContent]) => el("option", { value, textContent })));
  const saved = el("select", { name: "saved_plan" },
    el("option", { value: "", textContent: "none: the planner's model plans" }));
  const params = el("div", { className: "params" });
  const replans = el("input", { name: "max_replans", type: "number", min: "0", max: "10",
    placeholder: "1" });
  const timeout = el("input", { name: "timeout", type: "number", min: "1",
    placeholder: "the team's" });
  const actor = el("span", { className: "actor" });
  const error = el("p", { className: "action-error", id: "submit-error" });
  const box = el("fieldset", {},
    el("legend", {}, "New run ", actor),
    el("label", {}, "Goal", el("br"), goal),
    el("label", {}, "Plan review ", review),
    el("label", {}, "Saved plan ", saved), params,
    el("label", {}, "Replans allowed ", replans, " Timeout (seconds) ", timeout),
    el("button", { type: "submit", textContent: "Submit" }));
  const form = el("form", { id: "submit-form" }, box, error);

  const prompt = goal.placeholder;
  saved.onchange = () => {
    const plan = plans.get(saved.value);
    goal.required = !plan;  // a saved plan has a goal of its own
    goal.placeholder = plan ? `empty: the plan's own (${plan.goal})` : prompt;
    params.replaceChildren(...(plan?.params ?? []).map((name) =>
      el("label", {}, `${name} `, el("input", { required: true, dataset: { param: name },
        name: `param-${name}` }))));
  };
  saved.onfocus = () => loadPlans(saved, error);
  form.onsubmit = async (event) => {
    event.preventDefault();
    const body = goal.value.trim() ? { goal: goal.value.trim() } : {};
    if (review.value) body.review_plan = review.value;
    if (replans.value !== "") body.max_replans = Number(replans.value);
    if (timeout.value !== "") body.timeout = Number(timeout.value);
    if (saved.value) {
      body.saved_plan = saved.value;
      body.params = Object.fromEntries([...params.querySelectorAll("input")]
        .map((input) => [input.dataset.param, input.value]));
    }
    const response = await inFlight(box, error, () => post("runs", body));
    if (response === null) return;
    if (response.status !== 202) { error.textContent = await refusal(response); return; }
    const { run_id: runId } = await response.json();
    goal.value = "";
    location.hash = runId;  // the page shows the new run
  };
  host.replaceChildren(form);
  whoAmI().then((name) => { actor.textContent = name ? `(as ${name})` : ""; });
  loadPlans(saved, error);
}

let plansAsked = 0;
/** The deployment's saved plans into the picker (asked again at most every 5 seconds). */
async function loadPlans(picker, error) {
  if (Date.now() - plansAsked < 5000) return;
  plansAsked = Date.now();
  let response;
  try { response = await api("plans"); } catch { return; }
  if (!response.ok) { error.textContent = `saved plans: ${await refusal(response)}`; return; }
  const listed = await response.json();
  plans = new Map(listed.map((p) => [p.name, { params: p.params ?? [], goal: p.goal ?? "" }]));
  const chosen = picker.value;
  picker.replaceChildren(picker.options[0], ...listed.map((p) => el("option", { value: p.name,
    textContent: `${p.name} (${p.steps} steps` +
      `${p.params?.length ? `; ${p.params.join(", ")}` : ""})` })));
  picker.value = plans.has(chosen) ? chosen : "";
}

document.addEventListener("plancast:list", () => {
  const host = $("submit");
  if (host && !host.querySelector("#submit-form")) buildSubmit(host);
});

// ---- The run view: what the run waits for, cancel, replan. ----
// What awaits a decision is read from the run's events as the page applies them
// ("plancast:run" hands over its state: every event once, in order), as the CLI reads it
// (runtime/client/review.py), so acting needs no polling of the gateway.

let shown = null;  // the run whose actions are on the page

/** What a run's events leave awaiting, updated one event at a time. */
class Awaiting {
  constructor() {
    this.plan = null; this.gates = new Map(); this.ended = false;
    this.steps = new Map();  // step id -> the step as planned (a replan's steps take new ids)
  }

  apply(e) {
    switch (e.type) {
      case "event.step.planned": this.steps.set(e.step.id, e.step); break;
      case "event.plan.awaiting_approval": this.plan = e; break;
      case "event.plan.approved": case "event.plan.rejected": this.plan = null; break;
      case "event.step.awaiting_approval": this.gates.set(e.step_id, e); break;
      case "event.step.approved": case "event.step.failed": {
        const gate = this.gates.get(e.step_id);
        if (gate && gate.attempt === e.attempt) this.gates.delete(e.step_id);
        break;
      }
      case "event.run.finished": case "event.run.failed": this.ended = true;
      // falls through: nothing awaits an ended run
      case "event.replan": this.plan = null; this.gates.clear(); break;
    }
  }
}

class Shown {
  constructor(runId, host) {
    this.runId = runId;
    this.host = host;
    this.state = null;  // the page's model of the run
    this.read = 0;  // how many of its events are applied here
    this.awaiting = new Awaiting();
    this.digest = null;  // the plan on the page
    this.error = el("p", { className: "action-error" });
    this.note = el("p", { className: "action-note" });
    this.planSlot = el("div");
    this.gateSlot = el("div");
    this.actor = el("span", { className: "actor" });
    this.controls = el("div", { className: "controls" },
      this.reasonButton("replan", "Request replan", "what should change in the plan",
        (reason) => this.send(`runs/${enc(runId)}/replan`, { reason }, "replan requested")),
      this.reasonButton("cancel", "Cancel run", "why the run stops",
        (reason) => this.send(`runs/${enc(runId)}/cancel`, { reason }, "cancel requested")));
    this.box = el("fieldset", { className: "run-actions" },
      el("legend", {}, "Act on this run ", this.actor),
      this.planSlot, this.gateSlot, this.controls, this.error, this.note);
    host.replaceChildren(this.box);
    host.hidden = true;  // until the run's events say it goes on
    whoAmI().then((name) => { this.actor.textContent = name ? `(as ${name})` : ""; });
  }

  /** The page applied more of the run's events: show what they leave awaiting. */
  update(state) {
    if (state !== this.state) {
      this.state = state; this.read = 0; this.awaiting = new Awaiting();
    }
    const events = state.events ?? [];
    for (; this.read < events.length; this.read++) this.awaiting.apply(events[this.read]);
    if (this.awaiting.ended || state.ended) { this.end(); return; }
    this.showPlan(this.awaiting.plan);
    this.showGates([...this.awaiting.gates.values()].sort((a, b) => a.step_id - b.step_id));
    this.host.hidden = false;
  }

  end() {
    this.host.hidden = true;
    this.box.replaceChildren();
  }

  /** A button that asks for a reason inline, then does `act(reason)`. */
  reasonButton(name, label, placeholder, act) {
    const open = el("button", { type: "button", textContent: `${label}…`,
      dataset: { act: name } });
    const reason = el("input", { className: "reason", placeholder, required: true,
      name: `${name}-reason` });
    const confirm = el("button", { type: "submit", textContent: label,
      dataset: { act: `${name}-confirm` } });
    const back = el("button", { type: "button", textContent: "Back" });
    const form = el("form", { className: "reason-form", hidden: true }, reason, confirm, back);
    open.onclick = () => { form.hidden = false; open.hidden = true; reason.focus(); };
    back.onclick = () => { form.hidden = true; open.hidden = false; };
    form.onsubmit = async (event) => {
      event.preventDefault();
      if (await act(reason.value.trim())) {
        reason.value = ""; form.hidden = true; open.hidden = false;
      }
    };
    return el("span", { dataset: { action: name } }, open, form);
  }

  /** POST `body` to `path`; true if the gateway took it (its answer shown as a note). */
  async send(path, body, done) {
    this.note.textContent = "";
    const response = await inFlight(this.box, this.error, () => post(path, body));
    if (response === null) return false;
    if (!response.ok) {
      this.error.textContent = await refusal(response);
      return false;
    }
    let answer = null;
    try { answer = await response.json(); } catch { /* an empty body */ }
    const outcome = answer && typeof answer.outcome === "string" ? answer.outcome : "";
    this.note.textContent = outcome ? `${done}: ${outcome}` : done;
    return true;
  }

  /** The plan awaiting approval, its editor kept while it is the same plan. */
  showPlan(plan) {
    if (plan === null || !Array.isArray(plan.steps)) {
      this.digest = null; this.planSlot.replaceChildren(); return;
    }
    if (plan.digest === this.digest) return;
    this.digest = plan.digest;
    const proposed = JSON.stringify(plan.steps.map(brief), null, 2);
    const editor = el("textarea", { className: "plan-steps", value: proposed,
      spellcheck: false, rows: Math.min(30, proposed.split("\n").length + 1),
      ariaLabel: "the plan's steps as JSON" });
    const error = el("p", { className: "action-error plan-error" });
    const decide = async (body) => {
      this.note.textContent = "";
      const response = await inFlight(this.box, error, () =>
        post(`runs/${enc(this.runId)}/plan`, body));
      if (response === null) return false;
      if (!response.ok) {  // a refusal: the editor stays as it is
        error.textContent = await refusal(response);
        return false;
      }
      let answer = null;
      try { answer = await response.json(); } catch { /* an empty body */ }
      this.note.textContent = `plan ${body.approved ? "approved" : "rejected"}` +
        (answer && typeof answer.outcome === "string" ? `: ${answer.outcome}` : "");
      return true;
    };
    const parts = [el("h3", { textContent: plan.round > 0
      ? `The plan of replan ${plan.round} awaits approval` : "The plan awaits approval" })];
    if (plan.reviewer === "auto") {
      editor.readOnly = true;
      parts.push(el("p", { textContent: "The critic reviews this plan (review mode auto)." }),
        editor);
    } else {
      const approve = el("button", { type: "button", textContent: "Approve",
        dataset: { act: "approve-plan" } });
      approve.onclick = () => decide({ approved: true });
      const edit = el("button", { type: "button", textContent: "Save edit & approve",
        dataset: { act: "edit-plan" } });
      edit.onclick = () => {
        let steps;
        try { steps = JSON.parse(editor.value); } catch (exc) {
          error.textContent = `the edit is not JSON: ${exc.message}`; return;
        }
        if (!Array.isArray(steps)) {
          error.textContent = "the edit must be a JSON list of steps"; return;
        }
        decide({ approved: true, steps });
      };
      const reject = this.reasonButton("reject-plan", "Reject",
        "why: the planner's model reads it",
        (reason) => decide({ approved: false, reason }));
      parts.push(el("p", { className: "deadline", textContent: deadline(plan.deadline) }),
        editor, error,
        el("div", {}, approve, edit, reject));
    }
    this.planSlot.replaceChildren(el("section", { className: "plan-review",
      dataset: { round: plan.round, digest: plan.digest } }, ...parts));
  }

  /** Each step held at its gate, a section each, added and removed as gates open and close
   * and otherwise left alone (a reason being typed keeps its focus). A replan's step of the
   * same number, held again, is another gate (another announcement). */
  showGates(waiting) {
    const wanted = new Map(waiting.map((g) => [`${g.step_id}/${g.attempt}/${g.seq}`, g]));
    for (const section of [...this.gateSlot.children]) {
      if (!wanted.has(section.dataset.key)) section.remove();
    }
    const present = new Set([...this.gateSlot.children].map((s) => s.dataset.key));
    for (const [key, gate] of wanted) {
      if (!present.has(key)) this.gateSlot.append(this.gate(gate, key));
    }
  }

  gate(gate, key) {
    const path = `runs/${enc(this.runId)}/steps/${enc(gate.step_id)}/decision`;
    const approve = el("button", { type: "button", textContent: "Approve",
      dataset: { act: "approve-step" } });
    approve.onclick = () => this.send(path, { approved: true },
      `step ${gate.step_id} approved`);
    const reject = this.reasonButton("reject-step", "Reject", "why it must not run",
      (reason) => this.send(path, { approved: false, reason }, `step ${gate.step_id} rejected`));
    const attempt = gate.attempt > 1 ? `, attempt ${gate.attempt}` : "";
    return el("section", { className: "gate", dataset: { key, step: gate.step_id } },
      el("h3", { textContent: `Step ${gate.step_id} (${gate.role ?? "?"}${attempt}) ` +
        "waits for approval" }),
      el("p", { textContent: `Why: ${gate.reason ?? ""}` }),
      el("pre", { className: "gated-work",
        textContent: work(this.awaiting.steps.get(gate.step_id)) }),
      el("p", { className: "deadline", textContent: deadline(gate.deadline) }),
      el("div", {}, approve, reject));
  }
}

/** What a step will do, as its plan says: the tool call, or the instruction. */
function work(step) {
  if (!step) return "";
  if (step.tool) return `${step.tool} ${JSON.stringify(step.args ?? {})}`;
  return step.instruction ?? "";
}

/** A planned step without the fields left at their defaults, to read and edit. */
function brief(step) {
  return Object.fromEntries(Object.entries(step).filter(([, v]) => v !== null && v !== ""
    && v !== false && !(Array.isArray(v) && v.length === 0)));
}

function deadline(at) {
  if (typeof at !== "number" || !at) return "";
  return `Decide before ${new Date(at * 1000).toLocaleTimeString()}.`;
}

function showRun(runId) {
  const host = $("actions");
  if (!host) return null;
  if (!shown || shown.runId !== runId || shown.host !== host) shown = new Shown(runId, host);
  return shown;
}

document.addEventListener("plancast:run", (event) => {
  const { runId, state } = event.detail ?? {};
  if (runId && state) showRun(runId)?.update(state);
});

window.addEventListener("hashchange", () => {
  if (!location.hash.slice(1)) shown = null;
});
