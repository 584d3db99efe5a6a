// A run's plan as a graph: a layered layout, left to right, by dagre (vendor/dagre.esm.js:
// @dagrejs/dagre 3.1.3 from npm, MIT; see vendor/README.md), which orders each layer to
// avoid crossings and routes edges between the nodes, so on a wide plan one can tell which
// steps feed which. Laid out again only when the plan changes (at most
// every LAYOUT_EVERY ms while a plan streams in); a step's change recolours its node only.
import { svg } from "./api.js";
import dagre from "./vendor/dagre.esm.js";

const NODE = { width: 200, height: 34 };
const GAP = { rank: 70, node: 12, margin: 8 };
const LAYOUT_EVERY = 400;
/** Steps above which the plan is laid out by `quickLayout` instead: dagre's ordering of
 * the layers grows much faster than the plan (on this machine, a 1,000-step plan of 20
 * layers took it 20 s; benchmarks/dashboard.py), and nobody follows edges one by one on
 * such a plan anyway; 250 steps in layers of 50 took it a quarter of a second. */
const DAGRE_UP_TO = 150;

export class Dag {
  constructor(root, onSelect) {
    this.root = root; this.onSelect = onSelect;
    this.nodes = new Map(); this.structure = -1; this.laidOutAt = 0; this.pending = null;
    this.selected = null;
  }

  /** Redraws: the layout when the plan changed (maybe later, see LAYOUT_EVERY), else only
   * the `dirty` steps' nodes. `again` is called when a postponed layout is due. */
  render(run, dirty, again) {
    if (run.structure !== this.structure) {
      const wait = this.laidOutAt + LAYOUT_EVERY - performance.now();
      if (wait > 0 && this.structure >= 0 && !run.ended) {
        if (!this.pending) this.pending = setTimeout(() => { this.pending = null; again(); }, wait);
      } else {
        this.layout(run);
        return;
      }
    }
    for (const id of dirty) {
      const s = run.steps.get(id), node = this.nodes.get(id);
      if (s && node) this.paint(node, s);
    }
  }

  layout(run) {
    this.structure = run.structure; this.laidOutAt = performance.now();
    const { width, height, at, edges: lines } = run.steps.size <= DAGRE_UP_TO
      ? dagreLayout(run) : quickLayout(run);
    const root = this.root;
    root.setAttribute("width", Math.max(width, 10)); root.setAttribute("height", Math.max(height, 10));
    const edges = lines.map(({ from, to, points }) => svg("path", { class: "edge",
      d: `M ${points.map((p) => `${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" L ")}`,
      "data-from": from, "data-to": to }));
    this.nodes.clear();
    const nodes = [...run.steps.values()].map((s) => {
      const p = at(s.id);
      const node = svg("g", { class: "node", "data-step": s.id,
        transform: `translate(${p.x - NODE.width / 2} ${p.y - NODE.height / 2})` });
      node.rect = svg("rect", { width: NODE.width, height: NODE.height, rx: 4 });
      node.text = svg("text", { x: 6, y: 21 });
      node.tip = svg("title", {});
      node.append(node.tip, node.rect, node.text);
      node.onclick = () => this.onSelect(s.id);
      this.nodes.set(s.id, node); this.paint(node, s);
      return node;
    });
    root.replaceChildren(root.firstElementChild, ...edges, ...nodes);
  }

  paint(node, s) {
    node.rect.setAttribute("class", s.state + (s.id === this.selected ? " selected" : ""));
    const label = `${s.id}. ${s.role}: ${s.title}`;
    const more = [s.childRuns.length ? "⤷" : "", s.attempts.length > 1 ? `×${s.attempts.length}`
      : ""].filter(Boolean).join(" ");
    const room = 27 - (more ? more.length + 1 : 0);
    node.text.textContent = (label.length > room ? `${label.slice(0, room - 1)}…` : label) +
      (more ? ` ${more}` : "");
    node.tip.textContent = `${label} — ${s.state}`;
  }

  select(run, id) {
    const before = this.nodes.get(this.selected);
    this.selected = id;
    if (before && run.steps.get(Number(before.dataset.step))) {
      this.paint(before, run.steps.get(Number(before.dataset.step)));
    }
    const node = this.nodes.get(id);
    if (node) this.paint(node, run.steps.get(id));
  }
}

/** dagre's layout: layers ordered to avoid crossings, edges routed between the nodes. */
function dagreLayout(run) {
  const g = new dagre.graphlib.Graph();
  g.setGraph({ rankdir: "LR", nodesep: GAP.node, ranksep: GAP.rank, edgesep: 8,
    marginx: GAP.margin, marginy: GAP.margin });
  g.setDefaultEdgeLabel(() => ({}));
  for (const s of run.steps.values()) g.setNode(String(s.id), { ...NODE });
  for (const s of run.steps.values()) for (const d of s.deps) {
    if (run.steps.has(d)) g.setEdge(String(d), String(s.id));
  }
  dagre.layout(g);
  const { width, height } = g.graph();
  return { width, height, at: (id) => g.node(String(id)),
    edges: g.edges().map(({ v, w }) => ({ from: v, to: w, points: g.edge(v, w).points })) };
}

/** A large plan's layout in one pass: a step's layer is its longest chain of
 * dependencies; each layer is ordered by where its steps' dependencies sit (their mean
 * place in the layers before), which keeps most edges short and apart. */
function quickLayout(run) {
  const layer = new Map(), place = new Map(), layers = [];
  for (const s of run.steps.values()) {  // steps are planned after their dependencies
    const l = Math.max(0, ...s.deps.filter((d) => layer.has(d)).map((d) => layer.get(d) + 1));
    layer.set(s.id, l);
    (layers[l] ??= []).push(s);
  }
  for (const members of layers) {
    const key = (s) => {
      const known = s.deps.filter((d) => place.has(d));
      return known.length ? known.reduce((sum, d) => sum + place.get(d), 0) / known.length
        : -1;
    };
    const keys = new Map(members.map((s) => [s.id, key(s)]));
    members.sort((a, b) => keys.get(a.id) - keys.get(b.id) || a.id - b.id);
    members.forEach((s, i) => place.set(s.id, i));
  }
  const at = (id) => ({ x: GAP.margin + layer.get(id) * (NODE.width + GAP.rank) + NODE.width / 2,
    y: GAP.margin + place.get(id) * (NODE.height + GAP.node) + NODE.height / 2 });
  const edges = [];
  for (const s of run.steps.values()) for (const d of s.deps) {
    if (!layer.has(d)) continue;
    const a = at(d), b = at(s.id);
    edges.push({ from: String(d), to: String(s.id), points: [
      { x: a.x + NODE.width / 2, y: a.y }, { x: b.x - NODE.width / 2 - GAP.rank / 3, y: b.y },
      { x: b.x - NODE.width / 2, y: b.y }] });
  }
  return { at, edges, width: 2 * GAP.margin + layers.length * (NODE.width + GAP.rank),
    height: 2 * GAP.margin + Math.max(1, ...layers.map((m) => m.length))
      * (NODE.height + GAP.node) };
}
