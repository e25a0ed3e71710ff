"""One process per data directory, enforced by an exclusive lock that names its holder.

Two coordinators on one data dir both accepted writes and corrupted it: the
journal, the term file and the store assume a single writer. The lock is an
flock(2) on `LOCK` inside the directory, so the kernel drops it when the holder
dies, however it dies (no stale lock to clean up after kill -9); the file holds
the holder's PID only so the refusal can name it. `raftpoint cluster up` holds one
on the cluster's directory too, so a second one on it stops before it writes anything.
"""
from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

LOCK_FILE = "LOCK"


# The holder writes its PID just after it takes the lock: a refusal in between waits
# this long at most to name it.
HOLDER_PID_WAIT_S = 1.0


def _holder_pid(fd: int) -> str:
    deadline = time.monotonic() + HOLDER_PID_WAIT_S
    while True:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip()
        if pid or time.monotonic() >= deadline:
            return pid or "unknown"
        time.sleep(0.01)


class DataDirInUse(OSError):
    """Another live process holds the data directory; the message names its PID."""


class DataDirLock:
    """Held from acquire() until release() (or the process's end). `holder` and `advice`
    word the refusal for whoever else wants the directory."""

    def __init__(self, data_dir: str | Path, *, holder: str = "another coordinator",
                 advice: str = "stop it first, or give this node its own --data-dir") -> None:
        self.path = Path(data_dir) / LOCK_FILE
        self.holder, self.advice = holder, advice
        self._fd: int | None = None

    def acquire(self) -> "DataDirLock":
        """Take the lock or raise DataDirInUse (never queues for it: a second node on
        the same directory is an operator's mistake to report; it only waits, briefly,
        for a holder that has just taken the lock to write its PID)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder_pid(fd)
            os.close(fd)
            raise DataDirInUse(f"data dir {self.path.parent} is in use by {self.holder} (PID {holder}; "
                               f"lock file {self.path}): {self.advice}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = None

    def __enter__(self) -> "DataDirLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
