"""Suite 3: LangGraph and AutoGen Core on the same workloads as plancast's overhead suite.

Peers run in this process with their own in-memory runtimes; plancast's figures come
from the overhead suite (planner here, executors in a worker process, NATS between).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from .config import BenchConfig
from .dag import Dag
from .suite_overhead import summarize
from .workloads import chain

PEERS = {"langgraph": "benchmarks.peers.langgraph_peer",
         "autogen-core": "benchmarks.peers.autogen_peer"}
"""Peer name → module with ``version()`` and ``async run(dag) -> wall seconds``."""


async def run_peers(dags: Sequence[Dag], config: BenchConfig,
                    progress: Callable[[str], None]) -> dict[str, Any]:
    """Every peer that imports, each workload ``config.reps`` times; p50 rows per peer."""
    results: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    for name, module_name in PEERS.items():
        try:
            module: Any = importlib.import_module(module_name)
        except ImportError as exc:
            unavailable[name] = f"{exc}; install with: pip install -e '.[bench]'"
            progress(f"peers: {name} unavailable ({exc})")
            continue
        await module.run(chain(3))  # warm-up: imports, first-call caches
        rows = []
        for dag in dags:
            walls = [await module.run(dag) for _ in range(config.reps_for(len(dag)))]
            rows.append(summarize(dag, walls))
            progress(f"peers: {name} {dag.name} p50 {rows[-1]['wall_s']:.3f}s")
        results[name] = {"version": module.version(), "rows": rows}
    return {"peers": results, "unavailable": unavailable}


def compare(plancast_rows: Sequence[dict[str, Any]], peers: dict[str, Any],
            floor: dict[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Per workload: plancast's p50 wall time and its ratio to each peer's; for the timed
    workloads each one's wall ÷ bound too, and the bus alone's (``floor``) per way."""
    out = []
    for row in plancast_rows:
        entry: dict[str, Any] = {"workload": row["workload"], "plancast_s": row["wall_s"],
                                 "plancast_over_bound": row.get("wall_over_bound")}
        for name, peer in peers.items():
            if (match := _row(peer["rows"], row["workload"])) is not None:
                entry[f"{name}_s"] = match["wall_s"]
                entry[f"plancast_over_{name}"] = row["wall_s"] / match["wall_s"]
                entry[f"{name}_over_bound"] = match.get("wall_over_bound")
        for mode, rows in (floor or {}).items():
            if (match := _row(rows, row["workload"])) is not None:
                entry[f"floor_{mode}_over_bound"] = match["wall_over_bound"]
        out.append(entry)
    return out


def _row(rows: Sequence[dict[str, Any]], workload: str) -> dict[str, Any] | None:
    """The row of ``workload``, if that runtime ran it."""
    return next((r for r in rows if r["workload"] == workload), None)
