"""The node's authentication settings: when it runs open, when it refuses to start,
and the tokens and bindings files (coordinator/transport/auth.py)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from coordinator.api.v1 import coordinator_pb2 as pb
from coordinator.core.authz import Grant, Role
from coordinator.core.errors import ReasonCode, Rejection
from coordinator.transport.auth import (AuthConfigError, AuthSettings, Authorizer, WatchedFile, authorizer_for,
                                        certificate_identity, parse_bindings, parse_tokens, token_hash)
from coordinator.transport.auth import add_binding, add_token


def test_without_tls_and_identity_source_auth_is_off() -> None:
    assert authorizer_for(AuthSettings()) is None


@pytest.mark.parametrize("settings,says", [
    (AuthSettings(tls=True), "TLS is on but no identity source"),
    (AuthSettings(bindings_file="b.toml"), "no identity source"),
    (AuthSettings(tokens_file="tokens"), "no auth_bindings_file"),
])
def test_settings_that_would_leave_a_node_open_are_refused(settings: AuthSettings, says: str) -> None:
    with pytest.raises(AuthConfigError, match=says):
        authorizer_for(settings)


def test_a_tls_node_with_client_certificates_needs_only_bindings(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text('["node-1.example"]\nrole = "observer"\n')
    assert isinstance(authorizer_for(AuthSettings(bindings_file=str(tmp_path / "b.toml"), tls=True,
                                                  client_certs=True)), Authorizer)


def test_the_certificate_names_the_identity_by_cn_else_first_san() -> None:
    assert certificate_identity({"x509_common_name": [b"alice"], "x509_subject_alternative_name": [b"x"]}) == "alice"
    assert certificate_identity({"x509_subject_alternative_name": [b"spiffe://c/a", b"b"]}) == "spiffe://c/a"
    assert certificate_identity({"transport_security_type": [b"insecure"]}) is None


def test_a_node_refuses_to_start_with_an_identity_source_but_no_bindings(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("")
    # --insecure: the auth settings are under test, and are checked whether or not TLS is on
    env = {**os.environ, "RAFTPOINT_RAFT_PASSWORD": "a-test-password-of-32-characters", "RAFTPOINT_INSECURE": "1"}
    done = subprocess.run([sys.executable, "-m", "coordinator", "--data-dir", str(tmp_path / "d"),
                           "--auth-tokens-file", str(tokens)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no auth_bindings_file" in done.stderr


def test_bindings_parse_and_refuse_what_they_cannot_mean() -> None:
    assert parse_bindings('["w"]\nrole = "agent"\ngroup = "g"\npattern = "a-*"\n') == {
        "w": Grant("w", Role.AGENT, "g", "a-*")}
    for bad in ('["w"]\nrole = "agent"\n', '["w"]\nrole = "root"\n', '["w"]\nrole = "admin"\ngroup = "g"\n',
                '["w"]\nrole = "admin"\ncolour = "red"\n', 'role = "admin"\n'):
        with pytest.raises(AuthConfigError):
            parse_bindings(bad)


def test_tokens_are_stored_hashed_and_rotation_replaces_the_old_one(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    first = add_token(path, "bob")
    assert first not in path.read_text() and token_hash(first) in path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    second = add_token(path, "bob")
    assert [h for _, h in parse_tokens(path.read_text())] == [token_hash(second)]
    kept = add_token(path, "bob", keep_old=True)
    assert [h for _, h in parse_tokens(path.read_text())] == [token_hash(second), token_hash(kept)]


def test_a_watched_file_that_stops_parsing_keeps_its_last_good_version(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "b.toml"
    path.write_text('["a"]\nrole = "admin"\n["b"]\nrole = "observer"\n')
    watched = WatchedFile(str(path), parse_bindings)
    assert set(watched.current()) == {"a", "b"}
    unusable = lambda: REGISTRY.get_sample_value("raftpoint_auth_file_unusable", {"file": str(path)})  # noqa: E731
    assert unusable() == 0
    path.write_text('["a"]\nrole = "admin"\n["b"] = nonsense')  # a typo
    with caplog.at_level(logging.ERROR):
        for _ in range(5):
            assert set(watched.current()) == {"a", "b"}, "a typo revoked the grants in force"
    assert len([r for r in caplog.records if "unusable" in r.getMessage()]) == 1, "logged once per version"
    assert watched.problem and unusable() == 1
    path.unlink()  # gone: the same
    assert set(watched.current()) == {"a", "b"} and unusable() == 1
    path.write_text('["a"]\nrole = "admin"\n')  # fixed, with b's line removed: a revocation
    assert set(watched.current()) == {"a"} and watched.problem == "" and unusable() == 0


def test_adding_a_binding_replaces_the_file_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "b.toml"
    add_binding(path, "a", Role.ADMIN)
    replaced: list[Path] = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append(Path(dst)), real(src, dst))[1])
    add_binding(path, "b", Role.OBSERVER)
    assert replaced == [path] and set(parse_bindings(path.read_text())) == {"a", "b"}


class _Call:
    """The little of a gRPC call's context the Authorizer reads: its metadata and its peer's certificate."""

    def __init__(self, token: str | None = None, certificate_name: str | None = None) -> None:
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._auth = {"x509_common_name": [certificate_name.encode()]} if certificate_name else {}

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return self._auth


def _authorizer(tmp_path: Path, bindings: str) -> tuple[Authorizer, str]:
    tokens = tmp_path / "tokens"
    token = add_token(tokens, "ops")
    (tmp_path / "b.toml").write_text(bindings)
    return Authorizer(str(tmp_path / "b.toml"), str(tokens), client_certs=True), token


def _refusal(authorizer: Authorizer, call: _Call, rpc: str = "CreateGroup") -> Rejection:
    with pytest.raises(Rejection) as refused:
        authorizer.admit(rpc, pb.CreateGroupRequest(spec=pb.GroupSpec(group="g")), call)
    return refused.value


def test_a_certificate_named_like_a_token_does_not_get_the_tokens_role(tmp_path: Path) -> None:
    """Token names and certificate names were one namespace: a client certificate whose CN
    was an admin token's name was that admin. A bare name binds the token of that name if
    there is one; `token:NAME` and `cert:NAME` bind one kind only."""
    authorizer, token = _authorizer(tmp_path, '["ops"]\nrole = "admin"\n["admin"]\nrole = "admin"\n')
    request = pb.CreateGroupRequest(spec=pb.GroupSpec(group="g"))
    assert _refusal(authorizer, _Call(certificate_name="ops")).reason_code is ReasonCode.ROLE_FORBIDS
    assert authorizer.admit("CreateGroup", request, _Call(token=token)) == Grant("token:ops", Role.ADMIN)
    # A certificate name no token has keeps its bare binding, and its principal's form.
    assert authorizer.admit("CreateGroup", request, _Call(certificate_name="admin")) == Grant("admin", Role.ADMIN)
    # A certificate cannot name itself into the tokens' principals.
    assert _refusal(authorizer, _Call(certificate_name="token:ops")).reason_code is ReasonCode.UNAUTHENTICATED


def test_bindings_of_one_kind_bind_that_kind_only(tmp_path: Path) -> None:
    authorizer, token = _authorizer(tmp_path, '["cert:ops"]\nrole = "observer"\n["token:ops"]\nrole = "admin"\n')
    request = pb.CreateGroupRequest(spec=pb.GroupSpec(group="g"))
    assert authorizer.admit("CreateGroup", request, _Call(token=token)).role is Role.ADMIN
    assert authorizer.admit("GetGroup", request, _Call(certificate_name="ops")) == Grant("ops", Role.OBSERVER)
    assert _refusal(authorizer, _Call(certificate_name="ops")).reason_code is ReasonCode.ROLE_FORBIDS
    # A name spelled like another kind's table is not that table's identity.
    assert _refusal(authorizer, _Call(certificate_name="cert:ops"), "GetGroup").reason_code is ReasonCode.ROLE_FORBIDS
    with pytest.raises(AuthConfigError, match="names no one"):
        parse_bindings('["cert:"]\nrole = "admin"\n')


def test_a_bound_value_cannot_close_its_string_and_add_a_table(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    smuggled = '*"\n["token:evil"]\nrole = "admin'
    add_binding(path, "cert:reporter", Role.AGENT, "team", smuggled)
    grants = parse_bindings(path.read_text())
    assert set(grants) == {"cert:reporter"} and grants["cert:reporter"].pattern == smuggled, path.read_text()
