"""AutoGen Core on the workloads: a ``SingleThreadedAgentRuntime``, agents, publish/subscribe.

Each step is a message to a ``worker`` agent (one instance per step key, through a type
subscription on the ``task`` topic); workers publish ``Done`` to a ``coordinator`` agent,
which publishes every step whose dependencies are all done, as plancast's planner does.
Importing this module needs ``autogen-core`` (the ``bench`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from importlib.metadata import version as _version

import anyio
from autogen_core import (
    MessageContext,
    RoutedAgent,
    SingleThreadedAgentRuntime,
    TopicId,
    TypeSubscription,
    message_handler,
)

from ..dag import Dag


@dataclass
class Task:
    step: int


@dataclass
class Done:
    step: int


def version() -> str:
    return _version("autogen-core")


class Worker(RoutedAgent):
    """Runs one step (sleeps its time, if any), then reports it done."""

    def __init__(self, seconds: float) -> None:
        super().__init__("runs one step")
        self.seconds = seconds

    @message_handler
    async def on_task(self, message: Task, ctx: MessageContext) -> None:
        if self.seconds:
            await anyio.sleep(self.seconds)
        await self.publish_message(Done(message.step), TopicId("done", "run"))


class Coordinator(RoutedAgent):
    """Publishes each step the moment its last dependency is done."""

    def __init__(self, dag: Dag, finished: anyio.Event) -> None:
        super().__init__("schedules the DAG")
        self.dag = dag
        self.waiting = {n.id: len(n.deps) for n in dag.nodes}
        self.left = len(dag)
        self.finished = finished

    @message_handler
    async def on_done(self, message: Done, ctx: MessageContext) -> None:
        self.left -= 1
        for child in self.dag.dependents[message.step]:
            self.waiting[child] -= 1
            if self.waiting[child] == 0:
                await self.publish_message(Task(child), TopicId("task", str(child)))
        if self.left == 0:
            self.finished.set()


async def run(dag: Dag) -> float:
    """Wall seconds from publishing the first tasks to the last step's ``Done``."""
    seconds = dag.nodes[0].seconds
    finished = anyio.Event()
    runtime = SingleThreadedAgentRuntime()
    await Worker.register(runtime, "worker", lambda: Worker(seconds))
    await Coordinator.register(runtime, "coordinator", lambda: Coordinator(dag, finished))
    await runtime.add_subscription(TypeSubscription(topic_type="task", agent_type="worker"))
    await runtime.add_subscription(TypeSubscription(topic_type="done", agent_type="coordinator"))
    runtime.start()
    try:
        started = time.perf_counter()
        for node in dag.nodes:
            if not node.deps:
                await runtime.publish_message(Task(node.id), TopicId("task", str(node.id)))
        await finished.wait()
        wall = time.perf_counter() - started
    finally:
        await runtime.stop_when_idle()
    return wall
