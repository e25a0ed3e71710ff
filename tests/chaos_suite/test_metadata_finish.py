"""The metadata workload's finish: each outcome still unknown is re-sent once while
the cluster can answer it, and not at all once most node processes are gone (no
leader can be elected, so each re-send would wait out the call's whole deadline)."""
from __future__ import annotations

import pytest

from chaos.history import INVOKE, History
from chaos.workloads import metadata_ops as ops
from chaos.workloads.metadata import MetadataConfig, MetadataWorkload
from coordinator.harness.local_cluster import free_ports

pytestmark = pytest.mark.slow  # each finish waits out its final reads against ports nothing listens on
CONFIG = MetadataConfig(modes=("COORDINATED",), deadline_s=0.5, rpc_timeout_s=0.2, final_deadline_s=0.5)


def finish_with_one_unknown(nodes_running: int) -> list:
    """A workload against three loopback ports nothing listens on (a 3-node cluster,
    `nodes_running` of whose processes run), one of whose processes holds one unknown
    request; the re-sends finish made of it."""
    history = History()
    workload = MetadataWorkload(history, [f"127.0.0.1:{port}" for port in free_ports(3)], CONFIG)
    proc = workload._process("p0")
    request = ops.start_epoch("run-p0-1", next(iter(workload.groups)))
    first = proc.send(request)
    workload.sampler.start()
    assert [s.invoke_index for s in proc.unresolved] == [first.invoke.index], "the unanswered start_epoch is unknown"
    workload.finish(convergence_timeout=0.5, nodes_running=lambda: nodes_running)
    return [op for op in history.ops if op.type == INVOKE and op.value.get("retry_of") == first.invoke.index]


@pytest.mark.parametrize("nodes_running, resends", [(3, 1), (2, 1), (1, 0)])
def test_unknown_outcomes_are_re_sent_only_while_most_nodes_run(nodes_running: int, resends: int) -> None:
    sent_again = finish_with_one_unknown(nodes_running)
    assert len(sent_again) == resends, sent_again
