from __future__ import annotations

import pytest

from raftpoint.cli.main import main
from coordinator.sim.engine import PROTOCOLS, simulate


@pytest.mark.parametrize("topology", ["random", "ring", "star", "pipeline"])
def test_cic_and_coordinated_never_leave_useless_checkpoints(topology: str) -> None:
    for protocol in ("coordinated", "bcs", "hmnr", "fdas"):
        result = simulate(6, topology, protocol, 120, 0.4, 10, seed=3)
        assert result.useless == 0, (protocol, result)
        assert result.basic > 0 and result.messages > 0


def test_uncoordinated_random_traffic_shows_the_domino_effect() -> None:
    none = simulate(8, "random", "none", 150, 0.4, 10, seed=2)
    bcs = simulate(8, "random", "bcs", 150, 0.4, 10, seed=2)
    assert none.useless > 0
    assert none.rollback > bcs.rollback
    assert none.forced == 0 and bcs.forced > 0


def test_deterministic_for_a_seed() -> None:
    assert simulate(5, "random", "bcs", 80, 0.5, 7, seed=11) == simulate(5, "random", "bcs", 80, 0.5, 7, seed=11)


def test_cli_prints_every_protocol_and_rejects_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--agents", "4", "--steps", "60"]) == 0
    out = capsys.readouterr().out
    assert all(p in out for p in PROTOCOLS)
    assert main(["simulate", "--agents", "1"]) == 2
    assert "agents >= 2" in capsys.readouterr().err
