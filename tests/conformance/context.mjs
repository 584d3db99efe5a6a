// Connect with nothing but a NATS context file of `plancast auth init` (its url, user,
// password and inbox_prefix, as docs/security.md shows) and ask JetStream for the account's
// info: a request, whose reply comes on the file's inbox prefix. Prints the reply's type.
import { readFileSync } from "node:fs";
import { connect } from "@nats-io/transport-node";

const ctx = JSON.parse(readFileSync(process.argv[2], "utf8"));
const nc = await connect({ servers: ctx.url, user: ctx.user, pass: ctx.password,
                           inboxPrefix: ctx.inbox_prefix });
const reply = await nc.request("$JS.API.INFO", "", { timeout: 10000 });
console.log(reply.json().type);
await nc.close();
