"""Children that do not outlive the process that started them (Linux).

A `raftpoint cluster up` or demo killed with SIGKILL runs no shutdown code, and its
node processes used to live on holding the cluster's ports, so the next `cluster up`
on that data dir found them in the way. The kernel's parent-death signal
(prctl PR_SET_PDEATHSIG) stops them instead.

The signal fires when the *thread* that started the child exits, not the process:
use it only for children started from a thread that lives as long as the process
(the main thread of a command-line program).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Looked up here, in the parent: the child runs only this function between fork and
# exec, where loading a library could deadlock on a lock another thread held.
_PRCTL = _prctl()


def stop_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen that has the child sent `sig` when the
    calling thread exits; None where the platform has no such signal."""
    if _PRCTL is None:
        return None
    parent = os.getpid()
    prctl = _PRCTL

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return arm
