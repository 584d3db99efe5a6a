"""A worker as another language might write it, that takes a task and never answers.

``python -m tests.durability.silent_worker ROLE``: binds the role's work consumer, claims
the first task it gets, acknowledges it, and then does nothing (NATS_URL, PLANCAST_PREFIX
from the environment). Prints ``READY`` once it pulls and ``TOOK <run>/<step>`` after.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

import nats
from nats.js import api


async def main(role: str) -> None:
    prefix = os.environ["PLANCAST_PREFIX"]
    nc = await nats.connect(os.environ["NATS_URL"])
    js = nc.jetstream()
    stream = f"{prefix.replace('.', '_').upper()}_WORK"
    psub = await js.pull_subscribe(
        f"{prefix}.step.{role}", durable=f"step-{role}", stream=stream,
        config=api.ConsumerConfig(ack_policy=api.AckPolicy.EXPLICIT, ack_wait=30.0))
    print("READY", flush=True)
    while True:
        try:
            [msg] = await psub.fetch(1, timeout=1.0)
        except TimeoutError:
            continue
        task = json.loads(msg.data)
        claim = {"type": "step.claimed", "run_id": task["run_id"], "step_id": task["step"]["id"],
                 "attempt": task["attempt"], "executor": f"{role}/silent", "delivery": 1,
                 "nonce": task.get("nonce", "")}
        await js.publish(f"{prefix}.result.{task['run_id']}.{role}", json.dumps(claim).encode())
        await msg.ack()
        print(f"TOOK {task['run_id']}/{task['step']['id']}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
