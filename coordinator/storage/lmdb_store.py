"""The LMDB store: one durable write transaction per commit.

`lib_version=0` pins the LMDB 0.9 on-disk format so an upgrade of the wheel can
never silently change it. Data and metadata (applied_index) live in separate
named databases so scans and digests never see the metadata.
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
import threading
from pathlib import Path
from typing import BinaryIO, Mapping

import lmdb

from coordinator.storage.digest import check_monotonic, content_digest
from coordinator.storage.protocol import StoreFullError

_APPLIED = b"applied_index"
_U64 = struct.Struct(">Q")
_COPY_CHUNK = 1 << 20


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LmdbStore:
    def __init__(self, path: str | Path, *, map_size: int = 1 << 30, max_map_size: int = 64 << 30) -> None:
        self.path = Path(path)
        self._map_size = map_size
        self._max_map_size = max(max_map_size, map_size)
        self._lock = threading.RLock()  # guards the env handle across a load_image swap
        self._recover_interrupted_swap()
        self._open()

    # ---- lifecycle ----------------------------------------------------------------
    def _open(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._env = lmdb.open(str(self.path), lib_version=0, subdir=True, map_size=self._map_size, max_dbs=2,
                              sync=True, metasync=True, readahead=False, lock=True)
        self._reader: lmdb.Transaction | None = None
        self._data = self._env.open_db(b"data")
        self._meta = self._env.open_db(b"meta")
        with self._env.begin(db=self._meta) as txn:
            raw = txn.get(_APPLIED)
        self._applied = _U64.unpack(raw)[0] if raw else 0

    def _recover_interrupted_swap(self) -> None:
        """load_image renames path -> .old, then .incoming -> path. After a crash:
        path present: the swap finished (or never started); drop leftovers.
        path missing: .incoming is complete (it was fsynced before the first rename)."""
        old, incoming = self._sibling("old"), self._sibling("incoming")
        if not self.path.exists() and incoming.exists():
            incoming.rename(self.path)
            _fsync_dir(self.path.parent)
        elif not self.path.exists() and old.exists():
            old.rename(self.path)
        for leftover in (old, incoming):
            if leftover.exists():
                shutil.rmtree(leftover)

    def _sibling(self, suffix: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{suffix}")

    def close(self) -> None:
        with self._lock:
            self._drop_reader()
            self._env.close()

    # ---- reads --------------------------------------------------------------------
    @property
    def applied_index(self) -> int:
        return self._applied

    def _read_txn(self) -> lmdb.Transaction:
        """One read transaction reused until the next commit: opening one per get
        cost more than the lookup itself. Callers hold the lock."""
        if self._reader is None:
            self._reader = self._env.begin(db=self._data)
        return self._reader

    def _drop_reader(self) -> None:
        if self._reader is not None:
            self._reader.abort()
            self._reader = None

    def get(self, key: bytes) -> bytes | None:
        with self._lock:
            return self._read_txn().get(key)

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        out: list[tuple[bytes, bytes]] = []
        with self._lock:
            cursor = self._read_txn().cursor()
            if not cursor.set_range(prefix):
                return out
            for k, v in cursor:
                if not k.startswith(prefix):
                    break
                out.append((k, v))
        return out

    def digest(self, skip: bytes | None = None) -> str:
        with self._lock, self._env.begin(db=self._data) as txn:
            return content_digest(txn.cursor().iternext(), skip)

    def stats(self) -> dict[str, int]:
        with self._lock:
            info, stat = self._env.info(), self._env.stat()
            with self._env.begin(db=self._data) as txn:
                entries = txn.stat(self._data)["entries"]
            return {"entries": entries, "used_bytes": (info["last_pgno"] + 1) * stat["psize"],
                    "capacity_bytes": self._max_map_size}

    # ---- writes -------------------------------------------------------------------
    def commit(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        check_monotonic(self._applied, applied_index)
        with self._lock:
            while True:
                try:
                    with self._env.begin(write=True) as txn:
                        for k, v in writes.items():
                            if v is None:
                                txn.delete(k, db=self._data)
                            else:
                                txn.put(k, v, db=self._data)
                        txn.put(_APPLIED, _U64.pack(applied_index), db=self._meta)
                    self._drop_reader()  # later reads must see this commit
                    break
                except lmdb.MapFullError:  # the txn was aborted: nothing written
                    self._drop_reader()
                    if self._map_size >= self._max_map_size:
                        raise StoreFullError(
                            f"LMDB map is full at {self._map_size} bytes (max_map_size_mb "
                            f"{self._max_map_size >> 20}); raise max_map_size_mb or free disk") from None
                    self._map_size = min(self._map_size * 2, self._max_map_size)
                    self._env.set_mapsize(self._map_size)
            self._applied = applied_index

    # ---- images (Raft snapshots) --------------------------------------------------
    def write_image(self, fileobj: BinaryIO) -> int:
        """A compact copy of data.mdb streamed into fileobj at its position."""
        with self._lock, tempfile.TemporaryFile(dir=self.path.parent) as tmp:
            self._env.copyfd(tmp.fileno(), compact=True)
            tmp.seek(0)
            return _copy(tmp, fileobj, None)

    def load_image(self, fileobj: BinaryIO, length: int) -> None:
        incoming, old = self._sibling("incoming"), self._sibling("old")
        if incoming.exists():
            shutil.rmtree(incoming)
        incoming.mkdir(parents=True)
        with open(incoming / "data.mdb", "wb") as out:
            if _copy(fileobj, out, length) != length:
                raise ValueError("truncated store image")
            out.flush()
            os.fsync(out.fileno())
        _fsync_dir(incoming)
        with self._lock:
            self._drop_reader()
            self._env.close()
            self.path.rename(old)
            incoming.rename(self.path)
            _fsync_dir(self.path.parent)
            shutil.rmtree(old)
            self._open()


def _copy(src: BinaryIO, dst: BinaryIO, length: int | None) -> int:
    copied = 0
    while length is None or copied < length:
        chunk = src.read(_COPY_CHUNK if length is None else min(_COPY_CHUNK, length - copied))
        if not chunk:
            break
        dst.write(chunk)
        copied += len(chunk)
    return copied
