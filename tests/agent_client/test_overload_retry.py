"""The client retries an overloaded node's refusal no sooner than its hint, and only that
RESOURCE_EXHAUSTED: a dependency quota is final."""
from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from agent_client import connection
from agent_client.connection import Connection, Rejected, overload_hint


class Refusal(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...]) -> None:
        self._code, self._trailers = code, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "refused"

    def trailing_metadata(self):
        return self._trailers


OVERLOADED = Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED,
                     (("raftpoint-reason", "REASON_OVERLOADED"), ("raftpoint-retry-after", "0.3")))
QUOTA = Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, (("raftpoint-reason", "REASON_DEPENDENCY_QUOTA"),))


def test_only_an_overloaded_nodes_refusal_carries_a_hint() -> None:
    assert overload_hint(OVERLOADED) == 0.3
    assert overload_hint(QUOTA) is None
    bad_hint = Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, (("raftpoint-reason", "REASON_OVERLOADED"),
                                                           ("raftpoint-retry-after", "soon")))
    assert overload_hint(bad_hint) == 0.0  # retried, after the backoff alone


def test_the_wait_is_at_least_the_hint() -> None:
    for attempt in range(1, 5):
        state = SimpleNamespace(attempt_number=attempt, outcome=SimpleNamespace(exception=lambda: OVERLOADED))
        assert 0.3 <= connection._wait(state) <= 0.45  # the hint, spread over 1-1.5x; the backoff is shorter


def test_a_shed_call_is_retried_and_a_quota_is_final(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = [OVERLOADED, OVERLOADED, "done"]
    waits: list[float] = []
    monkeypatch.setattr(connection, "_wait", lambda state: waits.append(connection._backoff(state)) or 0.0)
    with Connection(["127.0.0.1:1"], deadline=5) as conn:
        def attempt():
            answer = answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return answer
        assert conn._with_retries(attempt, "test", 5) == "done" and len(waits) == 2

        def quota():
            raise QUOTA
        with pytest.raises(Rejected) as refused:
            conn._with_retries(quota, "test", 5)
        assert refused.value.reason_name == "REASON_DEPENDENCY_QUOTA"
