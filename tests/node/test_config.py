from __future__ import annotations

from pathlib import Path

import pytest

from coordinator import config
from coordinator.config import ConfigError

PW = "a-test-password-of-some-length"
# These tests are about other settings: they run the node plaintext, explicitly (TLS
# settings have their own tests at the end).
PLAIN = {"RAFTPOINT_INSECURE": "1"}


def test_priority_defaults_file_env_flags(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('raft_password = "from-the-toml-file"\nauto_tick_period = 0.02\nleader_fallback_timeout = 3.0\n')
    env = {**PLAIN, "RAFTPOINT_AUTO_TICK_PERIOD": "0.01", "RAFTPOINT_PEERS": "127.0.0.1:7001,127.0.0.1:7002=127.0.0.1:6000"}
    cfg = config.load(str(toml), env=env, flags={"leader_fallback_timeout": 1.5})
    assert cfg.raft_password == "from-the-toml-file"
    assert cfg.auto_tick_period == 0.01
    assert cfg.leader_fallback_timeout == 1.5
    assert [str(p) for p in cfg.peer_list()] == ["127.0.0.1:7001=127.0.0.1:50051", "127.0.0.1:7002=127.0.0.1:6000"]
    assert cfg.grpc_of("127.0.0.1:7002") == "127.0.0.1:6000"
    assert cfg.grpc_of(cfg.raft_address) == cfg.grpc_address


def test_password_is_required() -> None:
    with pytest.raises(ConfigError, match="password"):
        config.load(env={})


def test_password_file(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret-from-a-file\n")
    assert config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD_FILE": str(secret)}).password() == "s3cret-from-a-file"


@pytest.mark.parametrize("env, message", [
    ({"RAFTPOINT_AUTO_TICK_PERIOD": "fast"}, "auto_tick_period"),
    ({"RAFTPOINT_RAFT_ADDRESS": "nohost"}, "raft_address"),
    ({"RAFTPOINT_STORE": "redis"}, "store"),
    ({"RAFTPOINT_PEERS": "127.0.0.1:7000"}, "own raft_address"),
    ({"RAFTPOINT_DYNAMIC_MEMBERSHIP": "maybe"}, "dynamic_membership"),
])
def test_bad_values_are_named(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, **env})


def test_unknown_file_setting_is_rejected_with_a_suggestion(tmp_path: Path) -> None:
    toml = tmp_path / "node.toml"
    toml.write_text('raft_pasword = "typo"\n')
    with pytest.raises(ConfigError, match="'raft_pasword' \\(did you mean 'raft_password'"):
        config.load(str(toml), env={})


def test_statefulset_identity_from_pod_name() -> None:
    env = {**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_STATEFULSET_REPLICAS": "3",
           "RAFTPOINT_HEADLESS_SERVICE": "rp-peers.ns.svc.cluster.local", "RAFTPOINT_POD_NAME": "rp-1"}
    cfg = config.load(env=env)
    assert cfg.raft_address == "rp-1.rp-peers.ns.svc.cluster.local:7000"
    assert cfg.grpc_address == "rp-1.rp-peers.ns.svc.cluster.local:50051"  # bound to the pod IP
    assert [p.raft for p in cfg.peer_list()] == ["rp-0.rp-peers.ns.svc.cluster.local:7000",
                                                 "rp-2.rp-peers.ns.svc.cluster.local:7000"]
    assert cfg.grpc_of("rp-2.rp-peers.ns.svc.cluster.local:7000") == "rp-2.rp-peers.ns.svc.cluster.local:50051"
    with pytest.raises(ConfigError, match="ordinal"):
        config.load(env={**env, "RAFTPOINT_POD_NAME": "coordinator"})


def test_a_misspelled_variable_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError, match="'RAFTPOINT_DNS_CACHE_TIMES' \\(did you mean 'RAFTPOINT_DNS_CACHE_TIME'"):
        config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_DNS_CACHE_TIMES": "5"})


def test_a_retired_setting_is_refused_saying_what_replaced_it() -> None:
    with pytest.raises(ConfigError, match="RAFTPOINT_METRICS_TLS.*retired.*metrics_plaintext"):
        config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_METRICS_TLS": "true"})


def test_variables_of_the_agent_library_are_not_the_nodes_to_refuse() -> None:
    assert config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_AEAD_KEY": "k"}).raft_password == PW



def test_connection_and_call_limits_are_settings_with_bounds() -> None:
    cfg = config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_MAX_CONNECTIONS": "10"})
    assert cfg.max_connections == 10
    with pytest.raises(ConfigError, match="max_rpcs must be between 1"):
        config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_MAX_RPCS": "0"})
    assert config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW,
                            "RAFTPOINT_MAX_UNAUTHENTICATED_PER_SOURCE": "0"}).max_unauthenticated_per_source == 0
    with pytest.raises(ConfigError, match="max_unauthenticated_per_source must be between 0"):
        config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_MAX_UNAUTHENTICATED_PER_SOURCE": "-1"})


def test_tls_or_an_explicit_insecure_is_required() -> None:
    with pytest.raises(ConfigError, match="TLS is required.*--insecure"):
        config.load(env={"RAFTPOINT_RAFT_PASSWORD": PW})
    assert config.load(env={"RAFTPOINT_RAFT_PASSWORD": PW}, flags={"insecure": "true"}).insecure
    cfg = config.load(env={"RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_TLS_CERT_FILE": "n.crt",
                           "RAFTPOINT_TLS_KEY_FILE": "n.key"})
    assert (cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_client_auth) == ("n.crt", "n.key", "none")


@pytest.mark.parametrize("extra, message", [
    ({"RAFTPOINT_TLS_CLIENT_AUTH": "require"}, "needs tls_client_ca_file"),
    ({"RAFTPOINT_TLS_CLIENT_AUTH": "optional"}, "cannot ask for a client certificate without requiring"),
    ({"RAFTPOINT_INSECURE": "1"}, "exclude each other"),
])
def test_tls_settings_that_cannot_work_are_refused(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config.load(env={"RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_TLS_CERT_FILE": "n.crt",
                         "RAFTPOINT_TLS_KEY_FILE": "n.key", **extra})


def test_client_tls_variables_may_share_the_nodes_environment() -> None:
    env = {**PLAIN, "RAFTPOINT_RAFT_PASSWORD": PW, "RAFTPOINT_CA_FILE": "ca.crt", "RAFTPOINT_CERT_FILE": "c.crt",
           "RAFTPOINT_KEY_FILE": "c.key", "RAFTPOINT_SERVER_NAME": "n"}
    assert config.load(env=env).insecure


@pytest.mark.parametrize("password, message", [
    ("", "password is required"),
    ("short-password!", "15 characters, fewer than 16"),
    ("change-me", "example value"),
    ("CHANGE-ME", "example value"),
])
def test_weak_raft_passwords_are_refused(password: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": password})


def test_sixteen_characters_are_enough() -> None:
    assert config.load(env={**PLAIN, "RAFTPOINT_RAFT_PASSWORD": "0123456789abcdef"}).password() == "0123456789abcdef"


def test_there_is_no_password_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """A flag's value is visible to every user in `ps`."""
    from coordinator import main as node_main

    with pytest.raises(SystemExit) as exit_:
        node_main.build_parser().parse_args(["--raft-password", "0123456789abcdef"])
    assert exit_.value.code == 2
    assert "--raft-password is not accepted" in capsys.readouterr().err


def test_a_node_with_the_example_password_stops_with_one_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAFTPOINT_")}
    secret = tmp_path / "pw"
    secret.write_text("change-me\n")
    done = subprocess.run([sys.executable, "-m", "coordinator", "--data-dir", str(tmp_path / "d"),
                           "--raft-password-file", str(secret)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and "example value" in done.stderr
    assert not (tmp_path / "d").exists()


def test_every_coordinator_flag_says_what_it_is_for_its_variable_and_default() -> None:
    import argparse

    from coordinator import config
    parser = argparse.ArgumentParser()
    config.add_flags(parser)
    undocumented = [a.option_strings[0] for a in parser._actions
                    if a.option_strings and a.dest not in ("help", "config") and not a.dest.startswith("_refused_")
                    and not (a.help and f"env RAFTPOINT_{a.dest.upper()};" in a.help and "default:" in a.help
                             and len(a.help.split("(env")[0].strip()) > 10)]
    assert undocumented == [], f"flags without a description, variable or default: {undocumented}"
