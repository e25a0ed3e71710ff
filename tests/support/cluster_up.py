"""`raftpoint cluster up` as a child process of a test, and how a test ends it."""
from __future__ import annotations

import signal
import subprocess
import sys

# The console of this environment, as a module: the checkout's code on PYTHONPATH runs.
RAFTPOINT = [sys.executable, "-m", "raftpoint.cli.main"]


def stop(up: subprocess.Popen) -> None:
    """SIGTERM, as an operator's stop; killed if it has not stopped its nodes within 30 s."""
    if up.poll() is None:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait(10)
