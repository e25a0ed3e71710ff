"""The node's TLS files: what start-up refuses, and what a reload takes or leaves."""
from __future__ import annotations

import datetime as dt
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
    now = dt.datetime.now(dt.timezone.utc)
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
