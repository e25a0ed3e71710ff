"""An LMDB store damaged at rest: a changed value is never returned, a truncated or
garbled file is refused with a message instead of killing the process."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coordinator.storage import lmdb_env
from coordinator.storage.lmdb_store import LmdbStore, StoreDamaged
from coordinator.storage.record_seal import RecordDamaged

MARKER = b'{"marker":"' + b"m" * 64 + b'"}'


def filled(path: Path) -> Path:
    store = LmdbStore(path)
    store.commit({b"k%03d" % i: b'{"v":%d}' % i for i in range(200)} | {b"marked": MARKER}, 1)
    store.close()
    return path / "data.mdb"


def flip_in_marker(data_file: Path) -> None:
    data = bytearray(data_file.read_bytes())
    at = data.find(MARKER)
    assert at > 0
    data[at + 20] ^= 0x01
    data_file.write_bytes(bytes(data))


def test_a_changed_value_is_never_returned(tmp_path: Path) -> None:
    flip_in_marker(filled(tmp_path / "db"))
    reported: list[str] = []
    store = LmdbStore(tmp_path / "db", on_damage=reported.append)
    assert store.get(b"k001") == b'{"v":1}'
    with pytest.raises(RecordDamaged, match="marked.*does not match its checksum"):
        store.get(b"marked")
    with pytest.raises(RecordDamaged):
        store.scan(b"ma")
    with pytest.raises(RecordDamaged):
        store.digest()
    assert len(reported) == 3 and "Rebuild this node from its peers" in reported[0]


def test_verifying_at_open_finds_a_changed_value_before_anything_is_served(tmp_path: Path) -> None:
    flip_in_marker(filled(tmp_path / "db"))
    with pytest.raises(StoreDamaged, match="marked.*does not match its checksum"):
        LmdbStore(tmp_path / "db", verify_at_open=True)
    assert LmdbStore(filled(tmp_path / "sound").parent, verify_at_open=True).get(b"marked") == MARKER


def open_in_child(path: Path, verify: bool) -> subprocess.CompletedProcess:
    """Opening and reading in a child: without the checks, this damage ends the process."""
    program = ("import sys; from coordinator.storage.lmdb_store import LmdbStore, StoreDamaged\n"
               "try:\n"
               f"    s = LmdbStore(sys.argv[1], verify_at_open={verify}); s.digest()\n"
               "except StoreDamaged as exc:\n"
               "    print('refused:', exc); sys.exit(3)\n")
    return subprocess.run([sys.executable, "-c", program, str(path)], capture_output=True, text=True, timeout=120)


def test_a_truncated_file_is_refused_with_its_sizes_not_a_sigbus(tmp_path: Path) -> None:
    data_file = filled(tmp_path / "db")
    data = data_file.read_bytes()
    data_file.write_bytes(data[:len(data) // 2])
    done = open_in_child(tmp_path / "db", verify=False)
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert "truncated LMDB file" in done.stdout and "Rebuild this node" in done.stdout


def test_a_garbage_page_is_refused_with_a_message_not_an_abort(tmp_path: Path) -> None:
    data_file = filled(tmp_path / "db")
    data = bytearray(data_file.read_bytes())
    psize = 4096
    data[2 * psize:len(data)] = bytes((i * 167 + 13) % 256 for i in range(len(data) - 2 * psize))
    data_file.write_bytes(bytes(data))
    done = open_in_child(tmp_path / "db", verify=True)
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert "is damaged" in done.stdout and "Rebuild this node" in done.stdout


def test_values_stored_before_seals_are_read_and_digest_the_same(tmp_path: Path) -> None:
    sealed = LmdbStore(tmp_path / "sealed")
    sealed.commit({b"a": b'{"v":1}', b"b": b'{"v":2}'}, 3)
    old = tmp_path / "old"
    LmdbStore(old).close()
    env = lmdb_env.open_env(old, map_size=1 << 20)
    with env.begin(write=True) as txn:
        txn.put(b"a", b'{"v":1}', db=env.open_db(b"data", txn=txn))
        txn.put(b"b", b'{"v":2}', db=env.open_db(b"data", txn=txn))
        txn.put(b"applied_index", (3).to_bytes(8, "big"), db=env.open_db(b"meta", txn=txn))
    env.close()
    unsealed = LmdbStore(old, verify_at_open=True)
    assert unsealed.get(b"a") == b'{"v":1}'
    assert unsealed.digest_with_index() == sealed.digest_with_index()
