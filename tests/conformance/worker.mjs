// A plancast executor role in JavaScript, written from docs/wire.md alone with the official
// NATS packages: pull step.task from consumer step-<role>, claim, work, answer, ack.
//
// Tools: shout {text} (upper-cases it), big {size} (that many "x": sent by reference).
// Settings from the environment: NATS_URL, NATS_USER, NATS_PASSWORD, PLANCAST_PREFIX, ROLE.
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
const consumer = await js.consumers.get(`${base}_WORK`, `step-${role}`);
const jsm = await js.jetstreamManager();
const enc = (message) => JSON.stringify({ schema_version: 1, ...message });

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
    await new Promise((ok) => setTimeout(ok, 100));
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
  for (let n = 0; n * CHUNK < bytes.length; n++) {
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

const tools = {
  shout: (args) => String(args.text).toUpperCase(),
  big: (args) => "x".repeat(Number(args.size)),
};

async function output(text, runId) {
  // Too large for a message: the output goes to the object store, in the space of the
  // subject our result travels on; a reference travels instead.
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= MAX_MESSAGE / 2) return { output: text };
  return { output_ref: await putObject(`result.${runId}.${role}`, bytes) };
}

async function handle(msg) {
  let task = JSON.parse(new TextDecoder().decode(msg.data));
  if (task.type === "message.offloaded") {
    task = JSON.parse(new TextDecoder().decode(await fetchOffloaded(task.ref, msg.subject)));
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
    outcome = { ok: true, ...(await output(tool(step.args ?? {}), run_id)) };
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
