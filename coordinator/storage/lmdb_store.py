"""The LMDB store: one durable write transaction per commit.

Every value is stored sealed with a checksum (record_seal) and checked on every
read; the file is checked against its own page count before anything maps it
(a truncated data.mdb was a SIGBUS), and `verify_at_open` reads every record in
a child process first, so a page LMDB cannot parse ends that child (LMDB aborts
on some) instead of the node, and is reported as damage.

Environments are opened by lmdb_env.open_env (which pins the on-disk format). Data and
metadata (applied_index) live in separate named databases of the same file, so a
scan or digest never sees the metadata while a commit still updates both in one
transaction, and the image (a compact copy of data.mdb) carries both.

Threads. The Raft thread commits; gRPC and leader-loop threads read (get/scan)
and status calls take digest()/stats(). Two locks, always taken in this order:
- `_gate` (shared/exclusive): anything running a transaction holds it shared, so
  a long digest() never stalls commits; the few things that must not overlap any
  transaction in this process -- set_mapsize (it remaps), the close/reopen of a
  load_image, close() -- hold it exclusive.
- `_reader_lock`: guards the read transaction that get/scan reuse until the next
  commit (opening one per get cost more than the lookup itself). A commit never
  waits for it: it bumps `_generation`, and the next reader renews a transaction
  older than that. (It used to take the lock to drop the reader; with thousands of
  agents the event loop then queued on the Raft thread for the lock and again for
  the interpreter, a seventh of the leader's time at 5,000 agents.)
"""
from __future__ import annotations

import os
import shutil
import struct
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Mapping

import lmdb

from coordinator import fsutil
from coordinator.locks import SharedExclusiveLock

from coordinator.storage import lmdb_env
from coordinator.storage.digest import content_digest
from coordinator.storage.lmdb_check import verify_in_child
from coordinator.storage.lmdb_env import DATA_FILE, StoreDamaged, check_size
from coordinator.storage.protocol import (REBUILD_FROM_PEERS, ImageError, StoreFullError,
                                          StoreIOError, check_commit, check_scan, scan_from)
from coordinator.storage.record_seal import RecordDamaged, seal, unseal

_APPLIED = b"applied_index"
_U64 = struct.Struct(">Q")
_COPY_CHUNK = 1 << 20

class LmdbStore:
    def __init__(self, path: str | Path, *, map_size: int = 1 << 30, max_map_size: int = 64 << 30,
                 verify_at_open: bool = False, on_damage: Callable[[str], None] | None = None) -> None:
        """`verify_at_open`: read every record (in a child process) before opening;
        `on_damage`: called with the message before a damaged record raises RecordDamaged
        (the node stops there rather than answer without it)."""
        self.path = Path(path)
        self._on_damage = on_damage
        self._map_size = map_size
        self._max_map_size = max(max_map_size, map_size)
        self._gate = SharedExclusiveLock()
        self._reader_lock = threading.Lock()
        self._reader: lmdb.Transaction | None = None
        self._generation = 0  # commits so far: a reader begun before the latest is stale
        self._reader_generation = 0
        self._closed = False
        recover_interrupted_swap(self.path)
        if verify_at_open and (self.path / DATA_FILE).exists():
            verify_in_child(self.path)
        self._open()

    # ---- lifecycle ------------------------------------------------------------------
    def _open(self) -> None:
        fsutil.ensure_dir(self.path)  # a new store's directory entry survives a crash
        try:
            self._env = lmdb_env.open_env(self.path, map_size=self._map_size, sync=True, metasync=True, lock=True)
        except lmdb.Error as exc:
            raise StoreDamaged(f"LMDB store {self.path} cannot be opened: {exc}. {REBUILD_FROM_PEERS}") from None
        try:
            check_size(self.path, self._env)
            self._map_size = self._env.info()["map_size"]  # LMDB raises it to fit a larger file
            self._data = self._env.open_db(b"data")
            self._meta = self._env.open_db(b"meta")
            with self._env.begin(db=self._meta) as txn:
                self._applied = _read_applied(txn)
        except (ImageError, lmdb.Error) as exc:
            self._env.close()
            raise StoreDamaged(f"LMDB store {self.path}: {exc}. {REBUILD_FROM_PEERS}") from None

    def close(self) -> None:
        with self._gate.exclusive(), self._reader_lock:
            if not self._closed:
                self._drop_reader()
                self._env.close()
                self._closed = True

    def _sibling(self, suffix: str) -> Path:
        return _sibling(self.path, suffix)

    # ---- reads ----------------------------------------------------------------------
    @property
    def applied_index(self) -> int:
        return self._applied

    @contextmanager
    def _cached_reader(self) -> Iterator[lmdb.Transaction]:
        with self._reader_lock:
            if self._reader is not None and self._reader_generation != self._generation:
                self._drop_reader()
            if self._reader is None:
                generation = self._generation  # read before begin: a commit in between leaves it stale, never fresh
                self._reader = self._env.begin(db=self._data)
                self._reader_generation = generation
            yield self._reader

    def _drop_reader(self) -> None:
        """Callers hold _reader_lock."""
        if self._reader is not None:
            self._reader.abort()
            self._reader = None

    def _unseal(self, key: bytes, stored: bytes) -> bytes:
        try:
            return unseal(key, stored, self.path)
        except RecordDamaged as exc:
            message = f"{exc}. {REBUILD_FROM_PEERS}"
            if self._on_damage is not None:
                self._on_damage(message)
            raise RecordDamaged(message) from None

    def get(self, key: bytes) -> bytes | None:
        with self._cached_reader() as txn:
            stored = txn.get(key)
        return None if stored is None else self._unseal(key, stored)

    def scan(self, prefix: bytes, start: bytes | None = None,
             limit: int | None = None) -> list[tuple[bytes, bytes]]:
        check_scan(limit)
        out: list[tuple[bytes, bytes]] = []
        with self._cached_reader() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(scan_from(prefix, start)):
                return out
            for k, v in cursor:
                if not k.startswith(prefix) or (limit is not None and len(out) >= limit):
                    break
                out.append((k, v))
        return [(k, self._unseal(k, v)) for k, v in out]

    def digest(self, skip: bytes | None = None) -> str:
        return self.digest_with_index(skip)[1]

    def digest_with_index(self, skip: bytes | None = None) -> tuple[int, str]:
        """One read transaction for both (the index from the meta database, not the
        cached attribute the Raft thread updates after committing), gate shared: safe
        from any thread, never blocks commits."""
        with self._gate.shared(), self._env.begin() as txn:
            applied = _read_applied(txn, self._meta)
            records = ((k, self._unseal(k, v)) for k, v in txn.cursor(db=self._data).iternext())
            return applied, content_digest(records, skip)

    def stats(self) -> dict[str, int]:
        """used_bytes counts live pages (not the file's high-water mark, which never
        shrinks after deletes). capacity_bytes is max_map_size -- the size the map
        may grow to -- because admission control compares used against it;
        map_size_bytes is the current map and file_bytes the high-water mark."""
        with self._gate.shared(), self._env.begin() as txn:
            psize = self._env.stat()["psize"]
            pages = 2  # the two meta pages
            for st in (self._env.stat(), txn.stat(self._data), txn.stat(self._meta)):
                pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
            info = self._env.info()
            return {"entries": txn.stat(self._data)["entries"], "used_bytes": pages * psize,
                    "capacity_bytes": self._max_map_size, "map_size_bytes": info["map_size"],
                    "file_bytes": (info["last_pgno"] + 1) * psize}

    # ---- writes ---------------------------------------------------------------------
    def commit(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        check_commit(self._applied, writes, applied_index)
        while True:
            try:
                with self._gate.shared():
                    self._write_txn(writes, applied_index)
                break
            except lmdb.MapFullError:  # the txn was aborted: nothing written
                self._grow(len(writes))
            except lmdb.DiskError as exc:  # aborted too; the meta page still names the old root
                raise StoreIOError(f"LMDB store {self.path}: {exc}; nothing was written") from None
            except lmdb.Error as exc:
                # Any other failure of a commit, above all an I/O error from the fsync
                # (a full thin or loop device reports EIO, not ENOSPC): LMDB may have
                # written part of it, so the caller must stop rather than carry on
                # (pysyncobj would log it and tick on with the store behind the log).
                raise StoreIOError(f"LMDB store {self.path}: the commit failed: {exc}") from None
        self._generation += 1  # later reads must see this commit: the next one renews its transaction
        if self._reader_lock.acquire(blocking=False):  # release the old snapshot now if no reader is busy
            try:
                self._drop_reader()
            finally:
                self._reader_lock.release()
        self._applied = applied_index

    def _write_txn(self, writes: Mapping[bytes, bytes | None], applied_index: int) -> None:
        with self._env.begin(write=True) as txn:  # commits on exit, aborts on any exception
            for k, v in writes.items():
                if v is None:
                    txn.delete(k, db=self._data)
                else:
                    txn.put(k, seal(k, v), db=self._data)
            txn.put(_APPLIED, _U64.pack(applied_index), db=self._meta)

    def _grow(self, n_writes: int) -> None:
        with self._gate.exclusive(), self._reader_lock:
            if self._map_size >= self._max_map_size:
                used = self._env.info()["last_pgno"] + 1
                raise StoreFullError(
                    f"LMDB store {self.path} is full: {used * self._env.stat()['psize'] >> 10} KiB of pages "
                    f"in a map already at its ceiling of {self._max_map_size >> 10} KiB, and a commit of "
                    f"{n_writes} writes does not fit; nothing was written. Raise max_map_size_mb "
                    f"(--max-map-size-mb, RAFTPOINT_MAX_MAP_SIZE_MB) and make sure the disk has room.")
            self._drop_reader()
            self._map_size = min(self._map_size * 2, self._max_map_size)
            self._env.set_mapsize(self._map_size)

    # ---- images (Raft snapshots) ----------------------------------------------------
    def write_image(self, fileobj: BinaryIO) -> int:
        """A compact copy of data.mdb at fileobj's position. copyfd write()s at the
        descriptor's offset (verified with lmdb 3.0.0), so a real file gets the copy
        directly; anything else (BytesIO, pipes) goes through a temporary file."""
        with self._gate.shared():
            try:
                pos = fileobj.tell()
                fileobj.flush()
                fd = fileobj.fileno()
                os.lseek(fd, pos, os.SEEK_SET)  # a buffered reader may have read ahead
            except (OSError, AttributeError, ValueError):  # io.UnsupportedOperation is both
                return self._write_image_via_temp(fileobj)
            self._env.copyfd(fd, compact=True)
            end = os.lseek(fd, 0, os.SEEK_CUR)
            fileobj.seek(end)  # resynchronise the Python buffer with the descriptor
            return end - pos

    def _write_image_via_temp(self, fileobj: BinaryIO) -> int:
        with tempfile.TemporaryFile(dir=self.path.parent) as tmp:
            self._env.copyfd(tmp.fileno(), compact=True)
            tmp.seek(0)
            return _copy(tmp, fileobj, None)

    def load_image(self, fileobj: BinaryIO, length: int) -> None:
        """Stream into <path>.incoming, check it, then swap directories.

        Crash safety rests on one ordering: .incoming is complete and durable
        (file, its directory and the parent all fsynced) before the first rename.
        recover_interrupted_swap() relies on exactly that."""
        incoming = self._sibling("incoming")
        _remove_tree(incoming)
        incoming.mkdir()
        try:
            with open(incoming / DATA_FILE, "wb") as out:
                copied = _copy(fileobj, out, length)
                out.flush()
                fsutil.fsync_file(out.fileno())
            if copied != length:
                raise ImageError(f"truncated store image: {copied} of {length} bytes")
            _check_image(incoming)
            fsutil.fsync_dir(incoming)
            fsutil.fsync_dir(self.path.parent)
        except BaseException:
            _remove_tree(incoming)
            raise
        with self._gate.exclusive(), self._reader_lock:
            self._drop_reader()
            self._env.close()
            try:
                old = self._sibling("old")
                self.path.rename(old)
                incoming.rename(self.path)
                fsutil.fsync_dir(self.path.parent)  # the swap is now durable: from here on, new content
                _remove_tree(old)
            finally:  # after a failed rename, the crash-recovery rule picks a whole store
                recover_interrupted_swap(self.path)
                self._open()


def recover_interrupted_swap(path: Path) -> None:
    """Finish or undo a load_image that a crash interrupted. The rule:

    - `path` exists: it is a complete store -- the old one (swap not started) or
      the new one (both renames done) -- so it wins; .incoming (maybe partial)
      and .old (maybe half deleted) are removed.
    - `path` missing, .incoming exists: the first rename (path -> .old) happened,
      which load_image does only once .incoming is complete and durable, so
      .incoming becomes the store.
    - `path` missing, only .old exists: put it back (old content).
    """
    old, incoming = _sibling(path, "old"), _sibling(path, "incoming")
    if not path.exists():
        for candidate in (incoming, old):
            if candidate.exists():
                candidate.rename(path)
                fsutil.fsync_dir(path.parent)
                break
    for leftover in (old, incoming):
        _remove_tree(leftover)


def _check_image(directory: Path) -> None:
    """Open the image read-only before it replaces anything: a truncated or foreign
    file must fail here, not after the old store is gone."""
    try:
        env = lmdb_env.open_env(directory, readonly=True, lock=False)
    except lmdb.Error as exc:
        raise ImageError(f"not an LMDB store image: {exc}") from None
    try:
        check_size(directory, env)
        try:
            env.open_db(b"data", create=False)
            with env.begin(db=env.open_db(b"meta", create=False)) as txn:
                _read_applied(txn)
        except lmdb.Error as exc:
            raise ImageError(f"LMDB image is not a raftpoint store: {exc}") from None
    finally:
        env.close()


def _read_applied(txn: lmdb.Transaction, db: object | None = None) -> int:
    """From `db`, or from the transaction's own database when None."""
    raw = txn.get(_APPLIED, db=db)
    if raw is None:
        return 0
    if len(raw) != _U64.size:
        raise ImageError(f"applied_index record has {len(raw)} bytes, expected {_U64.size}")
    return _U64.unpack(raw)[0]


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(f"{path.name}.{suffix}")


def _remove_tree(path: Path) -> None:
    if path.exists():
        shutil.rmtree(path)


def _copy(src: BinaryIO, dst: BinaryIO, length: int | None) -> int:
    copied = 0
    while length is None or copied < length:
        chunk = src.read(_COPY_CHUNK if length is None else min(_COPY_CHUNK, length - copied))
        if not chunk:
            break
        dst.write(chunk)
        copied += len(chunk)
    return copied
