"""The checkpointing rules' state across a checkpoint and its restore."""
from __future__ import annotations

import dataclasses
import json

import pytest

from agent_client.rules import rule_for
from coordinator.api.v1 import coordinator_pb2 as pb

MEMBERS = ("a", "b", "c")


@pytest.mark.parametrize("mode", [pb.CIC_BCS, pb.CIC_FDAS, pb.CIC_HMNR])
def test_a_restored_rule_is_the_rule_just_past_its_checkpoint(mode: int) -> None:
    """The protocol saves the rule before on_checkpoint; a restore must land where the
    live agent was right after the checkpoint, or a vector clock one checkpoint behind
    lets a Z-cycle through (found by the model checker: tests/modelcheck)."""
    live = rule_for(mode, "a", MEMBERS)
    peer = rule_for(mode, "b", MEMBERS)
    live.on_deliver("b", peer.on_send("a"))
    live.on_send("c")
    saved = json.loads(json.dumps(live.to_json()))  # what the checkpoint blob holds
    live.on_checkpoint(1)
    restored = rule_for(mode, "a", MEMBERS)
    restored.load_json(saved, 1)
    assert dataclasses.asdict(restored.state) == dataclasses.asdict(live.state)
