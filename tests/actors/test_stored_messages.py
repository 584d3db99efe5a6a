"""What a run stores, message by message: the exact count for a small no-op chain (the
overhead suite reports the same counters per step, ``benchmarks.stored``)."""

from __future__ import annotations

import pytest

from benchmarks.stored import Stored, ended, stored
from runtime.bus import Bus
from runtime.testing import Rule

from .harness import echo, finish, run_team

pytestmark = pytest.mark.anyio

STEPS = 6


def chain(steps: int) -> list[str]:
    return [echo(i, f"out {i}", depends_on=[i - 1] if i > 1 else []) for i in range(1, steps + 1)]


async def test_a_no_op_chain_stores_these_messages_exactly(nats_url: str, prefix: str) -> None:
    """Per step: its task, its result (the claim rides in it: the step ends before its
    claim is due), one event message (started, finished and the next step's dispatched,
    told together), and its finished attempt's two records (the claim-first write, then the
    result, ``actors.finished``). Per run: the synthesis task and decision, seven event
    messages (started, plan, synthesis, end), the fence, and the run-state writes: five
    headers and a record per step (written at the end)."""
    counted: dict[str, int] = {}

    async def after(bus: Bus, run_id: str) -> None:
        await ended(bus, [run_id])  # the last state is written after the end event
        counted.update((await stored(bus)).since(Stored({}, 0)))

    out = await run_team(nats_url, prefix, [Rule(role="planner", lines=chain(STEPS)),
                                            finish("done")], after=after,
                         settings={"claim_after": 60.0})  # every step ends before
    assert out.answer == "done"
    del counted["api"]  # requests, not stored: pull requests vary with timing
    assert counted == {"tasks": STEPS + 1, "outcomes": STEPS + 1, "events": STEPS + 7,
                       "fences": 1, "finished": 2 * STEPS, "state": STEPS + 5, "objects": 0,
                       "errors": 0}
