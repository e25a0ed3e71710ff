"""An agent process for the tests of recorded calls (tests/agent_client/test_replay.py).

A fake model (random text from a seed) writes each notification, a tool sends it to
the outside world (a line appended to a file: an external effect, keyed by step),
and the agent checkpoints after every step. With a crash step it kills itself with
SIGKILL right after that step's notification went out, before its checkpoint. It
prints what it believes it sent as JSON. The TLS settings come from the environment.

    python -m tests.support.replay_agent ADDRESS DATA_DIR WORLD_FILE SEED REPLAY STEPS CRASH_STEP
"""
from __future__ import annotations

import json
import os
import random
import signal
import sys

from agent_client import connect


def main(address: str, data_dir: str, world: str, seed: str, replay: str, steps: str, crash_step: str) -> None:
    rng = random.Random(int(seed))

    def model(prompt: str) -> dict[str, str]:
        return {"text": f"{rng.getrandbits(64):016x}"}

    def notify(text: str) -> str:
        with open(world, "a") as out:
            out.write(text + "\n")
        return text

    with connect(address, data_dir=data_dir) as rp:
        group = rp.group("team", mode="bcs", create=True)
        horizon = int(replay) if replay.isdigit() else replay
        with group.agent("writer", state={"said": []}, replay=horizon, background=False) as me:
            ask = me.recorded("model", model)
            while len(me.state["said"]) < int(steps):
                with me.atomic():
                    step = len(me.state["said"])
                    text = ask(f"notification {step}")["text"]
                    me.client.side_effect(f"notify-{step}", lambda: notify(text))
                    if step == int(crash_step):
                        os.kill(os.getpid(), signal.SIGKILL)
                    me.state = {"said": me.state["said"] + [text]}
                    me.checkpoint()
            print(json.dumps({"said": me.state["said"]}))


if __name__ == "__main__":
    main(*sys.argv[1:])
