"""pysyncobj's internals are reached through one module, for one version, patched only on request."""
from __future__ import annotations

import ast
import logging
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from pysyncobj import syncobj as pysyncobj_syncobj

from coordinator.replication import pysyncobj_adapter

ROOT = Path(__file__).resolve().parents[2]
PRIVATE_PREFIX = "_SyncObj__"
ADAPTER = ROOT / "coordinator" / "replication" / "pysyncobj_adapter.py"


def drop_false_alarm_filters() -> list[logging.Filter]:
    return [f for f in logging.getLogger("pysyncobj.syncobj").filters if isinstance(f, pysyncobj_adapter._DropFalseAlarm)]


def private_uses(path: Path) -> list[int]:
    """Lines of `path` naming a SyncObj private attribute, in code (not in comments or docstrings)."""
    tree = ast.parse(path.read_text(), str(path))
    return sorted({node.lineno for node in ast.walk(tree)
                   if isinstance(node, ast.Attribute) and node.attr.startswith(PRIVATE_PREFIX)
                   or isinstance(node, ast.Name) and node.id.startswith(PRIVATE_PREFIX)
                   or isinstance(node, ast.Constant) and isinstance(node.value, str)
                   and node.value.startswith(PRIVATE_PREFIX)})


def test_only_the_adapter_names_syncobj_private_attributes() -> None:
    assert private_uses(ADAPTER), "the scan finds nothing in the one module known to use them"
    offenders = {str(path.relative_to(ROOT)): lines
                 for package in ("coordinator", "chaos", "agent_client", "raftpoint")
                 for path in sorted((ROOT / package).rglob("*.py"))
                 if path != ADAPTER and (lines := private_uses(path))}
    assert offenders == {}


def test_importing_the_node_patches_nothing_until_install() -> None:
    script = """
import logging
from pysyncobj import syncobj
factory = syncobj.createJournal
import coordinator.main
import coordinator.replication.node
assert syncobj.createJournal is factory, "patched on import"
assert logging.getLogger("pysyncobj.syncobj").filters == [], "log filter added on import"
from coordinator.replication import pysyncobj_adapter
pysyncobj_adapter.install()
assert syncobj.createJournal is pysyncobj_adapter.create_journal
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_install_is_idempotent() -> None:
    pysyncobj_adapter.install()
    pysyncobj_adapter.install()
    assert pysyncobj_syncobj.createJournal is pysyncobj_adapter.create_journal
    assert len(drop_false_alarm_filters()) == 1


def test_another_pysyncobj_version_is_refused_before_anything_is_patched(monkeypatch: pytest.MonkeyPatch) -> None:
    original = object()
    monkeypatch.setattr(pysyncobj_syncobj, "createJournal", original)
    logger = logging.getLogger("pysyncobj.syncobj")
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(metadata, "version", lambda name: "0.3.18" if name == "pysyncobj" else "?")
    with pytest.raises(pysyncobj_adapter.UnsupportedPysyncobj, match=r"pysyncobj 0\.3\.18 is installed.*0\.3\.17"):
        pysyncobj_adapter.install()
    assert pysyncobj_syncobj.createJournal is original and logger.filters == []


def test_a_missing_pysyncobj_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    with pytest.raises(pysyncobj_adapter.UnsupportedPysyncobj, match="pysyncobj none is installed"):
        pysyncobj_adapter.check_version()


def test_the_supported_version_is_the_installed_one() -> None:
    pysyncobj_adapter.check_version()
    assert metadata.version("pysyncobj") == pysyncobj_adapter.SUPPORTED_VERSION


def test_the_false_truncation_alarm_is_dropped_and_other_records_kept() -> None:
    pysyncobj_adapter.install()
    logger = logging.getLogger("pysyncobj.syncobj")
    alarm = logger.makeRecord(logger.name, logging.CRITICAL, __file__, 0,
                              "truncating already-applied log entries from index %d", (3,), None)
    other = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, "leader changed", (), None)
    assert not logger.filter(alarm) and logger.filter(other)


def test_the_node_command_reports_an_unsupported_pysyncobj(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator import main as node_main

    monkeypatch.setattr(metadata, "version", lambda name: "0.4.0")
    monkeypatch.setenv("RAFTPOINT_RAFT_PASSWORD", "a-password-long-enough")
    data = tmp_path / "node"
    # --insecure: the version check is under test, not the transport
    code = node_main.main(["--raft-address", "127.0.0.1:1", "--grpc-address", "127.0.0.1:2",
                           "--data-dir", str(data), "--store", "memory", "--insecure"])
    assert code == 1
    assert "pysyncobj 0.4.0 is installed" in capsys.readouterr().err
    assert not (data / "raft.journal").exists()


def test_before_authenticating_a_connection_may_announce_only_small_messages() -> None:
    import struct

    from pysyncobj import tcp_server

    pysyncobj_adapter.install()
    assert tcp_server.TcpConnection is pysyncobj_adapter.GuardedConnection
    conn = pysyncobj_adapter.GuardedConnection(poller=None)
    conn.limits = pysyncobj_adapter.RaftPortLimits(unauthenticated_max_bytes=1024)

    def oversized(buffered: bytes) -> bool:
        conn._TcpConnection__readBuffer = buffered
        return conn._oversized() is not None

    assert not oversized(b"") and not oversized(struct.pack("i", 1024) + b"x" * 1024)
    assert oversized(struct.pack("i", 1025)) and oversized(struct.pack("i", -1))
    assert oversized(struct.pack("i", 10) + b"x" * 2000)  # more than one small message before the answer
    conn.sendRandKey = b"k" * 32  # the first message decrypted: pysyncobj's own bound applies
    assert not oversized(struct.pack("i", 24 << 20))
