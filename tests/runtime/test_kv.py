"""Reading a bucket's current values leaves no consumer behind for long.

Planners scan the run headers every few seconds; nats-py's watch keeps its consumer five
minutes by default, and a chaos run hit the server's consumer limit that way."""

from __future__ import annotations

import anyio
import pytest

from protocols import runs_bucket
from runtime.bus import WATCH_LINGER, current_values, open_bus
from runtime.config import Settings

pytestmark = pytest.mark.anyio


async def test_reads_do_not_pile_up_consumers(nats_url: str, prefix: str) -> None:
    async with open_bus(Settings(nats_url=nats_url, prefix=prefix)) as bus:
        kv = await bus.js.key_value(runs_bucket(prefix))
        await kv.put("runs.a", b"1")
        for _ in range(5):
            assert set(await current_values(kv, "runs.*")) == {"runs.a"}
        stream = f"KV_{runs_bucket(prefix)}"
        with anyio.fail_after(WATCH_LINGER * 4):
            # The server's consumer count has no event to wait on: poll it.
            while (await bus.js.stream_info(stream)).state.consumer_count:  # noqa: ASYNC110
                await anyio.sleep(0.5)
