"""`raftpoint` with every fsync that goes through coordinator.fsutil turned into a no-op.

Only for showing that the power-loss test can fail: a cluster of these nodes keeps
its Raft journal, term/vote file and snapshots in the page cache, exactly what a
power loss discards. (LMDB's own fsyncs are not affected.) Run by path, as
LocalCluster's launcher.
"""
import sys

from coordinator import fsutil
from coordinator.cli.main import main


def _skip(*args: object, **kwargs: object) -> None:
    pass


if __name__ == "__main__":
    fsutil.fsync_file = _skip  # every caller looks these up on the module at call time
    fsutil.fsync_dir = _skip
    sys.exit(main())
