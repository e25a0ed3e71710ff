"""Read every record of an LMDB store in a child process before the node opens it.

Some damage LMDB cannot survive reading: a garbage page makes it fail an
assertion and abort the process (after a burst of errors), and a page past the
end of a truncated file is a SIGBUS. Both would end the node with no useful
message. A child that reads everything first takes that end instead, and the
parent turns it -- or a record that fails its checksum -- into one readable
StoreDamaged. It costs one sequential read of the store at each start.

    python -m coordinator.storage.lmdb_check STORE_DIR   (exit 0: sound; 65: damaged, with why)
"""
from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import lmdb

from coordinator.storage import lmdb_env
from coordinator.storage.lmdb_env import StoreDamaged, check_size
from coordinator.storage.protocol import EXIT_DAMAGED, REBUILD_FROM_PEERS, DamagedAtRest, ImageError
from coordinator.storage.record_seal import unseal

TIMEOUT_S = 600.0


def check(path: Path) -> int:
    """Every record of the store at `path`, read and unsealed; the count."""
    try:
        env = lmdb_env.open_env(path, readonly=True, lock=False)
    except lmdb.Error as exc:
        raise DamagedAtRest(f"cannot be opened: {exc}") from None
    try:
        check_size(path, env)
        count = 0
        with env.begin() as txn:
            for name in (b"data", b"meta"):
                for key, value in txn.cursor(db=env.open_db(name, txn=txn, create=False)):
                    if name == b"data":
                        unseal(key, value, path)
                    count += 1
        return count
    except (ImageError, lmdb.Error) as exc:
        raise DamagedAtRest(str(exc)) from None
    finally:
        env.close()


def verify_in_child(path: Path) -> None:
    """Raise StoreDamaged unless a child process reads the whole store at `path` cleanly."""
    done = subprocess.run([sys.executable, "-m", __name__, str(path)], capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    if done.returncode == 0:
        return
    if done.returncode < 0:
        why = f"reading it killed the checking process with {signal.Signals(-done.returncode).name}"
    else:
        why = done.stdout.strip() or (done.stderr.strip().splitlines() or ["no message"])[-1]
    raise StoreDamaged(f"LMDB store {path} is damaged: {why}. {REBUILD_FROM_PEERS}")


def main(argv: list[str]) -> int:
    try:
        check(Path(argv[0]))
    except DamagedAtRest as exc:
        print(exc)
        return EXIT_DAMAGED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
