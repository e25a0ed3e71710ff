"""The node's TLS files: what start-up refuses, and what a reload takes or leaves."""
from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import pytest

from coordinator.harness.certs import LocalCA
from coordinator.transport import tls
from coordinator.transport.tls import ServerTLS, TLSMaterialError, _Reloader


def test_good_material_loads_and_names_its_serial(tmp_path: Path) -> None:
    issued = LocalCA.create(tmp_path).server("n")
    material = tls.load(ServerTLS(str(issued.cert_file), str(issued.key_file)))
    assert material.serial == issued.serial


def test_not_yet_valid_and_expired_are_refused(tmp_path: Path) -> None:
    ca = LocalCA.create(tmp_path)
    issued = ca.server("n", valid_for=dt.timedelta(hours=1))
    settings = ServerTLS(str(issued.cert_file), str(issued.key_file))
    now = dt.datetime.now(dt.UTC)
    with pytest.raises(TLSMaterialError, match="expired"):
        tls.load(settings, now=now + dt.timedelta(hours=2))
    with pytest.raises(TLSMaterialError, match="not valid before"):
        tls.load(settings, now=now - dt.timedelta(hours=1))


def test_a_client_ca_file_without_a_certificate_is_refused(tmp_path: Path) -> None:
    issued = LocalCA.create(tmp_path).server("n")
    with pytest.raises(TLSMaterialError, match="tls_client_ca_file"):
        tls.load(ServerTLS(str(issued.cert_file), str(issued.key_file), str(issued.key_file), "require"))


def test_the_reloader_takes_changed_files_only_when_they_check_out(tmp_path: Path) -> None:
    ca = LocalCA.create(tmp_path)
    first = ca.server("n")
    reloader = _Reloader(ServerTLS(str(first.cert_file), str(first.key_file), str(ca.ca_file), "require"))
    assert reloader.fetch() is None  # unchanged files: nothing to do
    stranger_key = LocalCA.create(tmp_path / "x").server("x").key_file.read_bytes()
    first.key_file.write_bytes(stranger_key)  # a key that is not the certificate's
    assert reloader.fetch() is None and reloader.material.serial == first.serial
    second = ca.server("n")
    assert reloader.fetch() is not None and reloader.material.serial == second.serial
    assert reloader.fetch() is None


def replace_with(issued_elsewhere, target) -> None:
    """`issued_elsewhere`'s key, then certificate, in place of `target`'s files (as a renewal writes them)."""
    for source, destination in ((issued_elsewhere.key_file, target.key_file),
                                (issued_elsewhere.cert_file, target.cert_file)):
        temporary = destination.with_name(destination.name + ".new")
        temporary.write_bytes(source.read_bytes())
        temporary.replace(destination)


def test_a_rotation_that_would_fail_the_handshakes_the_served_certificate_passes_is_refused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A valid pair for another host or from another CA was switched to, and every new
    connection then failed; it is kept out, logged and shown, until a good pair comes."""
    from prometheus_client import REGISTRY

    ca = LocalCA.create(tmp_path / "ca")
    first = ca.server("n", ["node-1.example"])
    reloader = _Reloader(ServerTLS(str(first.cert_file), str(first.key_file), str(ca.ca_file), "require",
                                   names=("node-1.example",)))
    unusable = lambda: REGISTRY.get_sample_value("raftpoint_tls_files_unusable")  # noqa: E731
    assert unusable() == 0
    other_host = ca.issue("n", "node-2.example", hosts=["node-2.example"], server=True)
    with caplog.at_level(logging.WARNING):
        assert reloader.fetch() is None and reloader.material.serial == first.serial
    assert "'node-1.example'" in caplog.text and "still serving" in caplog.text and unusable() == 1
    replace_with(LocalCA.create(tmp_path / "rogue").server("x", ["node-1.example"]), first)
    assert reloader.fetch() is None and reloader.material.serial == first.serial, "another CA's certificate"
    renewed = ca.server("n", ["node-1.example"])
    assert reloader.fetch() is not None and reloader.material.serial == renewed.serial != other_host.serial
    assert unusable() == 0


def test_names_the_served_certificate_does_not_pass_for_set_no_rule(tmp_path: Path) -> None:
    """A node whose clients dial another name (or trust another CA) rotates as before."""
    ca = LocalCA.create(tmp_path / "ca")
    first = ca.server("n")
    reloader = _Reloader(ServerTLS(str(first.cert_file), str(first.key_file), str(ca.ca_file), "require",
                                   names=("elsewhere.example",)))
    renewed = ca.issue("n", "other.example", hosts=["other.example"], server=True)
    assert reloader.fetch() is not None and reloader.material.serial == renewed.serial


def test_the_names_to_keep_are_the_grpc_address_host_unless_it_binds_every_address() -> None:
    from coordinator.config import NodeConfig

    def names(grpc_address: str) -> tuple[str, ...]:
        settings = ServerTLS.of(NodeConfig(grpc_address=grpc_address, tls_cert_file="c", tls_key_file="k"))
        assert settings is not None
        return settings.names

    assert names("raftpoint-0.raftpoint-peers:50051") == ("raftpoint-0.raftpoint-peers",)
    assert names("[::1]:50051") == ("::1",)
    assert names("0.0.0.0:50051") == names("[::]:50051") == ()


def test_the_served_certificate_and_client_ca_expiry_are_exported_and_follow_a_rotation(tmp_path: Path) -> None:
    """What the certificate-expiry alert reads: the served certificate's notAfter (a rotation
    that is refused leaves it at the served one), and the client CA file's earliest."""
    from prometheus_client import REGISTRY

    expiry = lambda which: REGISTRY.get_sample_value(  # noqa: E731
        "raftpoint_tls_certificate_expiry_timestamp_seconds", {"certificate": which})
    ca = LocalCA.create(tmp_path)
    first = ca.server("n", valid_for=dt.timedelta(days=2))
    reloader = _Reloader(ServerTLS(str(first.cert_file), str(first.key_file), str(ca.ca_file), "require"))
    assert expiry("node") == reloader.material.not_after.timestamp()
    assert abs(expiry("node") - (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).timestamp()) < 600
    assert abs(expiry("client_ca") - (dt.datetime.now(dt.UTC) + dt.timedelta(days=3650)).timestamp()) < 600
    first.key_file.write_bytes(LocalCA.create(tmp_path / "x").server("x").key_file.read_bytes())
    assert reloader.fetch() is None  # refused: still the first certificate's expiry
    assert expiry("node") == reloader.material.not_after.timestamp()
    ca.server("n", valid_for=dt.timedelta(days=90))
    assert reloader.fetch() is not None
    assert abs(expiry("node") - (dt.datetime.now(dt.UTC) + dt.timedelta(days=90)).timestamp()) < 600


def test_a_refused_rotation_is_said_once_though_two_listeners_follow_the_files(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The metrics port follows the same files as the gRPC port; only the gRPC port's
    watcher reports them, so an operator reads one warning per refused rotation."""
    import ssl

    from coordinator.transport.tls import ContextReloader

    ca = LocalCA.create(tmp_path / "ca")
    first = ca.server("n", ["node-1.example"])
    settings = ServerTLS(str(first.cert_file), str(first.key_file), str(ca.ca_file), "require",
                         names=("node-1.example",))
    grpc_port = _Reloader(settings)
    metrics_port = ContextReloader(settings, lambda t: ssl.create_default_context())
    ca.issue("n", "node-2.example", hosts=["node-2.example"], server=True)
    with caplog.at_level(logging.WARNING):
        assert grpc_port.fetch() is None
        metrics_port()
    warnings = [r.getMessage() for r in caplog.records if "still serving" in r.getMessage()]
    assert len(warnings) == 1, f"the refused rotation was logged {len(warnings)} times: {warnings}"
