// A plancast executor role in JavaScript, written from docs/wire.md alone with the official
// NATS packages: pull step.task from consumer step-<role>, claim, work, answer, ack.
//
// Tools: shout {text} (upper-cases it), big {size} (that many "x": sent by reference).
// Settings from the environment: NATS_URL, NATS_USER, NATS_PASSWORD, PLANCAST_PREFIX, ROLE.
import { createHash, randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { connect, headers } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Objm } from "@nats-io/obj";

const prefix = process.env.PLANCAST_PREFIX ?? "plancast";
const role = process.env.ROLE ?? "jsworker";
const user = process.env.NATS_USER;
const base = prefix.replaceAll(".", "_").toUpperCase();
const instance = `js-${randomBytes(3).toString("hex")}`;
const executor = `${role}/${instance}`;
const MAX_MESSAGE = 512 * 1024; // PLANCAST_MAX_MESSAGE_BYTES
const HEARTBEAT = 2; // seconds
const started = Date.now() / 1000;
const inFlight = new Set();

const nc = await connect({
  servers: process.env.NATS_URL,
  user,
  pass: process.env.NATS_PASSWORD,
  inboxPrefix: user ? `_INBOX_${user}` : undefined, // a role's user may only read its own
});
const js = jetstream(nc);
const objects = await new Objm(js).open(`${base}_OBJECTS`, false);
const consumer = await js.consumers.get(`${base}_WORK`, `step-${role}`);
const jsm = await js.jetstreamManager();
const enc = (message) => JSON.stringify({ schema_version: 1, ...message });

// A message.offloaded envelope: the message is in our object store. Read it with stream
// "get" requests (a role may not create consumers), then check size and digest.
async function fetchOffloaded(ref) {
  const bucket = `${base}_OBJECTS`;
  if (ref.bucket !== bucket || !ref.sha256 || ref.size > 64 * 1024 * 1024) {
    throw new Error(`refused object reference ${ref.bucket}/${ref.name}`);
  }
  const key = Buffer.from(ref.name).toString("base64url");
  const padded = key + "=".repeat((4 - (key.length % 4)) % 4);
  const stream = `OBJ_${bucket}`;
  const meta = await jsm.streams.getMessage(stream, { last_by_subj: `$O.${bucket}.M.${padded}` });
  const info = meta.json();
  const chunks = [];
  let seq = 0;
  for (let i = 0; i < info.chunks; i++) {
    const chunk = await jsm.streams.getMessage(stream, {
      seq: seq + 1, next_by_subj: `$O.${bucket}.C.${info.nuid}`,
    });
    seq = chunk.seq;
    chunks.push(chunk.data);
  }
  const data = Buffer.concat(chunks);
  if (createHash("sha256").update(data).digest("hex") !== ref.sha256) {
    throw new Error(`object ${ref.name} does not match its digest`);
  }
  return data;
}

const beat = () =>
  nc.publish(`${prefix}.heartbeat.${role}.${instance}`, enc({
    type: "actor.heartbeat", role, instance, host: hostname(), pid: process.pid,
    started_at: started, ts: Date.now() / 1000, interval: HEARTBEAT,
    in_flight: [...inFlight],
  }));
beat();
const beating = setInterval(beat, HEARTBEAT * 1000);

const tools = {
  shout: (args) => String(args.text).toUpperCase(),
  big: (args) => "x".repeat(Number(args.size)),
};

async function output(text, stepKey) {
  // Too large for a message: the output goes to the object store, a reference travels.
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= MAX_MESSAGE / 2) return { output: text };
  const name = `output/${stepKey}/${randomBytes(6).toString("hex")}`;
  await objects.putBlob({ name }, bytes);
  const sha256 = createHash("sha256").update(bytes).digest("hex");
  return { output_ref: { bucket: `${base}_OBJECTS`, name, size: bytes.length, sha256 } };
}

async function handle(msg) {
  let task = JSON.parse(new TextDecoder().decode(msg.data));
  if (task.type === "message.offloaded") {
    task = JSON.parse(new TextDecoder().decode(await fetchOffloaded(task.ref)));
  }
  if (task.type !== "step.task") { // not ours to do: a dead letter, then ack
    const h = headers();
    h.set("Plancast-Subject", msg.subject);
    h.set("Plancast-Reason", `not a step.task: ${task.type}`);
    await js.publish(`${prefix}.dead.${role}`, msg.data, { headers: h });
    msg.ack();
    return;
  }
  const d = msg.info.deliveryCount;
  const s = msg.info.streamSequence;
  const { run_id, step, attempt, nonce = "" } = task;
  const key = `${run_id}/${step.id}/${attempt}/${s}/${d}/${nonce}`;
  const results = `${prefix}.result.${run_id}.${role}`;
  if (task.deadline && Date.now() / 1000 > task.deadline) { msg.ack(); return; }
  // The claim is stored (its publish acknowledged) before the result is sent.
  await js.publish(results, enc({
    type: "step.claimed", run_id, step_id: step.id, attempt, executor, delivery: d,
    heartbeat: HEARTBEAT, nonce,
  }), { msgID: `${key}/claim` });
  inFlight.add(`${run_id}/${step.id}`);
  const startedAt = Date.now() / 1000;
  let outcome;
  try {
    const tool = tools[step.tool];
    if (!tool) throw new Error(`unknown tool ${step.tool}`);
    outcome = { ok: true, ...(await output(tool(step.args ?? {}), `${run_id}/${step.id}`)) };
  } catch (err) {
    outcome = { ok: false, error: String(err), retryable: false };
  } finally {
    inFlight.delete(`${run_id}/${step.id}`);
  }
  await js.publish(results, enc({
    type: "step.result", run_id, step_id: step.id, attempt, executor, delivery: d, nonce,
    started_at: startedAt, finished_at: Date.now() / 1000, ...outcome,
  }), { msgID: `${key}/result` });
  await msg.ackAck();
}

let stopping = false; // SIGTERM/SIGINT: finish the task in hand, then leave
process.on("SIGTERM", () => { stopping = true; });
process.on("SIGINT", () => { stopping = true; });
console.log(`ready: ${executor}`);
while (!stopping) {
  const msg = await consumer.next({ expires: 1000 });
  if (msg) await handle(msg);
}
clearInterval(beating);
await nc.drain();
