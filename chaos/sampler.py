"""Node samples: which content each node holds at which applied index.

Each sample is one node's (digest_index, content_digest) pair, read in one store
transaction, recorded as a note of process "sampler". The checker requires equal
digests for equal indexes across nodes and, after the faults heal, one final
sample in which every node holds the same index and digest.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

from chaos.history import History, Op
from coordinator.harness.local_cluster import node_status, wait_for

SAMPLER = "sampler"
SAMPLE, FINAL = "node_status", "final_status"
T = TypeVar("T")


def sample(history: History, endpoint: str, timeout: float) -> dict | None:
    """Record and return one node's status; None when it does not answer in time."""
    status = node_status(endpoint, timeout)
    if status is None:
        return None
    value = {"digest_index": status.digest_index, "content_digest": status.content_digest,
             "applied_index": status.applied_index, "commit_index": status.commit_index,
             "role": status.role, "term": status.term}
    history.note(SAMPLER, SAMPLE, value, node=endpoint)
    return value


class NodeSampler:
    """Samples every node every `period` seconds until stopped (a paused or killed node
    simply has no sample for that round)."""

    def __init__(self, history: History, endpoints: Sequence[str], period: float = 0.25,
                 timeout: float = 0.5) -> None:
        self.history, self.endpoints, self.period, self.timeout = history, list(endpoints), period, timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)

    def start(self) -> "NodeSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for endpoint in self.endpoints:
                sample(self.history, endpoint, self.timeout)
            self._stop.wait(self.period)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def await_convergence(history: History, endpoints: Sequence[str], timeout: float = 30.0,
                      possible: Callable[[], bool] = lambda: True) -> Op:
    """Sample all nodes until they hold the same index and digest, or until that can no
    longer come (or `timeout` passes); then record the verdict as a `final_status`
    note with the last round's samples.

    It cannot come once two nodes hold one index with different digests (those samples
    are in the history, so replicas-agree fails whatever a later round shows) or once
    `possible()` says so (a node's process is gone and answers no later round); waiting
    on would only spend the timeout."""
    last: dict[str, dict | None] = {}

    def settled() -> bool:
        last.update({e: sample(history, e, 1.0) for e in endpoints})
        return converged(last) or diverged(last) or not possible()

    try:
        wait_for(settled, "all nodes to hold the same index and digest", timeout, 0.2)
    except TimeoutError:
        pass
    return history.note(SAMPLER, FINAL, {"converged": converged(last), "nodes": last})


def converged(samples: dict[str, dict | None]) -> bool:
    """Every node answered, all at one index with one digest."""
    seen = [s for s in samples.values() if s is not None]
    return len(seen) == len(samples) and len({(s["digest_index"], s["content_digest"]) for s in seen}) == 1


def diverged(samples: dict[str, dict | None]) -> bool:
    """Two nodes answered at one index with different digests."""
    return any(True for _ in disagreements([s for s in samples.values() if s is not None], lambda s: s))


def disagreements(samples: Iterable[T], value: Callable[[T], dict]) -> Iterator[tuple[T, T]]:
    """Each sample whose digest differs from the first sample of its index, after that
    first sample: two replicas that applied one log prefix to different content."""
    first_at: dict[int, T] = {}
    for s in samples:
        earlier = first_at.setdefault(value(s)["digest_index"], s)
        if value(earlier)["content_digest"] != value(s)["content_digest"]:
            yield earlier, s
