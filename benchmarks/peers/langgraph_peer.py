"""LangGraph on the workloads, as its docs recommend for parallel work.

A chain is a ``StateGraph`` of nodes joined by edges; fan-outs use the Send API (one
``work`` node invoked once per branch in the same superstep) with an ``operator.add``
reducer collecting what every branch returns. Importing this module needs ``langgraph``
(the ``bench`` extra).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version as _version
from typing import Annotated, Any, TypedDict

import anyio
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from ..dag import Dag
from ..workloads import kind_of


class State(TypedDict):
    done: Annotated[list[int], operator.add]
    """Ids of finished steps, appended by every node through the reducer."""


def version() -> str:
    return _version("langgraph")


def _step(step: int, seconds: float) -> Callable[[Any], Awaitable[dict[str, list[int]]]]:
    async def node(state: Any) -> dict[str, list[int]]:
        if seconds:
            await anyio.sleep(seconds)
        return {"done": [step]}

    return node


def _work(seconds: float) -> Callable[[dict[str, int]], Awaitable[dict[str, list[int]]]]:
    async def work(arg: dict[str, int]) -> dict[str, list[int]]:
        if seconds:
            await anyio.sleep(seconds)
        return {"done": [arg["step"]]}

    return work


def build(dag: Dag) -> Any:
    """The compiled graph for a chain, a 1 → N → 1 fan-out or independent steps."""
    seconds = dag.nodes[0].seconds
    graph: Any = StateGraph(State)  # its overloads want TypedDict node inputs
    kind = kind_of(dag)
    if kind == "chain":
        previous = START
        for node in dag.nodes:
            graph.add_node(f"s{node.id}", _step(node.id, seconds))
            graph.add_edge(previous, f"s{node.id}")
            previous = f"s{node.id}"
        graph.add_edge(previous, END)
        return graph.compile()
    middle = [n.id for n in dag.nodes if n.deps == ((1,) if kind == "fan-out" else ())]
    graph.add_node("work", _work(seconds))

    def branches(state: State) -> list[Send]:
        return [Send("work", {"step": i}) for i in middle]

    if kind == "fan-out":
        last = dag.nodes[-1].id
        graph.add_node("first", _step(1, seconds))
        graph.add_node("last", _step(last, seconds))
        graph.add_edge(START, "first")
        graph.add_conditional_edges("first", branches, ["work"])
        graph.add_edge("work", "last")
        graph.add_edge("last", END)
    else:
        graph.add_conditional_edges(START, branches, ["work"])
        graph.add_edge("work", END)
    return graph.compile()


async def run(dag: Dag) -> float:
    """Wall seconds of one invocation (the graph is compiled before the clock starts)."""
    graph = build(dag)
    started = time.perf_counter()
    result = await graph.ainvoke({"done": []}, config={"recursion_limit": len(dag) + 10})
    wall = time.perf_counter() - started
    if len(result["done"]) != len(dag):
        raise RuntimeError(f"langgraph ran {len(result['done'])} of {len(dag)} steps")
    return wall
