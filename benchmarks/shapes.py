"""DAG shapes from the LLMCompiler benchmarks, with tool times drawn up front.

Each step's time comes from its own RNG, seeded by (seed, shape, step id), so the
streaming, non-streaming and ReAct variants of a shape see exactly the same times.
"""

from __future__ import annotations

import math
import random

from .config import BenchConfig, Latencies
from .dag import Dag, Node


def draw(seed: int, shape: str, step: int, mean: float, sigma: float) -> float:
    """A lognormal time with this mean, from the step's own RNG."""
    rng = random.Random(f"{seed}/{shape}/{step}")
    return rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma)


class _Builder:
    """Collects nodes in plan order, drawing each one's time."""

    def __init__(self, name: str, config: BenchConfig) -> None:
        self.name = name
        self.config = config
        self.nodes: list[Node] = []

    def add(self, tool: str, deps: tuple[int, ...] = (), factor: float = 1.0) -> int:
        lat: Latencies = self.config.latencies
        mean, sigma = ((lat.search_mean, lat.search_sigma) if tool == "search"
                       else (lat.math_mean, lat.math_sigma))
        sid = len(self.nodes) + 1
        seconds = draw(self.config.seed, self.name, sid, mean, sigma) * factor
        self.nodes.append(Node(sid, tool, deps, seconds * self.config.time_scale))
        return sid

    def dag(self) -> Dag:
        return Dag(self.name, tuple(self.nodes))


def parallel_searches(name: str, n: int, config: BenchConfig) -> Dag:
    """``n`` independent searches, joined by the synthesizer (HotpotQA: 2, Movie: 8)."""
    b = _Builder(name, config)
    for _ in range(n):
        b.add("search")
    return b.dag()


def parallelqa(branches: int, config: BenchConfig) -> Dag:
    """``branches`` times (search → math), then one math over every branch."""
    b = _Builder(f"parallelqa-{branches}", config)
    searches = [b.add("search") for _ in range(branches)]
    maths = [b.add("math", (s,)) for s in searches]
    b.add("math", tuple(maths))
    return b.dag()


def search_add_compare(config: BenchConfig) -> Dag:
    """3 searches → add them (math) → compare (math)."""
    b = _Builder("3-search-add-compare", config)
    searches = tuple(b.add("search") for _ in range(3))
    total = b.add("math", searches)
    b.add("math", (total,))
    return b.dag()


def straggler(config: BenchConfig, branches: int = 4) -> Dag:
    """Branches of search → math; the first search is ``straggler_factor`` times slower.

    The other branches' math steps must not wait for the straggler (no supersteps).
    """
    b = _Builder("straggler", config)
    slow = config.latencies.straggler_factor
    searches = [b.add("search", factor=slow if i == 0 else 1.0) for i in range(branches)]
    for s in searches:
        b.add("math", (s,))
    return b.dag()


def all_shapes(config: BenchConfig) -> list[Dag]:
    """Every shape of the suite, in report order."""
    shapes = [parallel_searches("hotpotqa", 2, config), parallel_searches("movie", 8, config)]
    shapes += [parallelqa(n, config) for n in config.parallelqa_branches]
    shapes += [search_add_compare(config), straggler(config)]
    shapes += [parallel_searches(f"fan-out-{n}", n, config) for n in config.fan_outs]
    return shapes
