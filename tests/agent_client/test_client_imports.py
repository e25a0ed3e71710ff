"""Agents link agent_client; it must never drag in the coordinator's Raft or LMDB."""
from __future__ import annotations

import subprocess
import sys

MODULES = ("agent_client", "agent_client.agent", "agent_client.aio", "agent_client.connection",
           "agent_client.testing", "agent_client.blobstore",
           "agent_client.side_effects", "agent_client.delivery_log", "agent_client.restore_check",
           "agent_client.protocol", "agent_client.delivered", "agent_client.envelope", "agent_client.client_base",
           )


def test_agent_client_imports_neither_pysyncobj_nor_lmdb() -> None:
    code = ("import importlib, sys\n"
            f"for name in {MODULES!r}: importlib.import_module(name)\n"
            "bad = sorted({'pysyncobj', 'lmdb'} & {m.split('.')[0] for m in sys.modules})\n"
            "print(bad); sys.exit(1 if bad else 0)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
