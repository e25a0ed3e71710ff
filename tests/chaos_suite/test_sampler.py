"""The final convergence wait: it ends when the nodes agree, and at once when two of
them hold one index with different contents (replicas-agree has failed on those
samples already) or a node's process is gone, but not while the nodes merely stand
at different indexes."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from chaos import sampler
from chaos.history import History
from chaos.invariants import convergence
from chaos.invariants.facts import Facts

NODES = ("n1", "n2", "n3")


def scripted_nodes(monkeypatch: pytest.MonkeyPatch, rounds: list[dict[str, tuple[int, str] | None]]) -> list[str]:
    """Each node answers round i with rounds[i][node] ((index, digest), or None: no
    answer), the last round again once the script runs out; returns the endpoints
    asked, in order."""
    asked: list[str] = []

    def node_status(endpoint: str, timeout: float):
        answer = rounds[min(asked.count(endpoint), len(rounds) - 1)][endpoint]
        asked.append(endpoint)
        if answer is None:
            return None
        index, digest = answer
        return SimpleNamespace(digest_index=index, content_digest=digest, applied_index=index, commit_index=index,
                               role="follower", term=1)

    monkeypatch.setattr(sampler, "node_status", node_status)
    return asked


def verdict(rounds: list[dict], monkeypatch: pytest.MonkeyPatch, timeout: float,
            possible=lambda: True) -> tuple[dict, int, History]:
    asked = scripted_nodes(monkeypatch, rounds)
    history = History()
    final = sampler.await_convergence(history, NODES, timeout, possible)
    return final.value, len(asked) // len(NODES), history


def test_nodes_that_catch_up_are_waited_for_and_converge(monkeypatch: pytest.MonkeyPatch) -> None:
    behind = {"n1": (7, "a"), "n2": (5, "x"), "n3": None}
    caught_up = {"n1": (7, "a"), "n2": (7, "a"), "n3": (7, "a")}
    value, rounds, history = verdict([behind, behind, caught_up], monkeypatch, timeout=30.0)
    assert value["converged"] and rounds == 3, (value, rounds)
    assert convergence.check(Facts(history.ops)).ok


def test_two_contents_at_one_index_end_the_wait_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    split = {"n1": (7, "a"), "n2": (7, "b"), "n3": None}
    value, rounds, history = verdict([split], monkeypatch, timeout=30.0)
    assert not value["converged"] and rounds == 1, (value, rounds)
    result = convergence.check(Facts(history.ops))
    assert not result.ok and any("index 7:" in e["why"] for e in result.examples), result


def test_nodes_that_never_catch_up_are_waited_for_until_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    apart = {"n1": (7, "a"), "n2": (5, "x"), "n3": (7, "a")}
    value, rounds, history = verdict([apart], monkeypatch, timeout=2.0)  # room for a second round when loaded
    assert not value["converged"] and rounds >= 2, (value, rounds)
    result = convergence.check(Facts(history.ops))
    assert not result.ok and [e["why"][:25] for e in result.examples] == ["nodes did not converge af"], result


def test_a_node_whose_process_is_gone_ends_the_wait_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    one_gone = {"n1": (7, "a"), "n2": (7, "a"), "n3": None}
    value, rounds, history = verdict([one_gone], monkeypatch, timeout=30.0, possible=lambda: False)
    assert not value["converged"] and rounds == 1, (value, rounds)
    assert not convergence.check(Facts(history.ops)).ok
