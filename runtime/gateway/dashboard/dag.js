// A run's plan as a graph: a layered layout, left to right, by dagre (vendor/dagre.esm.js:
// @dagrejs/dagre 3.1.3 from npm, MIT; see vendor/README.md), which orders each layer to
// avoid crossings and routes edges between the nodes, so on a wide plan one can tell which
// steps feed which. Laid out again only when the plan changes (at most
// every LAYOUT_EVERY ms while a plan streams in); a step's change recolours its node only.
import { svg } from "./api.js";
import dagre from "./vendor/dagre.esm.js";

const NODE = { width: 200, height: 34 };
const LAYOUT_EVERY = 400;

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
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 12, ranksep: 70, edgesep: 8, marginx: 8, marginy: 8 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const s of run.steps.values()) g.setNode(String(s.id), { ...NODE });
    for (const s of run.steps.values()) for (const d of s.deps) {
      if (run.steps.has(d)) g.setEdge(String(d), String(s.id));
    }
    dagre.layout(g);
    const { width, height } = g.graph();
    const root = this.root;
    root.setAttribute("width", Math.max(width, 10)); root.setAttribute("height", Math.max(height, 10));
    const edges = g.edges().map(({ v, w }) => {
      const points = g.edge(v, w).points;
      const d = `M ${points.map((p) => `${p.x.toFixed(1)} ${p.y.toFixed(1)}`).join(" L ")}`;
      return svg("path", { class: "edge", d, "data-from": v, "data-to": w });
    });
    this.nodes.clear();
    const nodes = [...run.steps.values()].map((s) => {
      const p = g.node(String(s.id));
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
