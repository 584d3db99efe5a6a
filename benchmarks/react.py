"""The sequential ReAct-style baseline: one model round trip per tool call, then an answer.

It talks to the same scripted server through ``runtime.models.client.ModelClient`` and calls the
same tools with the same drawn times as the plancast runs, one after another.
"""

from __future__ import annotations

import json
import time

from runtime.config import ModelSettings
from runtime.models import ChatMessage, ModelClient
from runtime.tools import ToolRegistry


class ReactScriptError(RuntimeError):
    """The scripted model did not answer the way the baseline expects."""


async def run_react(base_url: str, goal: str, tools: ToolRegistry, max_calls: int) -> float:
    """Run the ReAct loop for ``goal``; returns the wall time in seconds."""
    settings = ModelSettings(model="scripted-model", base_url=base_url, max_retries=0)
    messages: list[ChatMessage] = [
        {"role": "system", "content": "Answer the goal. Call one tool at a time."},
        {"role": "user", "content": goal},
    ]
    specs = tools.specs()
    async with ModelClient(settings, role="react") as model:
        started = time.perf_counter()
        for _ in range(max_calls + 1):
            reply = await model.complete(messages, tools=specs)
            if not reply.tool_calls:
                return time.perf_counter() - started
            call = reply.tool_calls[0]
            output = await tools.run(call.name, json.loads(call.arguments))
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    raise ReactScriptError(f"no final answer after {max_calls} tool calls")
