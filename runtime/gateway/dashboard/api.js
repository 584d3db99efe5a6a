// The page's access to the gateway: its token (given once as ?token=, kept in this
// origin's storage, sent as `Authorization: Bearer`), JSON requests, a run's events
// (Server-Sent Events read through fetch, since EventSource cannot send the token),
// and small DOM helpers. Every text from a run goes into the page as text.
export const $ = (id) => document.getElementById(id);
export const el = (tag, { dataset = {}, ...props } = {}, ...children) => {
  const node = Object.assign(document.createElement(tag), props);
  Object.assign(node.dataset, dataset);
  node.append(...children);
  return node;
};
export const svg = (tag, attrs) => {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
};
export const age = (s) => s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(0)}m`
  : `${(s / 3600).toFixed(1)}h`;

const TOKEN_KEY = "plancast-gateway-token";
{
  const given = new URLSearchParams(location.search).get("token");
  if (given) {  // kept, and taken out of the address bar and history
    localStorage.setItem(TOKEN_KEY, given);
    history.replaceState(null, "", location.pathname + location.hash);
  }
}

export class NoToken extends Error {}

export async function api(path, { headers = {}, ...options } = {}) {
  const token = localStorage.getItem(TOKEN_KEY) ?? "";
  const response = await fetch(path, { ...options, cache: "no-store",
    headers: { ...headers, Authorization: `Bearer ${token}` } });
  $("no-token").hidden = response.status !== 401;
  if (response.status === 401) throw new NoToken();
  return response;
}

// A run's Server-Sent Events through fetch: each event's data to onEvent; reconnects after
// the last event seen (Last-Event-ID) until onEvent returns true (the run ended) or aborted.
// onStatus (if given) hears "connected" on each connection made and "lost" when one breaks.
export async function follow(runId, onEvent, signal, onStatus = () => {}) {
  let last = "", broken = null;
  const handle = (data) => {
    try { return onEvent(data); } catch (error) { broken = error; throw error; }
  };
  while (!signal.aborted) {
    try {
      const response = await api(`runs/${encodeURIComponent(runId)}/events`,
        { signal, headers: last ? { "Last-Event-ID": last } : {} });
      if (response.status >= 400 && response.status < 500) return;  // asking again won't help
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      onStatus("connected");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) { onStatus("lost"); break; }  // cut before the run's end
        buffer = (buffer + value).replaceAll("\r\n", "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end); buffer = buffer.slice(end + 2);
          let id = "", data = [];
          for (const line of block.split("\n")) {
            const colon = line.indexOf(":");
            if (colon === 0) continue;  // a comment (keep-alive)
            const field = colon < 0 ? line : line.slice(0, colon);
            const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
            if (field === "id") id = text; else if (field === "data") data.push(text);
          }
          if (id) last = id;
          if (data.length && handle(data.join("\n"))) { reader.cancel(); return; }
        }
      }
    } catch (error) {
      if (signal.aborted || error instanceof NoToken) return;
      if (error === broken) throw error;  // the page's fault, not the connection's
      onStatus("lost");
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
}

