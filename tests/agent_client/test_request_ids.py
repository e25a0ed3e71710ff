"""An agent's request ids: the same for one write on every retry, different for any
two writes, and nothing in one id seen that tells the next ones."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agent_client.effects import Effect, Rpc
from agent_client.request_ids import RequestIds
from coordinator.api.v1 import coordinator_pb2 as pb
from tests.agent_client.test_protocol import Agent, Coordinator

ID = re.compile(r"(reg|dereg|cp|deps|ack)-[0-9a-f]{32}")


def ack(epoch: int = 0, order_id: int = 1) -> pb.AckOrderRequest:
    return pb.AckOrderRequest(group="g", agent_id="a", order_id=order_id,
                              token=pb.FencingToken(incarnation=1, epoch=epoch, secret=b"s" * 16))


def test_one_write_has_one_id_and_any_other_write_another() -> None:
    ids = RequestIds()
    first = ids.stamp("ack", ack()).request_id
    assert ID.fullmatch(first), first
    assert ids.stamp("ack", ack()).request_id == first
    assert ids.stamp("ack", ack(epoch=1)).request_id != first  # rebuilt with a newer token: a new write
    assert ids.stamp("ack", ack(order_id=2)).request_id != first
    assert ids.stamp("ack", ack(), nonce=2).request_id != first
    assert RequestIds().stamp("ack", ack()).request_id != first  # another client instance
    assert RequestIds(b"k" * 32).stamp("ack", ack()).request_id == RequestIds(b"k" * 32).stamp("ack", ack()).request_id


class Recording(Coordinator):
    """Records the request id of every write; fails the first dependency report with an
    unknown outcome when `lose_first_report` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Any] = []
        self.lose_first_report = False

    def perform(self, agent: str, effect: Effect) -> Any:
        if isinstance(effect, Rpc) and hasattr(effect.request, "request_id"):
            self.requests.append(effect.request)
            if effect.method == "ReportDependencies" and self.lose_first_report:
                self.lose_first_report = False
                raise TimeoutError("outcome unknown")
            if effect.method == "Deregister":
                return pb.DeregisterResponse()
        return super().perform(agent, effect)


def _common_run(a: str, b: str, length: int = 8) -> bool:
    return any(a[i:i + length] in b for i in range(len(a) - length + 1))


def test_an_id_seen_shares_nothing_with_the_agents_other_ids(tmp_path: Path) -> None:
    coordinator = Recording()
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    for _ in range(2):
        assert a.receive(b.send(a, 1))
        a.run(a.core.checkpoint())
    a.run(a.core.close(deregister=True))
    ids = [r.request_id for r in coordinator.requests]
    assert [i.split("-")[0] for i in ids] == ["reg", "reg", "deps", "cp", "deps", "cp", "dereg"]
    assert all(ID.fullmatch(i) for i in ids), ids
    bodies = [i.split("-")[1] for i in ids]
    shared = [(x, y) for n, x in enumerate(bodies) for y in bodies[n + 1:] if _common_run(x, y)]
    assert shared == [], f"ids share a part an observer could reuse: {ids}"


def test_a_report_whose_outcome_is_unknown_is_sent_again_unchanged(tmp_path: Path) -> None:
    """Its id and its content both: a report rebuilt with a newer epoch under the same
    id would be refused as a reused id, and one under a new id might apply twice."""
    coordinator = Recording()
    a, b = Agent(coordinator, tmp_path, "a"), Agent(coordinator, tmp_path, "b")
    coordinator.lose_first_report = True
    with pytest.raises(TimeoutError):
        a.receive(b.send(a, 1))
    a.core.epoch += 1  # the agent moved on meanwhile
    a.run(a.core.flush_dependencies())
    lost, resent = coordinator.requests[-2:]
    assert resent == lost and resent.token.epoch == 0, (lost, resent)
