"""The config-typo fault on real auth files: broken for every reader, then put back byte for byte."""
from __future__ import annotations

from pathlib import Path

import pytest

from chaos.config_typo import ConfigTypo
from chaos.scenarios import CONFIG_TYPO, SCENARIOS
from coordinator.harness.local_cluster import write_auth_config
from coordinator.transport.auth import AuthConfigError, WatchedFile, parse_bindings, parse_tokens


def test_the_typo_breaks_both_files_while_nodes_keep_the_last_good_version_and_heal_restores_them(
        tmp_path: Path) -> None:
    settings, _ = write_auth_config(tmp_path)
    bindings, tokens = Path(settings["auth_bindings_file"]), Path(settings["auth_tokens_file"])
    before = {bindings: bindings.read_bytes(), tokens: tokens.read_bytes()}
    watched = {bindings: WatchedFile(str(bindings), parse_bindings), tokens: WatchedFile(str(tokens), parse_tokens)}
    good = {path: w.current() for path, w in watched.items()}

    typo = ConfigTypo(bindings, tokens)
    typo.inject()
    for path, parse in ((bindings, parse_bindings), (tokens, parse_tokens)):
        with pytest.raises(AuthConfigError):
            parse(path.read_text(), str(path))
        assert watched[path].current() == good[path] and watched[path].problem, path
    typo.heal()
    assert {path: path.read_bytes() for path in before} == before
    assert all(w.current() == good[path] and not w.problem for path, w in watched.items())


def test_a_cluster_without_auth_files_cannot_have_the_fault() -> None:
    with pytest.raises(ValueError, match="auth files"):
        ConfigTypo(None, None).inject()


def test_every_typo_of_the_scenario_outlasts_its_flood_s_lease() -> None:
    """Else a coordinator that stopped granting on a broken file would lose no agent."""
    scenario = SCENARIOS["config-typo"]
    assert scenario.flood and scenario.flood_lease_ttl_s is not None
    for seed in range(20):
        plan = scenario.faults(seed, 12.0) + scenario.faults(seed, 60.0)
        assert plan and all(f.kind == CONFIG_TYPO and f.hold > scenario.flood_lease_ttl_s for f in plan), plan
