// A plancast executor role in JavaScript, written from docs/wire.md alone with the official
// NATS packages: pull step.task from consumer step-<role>, claim, work (acknowledging it in
// progress, within the step's timeout), answer, ack; several tasks at once; listen for
// refusals of what it sent on its own error subject.
//
// Tools: shout {text} (upper-cases it), big {size} (that many "x": sent by reference),
// sleep {seconds, text} (waits, then shouts), ticket {text} (opens a ticket the way an API
// with idempotency keys would be asked: the answer names the Idempotency-Key it sent),
// misbehave {how, text} (below: tests only).
// Settings from the environment: NATS_URL, NATS_USER, NATS_PASSWORD, PLANCAST_PREFIX, ROLE,
// PLANCAST_MAX_MESSAGE_BYTES (the deployment's, 512 KiB by default), CONCURRENCY (4).
import { createHash, randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { connect, headers } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";

const prefix = process.env.PLANCAST_PREFIX ?? "plancast";
const role = process.env.ROLE ?? "jsworker";
const user = process.env.NATS_USER;
const base = prefix.replaceAll(".", "_").toUpperCase();
const instance = `js-${randomBytes(3).toString("hex")}`;
const executor = `${role}/${instance}`;
// The deployment's message-size limit is configuration, not something a role may ask the
// server for (stream info is not granted to roles): set it as the deployment does.
const MAX_MESSAGE = Number(process.env.PLANCAST_MAX_MESSAGE_BYTES ?? 512 * 1024);
const CONCURRENCY = Number(process.env.CONCURRENCY ?? 4);
const HEARTBEAT = 2; // seconds
const started = Date.now() / 1000;
const inFlight = new Set();
const log = (...words) => console.log(...words);

const nc = await connect({
  servers: process.env.NATS_URL,
  user,
  pass: process.env.NATS_PASSWORD,
  inboxPrefix: user ? `_INBOX_${user}` : undefined, // a role's user may only read its own
});
const js = jetstream(nc);
const consumer = await js.consumers.get(`${base}_WORK`, `step-${role}`);
// In-progress acks go out at a third of the consumer's ack wait (its info says it).
const ackWaitMs = Number((await consumer.info(true)).config.ack_wait) / 1e6;
const jsm = await js.jetstreamManager();
const enc = (message) => JSON.stringify({ schema_version: 1, ...message });

// Refusals: the planner tells a role of every outcome of its that does not count (stale,
// never claimed, a second answer, unreadable, oversized, an output_ref it cannot use) with
// an actor.error on P.error.<role>, `subject` naming the result subject it came on.
const waiting = new Map(); // result subject -> [resolve, ...]
const refusals = nc.subscribe(`${prefix}.error.${role}`);
(async () => {
  for await (const m of refusals) {
    let report;
    try { report = m.json(); } catch { continue; }
    if (report.type !== "actor.error") continue;
    log(`refused: ${report.subject}: ${report.reason}`);
    const left = (waiting.get(report.subject) ?? []).filter((wants) => !wants(report.reason));
    waiting.set(report.subject, left);
  }
})();
// The next refusal of something sent on `subject` whose reason has `words` (null if none
// comes within `ms`): the report does not say which message it refuses.
function refusal(subject, words = "", ms = 20000) {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(null), ms);
    waiting.set(subject, [...(waiting.get(subject) ?? []), (reason) => {
      if (!reason.includes(words)) return false;
      clearTimeout(timer);
      resolve(reason);
      return true;
    }]);
  });
}

// Objects (docs/wire.md, "The offload envelope"): an object named <space>/<key> is kept in
// chunks, chunk n the one message on $O.<bucket>.C.<space>.<key>.<n>; <space> is the
// subject of the message it stands in for, without the prefix. We may read only our own
// tasks' space, with direct gets naming the chunk's subject, and write only our results'.
const bucket = `${base}_OBJECTS`;
const CHUNK = 128 * 1024;
const TOKEN = /^[A-Za-z0-9_-]{1,128}$/;

async function chunk(subject) {
  for (let tries = 0; ; tries++) { // a cluster's replica may not have stored it yet
    const found = await jsm.direct.getMessage(`OBJ_${bucket}`, { last_by_subj: subject });
    if (found || tries >= 20) return found;
    await sleep(100);
  }
}

// A message.offloaded envelope that came on `subject`: check the reference, read its
// chunks until we have its size, then check the digest.
async function fetchOffloaded(ref, subject) {
  const space = subject.slice(prefix.length + 1);
  const slash = ref.name.lastIndexOf("/");
  const [where, key] = [ref.name.slice(0, slash), ref.name.slice(slash + 1)];
  if (ref.bucket !== bucket || !ref.sha256 || ref.size > 64 * 1024 * 1024 ||
      where !== space || !TOKEN.test(key)) {
    throw new Error(`refused object reference ${ref.bucket}/${ref.name}`);
  }
  const chunks = [];
  for (let n = 0, have = 0; have < ref.size; n++) {
    const part = await chunk(`$O.${bucket}.C.${where}.${key}.${n}`);
    if (!part || part.data.length === 0 || have + part.data.length > ref.size) {
      throw new Error(`object ${ref.name} is not of the ${ref.size} bytes it says`);
    }
    chunks.push(part.data);
    have += part.data.length;
  }
  const data = Buffer.concat(chunks);
  if (createHash("sha256").update(data).digest("hex") !== ref.sha256) {
    throw new Error(`object ${ref.name} does not match its digest`);
  }
  return data;
}

async function putObject(space, bytes) {
  const name = `${space}/${randomBytes(12).toString("hex")}`;
  const key = name.slice(space.length + 1);
  for (let n = 0; n * CHUNK < bytes.length; n++) { // each chunk stored before the next
    await js.publish(`$O.${bucket}.C.${space}.${key}.${n}`,
                     bytes.subarray(n * CHUNK, (n + 1) * CHUNK));
  }
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  return { bucket, name, size: bytes.length, sha256 };
}

const beat = () =>
  nc.publish(`${prefix}.heartbeat.${role}.${instance}`, enc({
    type: "actor.heartbeat", role, instance, host: hostname(), pid: process.pid,
    started_at: started, ts: Date.now() / 1000, interval: HEARTBEAT,
    in_flight: [...inFlight],
  }));
beat();
const beating = setInterval(beat, HEARTBEAT * 1000);

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const tools = {
  shout: async (args) => String(args.text).toUpperCase(),
  big: async (args) => "x".repeat(Number(args.size)),
  sleep: async (args) => { await sleep(Number(args.seconds) * 1000); return tools.shout(args); },
  // A real one would POST with the header `Idempotency-Key: <key>`: a redelivery of the
  // attempt then opens no second ticket.
  ticket: async (args, how, key) => `TICKET ${args.text} Idempotency-Key: ${key}`,
  misbehave: async (args, how) => { // "slow": past the step's timeout (its deadline test)
    if (how === "slow") await new Promise((ok) => setTimeout(ok, 3600e3).unref());
    return tools.shout(args);
  },
};

async function output(text, runId) {
  // Too large for a message: the output goes to the object store, in the space of the
  // subject our result travels on; a reference travels instead.
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= MAX_MESSAGE / 2) return { output: text };
  return { output_ref: await putObject(`result.${runId}.${role}`, bytes) };
}

// The step's own deadline (`timeout` seconds, 0: none): past it, a failure is the answer.
function within(seconds, work) {
  if (!seconds) return work;
  let timer;
  const late = new Promise((_, fail) => {
    timer = setTimeout(() => fail(new Error(
      `timed out: the step ran longer than its ${seconds}s timeout`)), seconds * 1000);
  });
  return Promise.race([work, late]).finally(() => clearTimeout(timer));
}

async function deadLetter(msg, reason) { // a task we cannot handle at all, then ack
  const h = headers();
  h.set("Plancast-Subject", msg.subject);
  h.set("Plancast-Reason", reason.replace(/[\r\n]+/g, " ").slice(0, 512));
  await js.publish(`${prefix}.dead.${role}`, msg.data, { headers: h });
  log(`dead letter: ${reason}`);
  msg.ack();
}

async function handle(msg) {
  let task;
  try {
    task = JSON.parse(new TextDecoder().decode(msg.data));
    if (task?.type === "message.offloaded") {
      task = JSON.parse(new TextDecoder().decode(await fetchOffloaded(task.ref, msg.subject)));
    }
  } catch (err) {
    return deadLetter(msg, `not a readable task: ${err.message}`);
  }
  if (task?.type !== "step.task") return deadLetter(msg, `not a step.task: ${task?.type}`);
  const d = msg.info.deliveryCount;
  const s = msg.info.streamSequence;
  const { run_id, step, attempt, nonce = "", idempotency_key = "", effects = "",
          check_keys = [] } = task;
  const key = `${run_id}/${step.id}/${attempt}/${s}/${d}/${nonce}`;
  const results = `${prefix}.result.${run_id}.${role}`;
  if (task.deadline && Date.now() / 1000 > task.deadline) { msg.ack(); return; }
  const how = step.tool === "misbehave" && attempt === 1 ? step.args?.how : undefined;
  if (how === "ack_without_claim") { msg.ack(); return; } // (test: the claim deadline)
  if (how === "stray") await misbehave.stray(task, results, d);
  // The claim is stored (its publish acknowledged) before the result is sent.
  await js.publish(results, enc({
    type: "step.claimed", run_id, step_id: step.id, attempt, executor, delivery: d,
    heartbeat: HEARTBEAT, nonce,
  }), { msgID: `${key}/claim` });
  inFlight.add(`${run_id}/${step.id}`);
  const working = setInterval(() => msg.working(), ackWaitMs / 3); // in progress
  const startedAt = Date.now() / 1000;
  let outcome;
  // effects "once": an earlier execution (an interrupted attempt the planner names, or this
  // attempt's own first delivery) may have acted, and these tools cannot check by key: the
  // step is not run again blindly, a person must look.
  const unsettled = effects === "once"
    ? [...check_keys, ...(d > 1 && idempotency_key ? [idempotency_key] : [])] : [];
  try {
    const tool = tools[step.tool];
    if (!tool) throw new Error(`unknown tool ${step.tool}`);
    if (unsettled.length) {
      outcome = { ok: false, retryable: false, cause: "outcome_unknown",
                  error: `outcome unknown: an earlier execution may have acted (idempotency `
                         + `key ${unsettled.join(", ")}); not run again: a person must check` };
    } else {
      outcome = { ok: true, ...(await output(await within(
        task.timeout, tool(step.args ?? {}, how, idempotency_key)), run_id)) };
    }
  } catch (err) {
    const timedOut = String(err.message).startsWith("timed out");
    outcome = { ok: false, error: String(err.message ?? err), retryable: timedOut,
                ...(timedOut ? { cause: "timeout" } : {}) };
  } finally {
    inFlight.delete(`${run_id}/${step.id}`);
  }
  try {
    const result = { type: "step.result", run_id, step_id: step.id, attempt, executor,
                     delivery: d, nonce, started_at: startedAt };
    if (["oversized", "malformed", "missing_ref", "missing_envelope"].includes(how)) {
      if (await misbehave[how]({ ...result, finished_at: Date.now() / 1000 }, results, key)) {
        return;
      }
    }
    await js.publish(results, enc({ ...result, finished_at: Date.now() / 1000, ...outcome }),
                     { msgID: `${key}/result` });
    if (how === "twice") await misbehave.again(result, results, key);
  } finally {
    clearInterval(working);
    await msg.ackAck();
  }
}

// What a worker must NOT do, on a step's first attempt (tool `misbehave`, arg `how`), so
// the tests can show what the planner answers. Each waits for the refusal it provokes.
const misbehave = {
  // A result before any claim, from an execution nobody claimed: refused; ours goes on.
  async stray(task, results, d) {
    const told = refusal(results, "never claimed");
    await js.publish(results, enc({
      type: "step.result", run_id: task.run_id, step_id: task.step.id, attempt: task.attempt,
      executor: `${role}/stray`, delivery: d, nonce: task.nonce, ok: true, output: "STRAY",
      started_at: Date.now() / 1000, finished_at: Date.now() / 1000,
    }), { msgID: `${task.run_id}/${task.step.id}/${task.attempt}/stray` });
    log(`stray answered: ${await told}`);
  },
  // A second answer for the same delivery, after the first counted: refused.
  async again(result, results, key) {
    const told = refusal(results, "second answer");
    await js.publish(results, enc({ ...result, finished_at: Date.now() / 1000, ok: true,
                                    output: "SECOND" }), { msgID: `${key}/result/again` });
    log(`second answered: ${await told}`);
  },
  // Too large inline: past the stream's own limit the server refuses the publish; just
  // past PLANCAST_MAX_MESSAGE_BYTES the planner refuses it. Then the real result.
  async oversized(result, results, key) {
    try {
      await js.publish(results, enc({ ...result, ok: true, output: "y".repeat(600 * 1024) }),
                       { msgID: `${key}/result/600k` });
    } catch (err) {
      log(`publish refused: ${err.message}`);
    }
    const told = refusal(results, "oversized");
    await js.publish(results, enc({ ...result, ok: true, output: "y".repeat(MAX_MESSAGE) }),
                     { msgID: `${key}/result/oversized` });
    log(`oversized answered: ${await told}`);
  },
  async malformed(result, results, key) { // not JSON at all
    const told = refusal(results, "not valid JSON");
    await js.publish(results, `{"type": "step.result", not json`,
                     { msgID: `${key}/result/malformed` });
    log(`malformed answered: ${await told}`);
  },
  // An output_ref to an object never stored: the attempt fails at once, naming it.
  async missing_ref(result, results, key) {
    const told = refusal(results, "output_ref");
    const ref = { bucket, name: `result.${result.run_id}.${role}/nothing${instance}`,
                  size: 10, sha256: createHash("sha256").update("0123456789").digest("hex") };
    await js.publish(results, enc({ ...result, finished_at: Date.now() / 1000, ok: true,
                                    output_ref: ref }), { msgID: `${key}/result` });
    log(`missing_ref answered: ${await told}`);
    return true; // that was our answer
  },
  // A whole result by reference (an offload envelope) to an object never stored: it
  // cannot be read, so it is refused, naming the object; then the real result.
  async missing_envelope(result, results, key) {
    const told = refusal(results, "could not be fetched");
    const ref = { bucket, name: `result.${result.run_id}.${role}/gone${instance}`,
                  size: 10, sha256: createHash("sha256").update("0123456789").digest("hex") };
    await js.publish(results, enc({ type: "message.offloaded", inner_type: "step.result",
                                    ref }), { msgID: `${key}/result/envelope` });
    log(`missing_envelope answered: ${await told}`);
  },
};

let stopping = false; // SIGTERM/SIGINT: finish the tasks in hand, then leave
process.on("SIGTERM", () => { stopping = true; });
process.on("SIGINT", () => { stopping = true; });
log(`ready: ${executor}`);
const handling = new Set();
while (!stopping) {
  if (handling.size >= CONCURRENCY) { // several tasks at once, at most CONCURRENCY
    await Promise.race(handling);
    continue;
  }
  const msg = await consumer.next({ expires: 1000 });
  if (!msg) continue;
  const job = handle(msg).catch((err) => log(`task failed: ${err.stack ?? err}`))
    .finally(() => handling.delete(job));
  handling.add(job);
}
await Promise.all(handling);
clearInterval(beating);
await nc.drain();
