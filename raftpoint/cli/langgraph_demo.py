"""`raftpoint demo --langgraph`: the multi-agent LangGraph example on a local 3-node cluster.

The example (examples/langgraph_team) ships with the source tree, not inside the
package, so this runs its script as a process and says what is missing otherwise:
the LangGraph extra, or a source checkout.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_team" / "run.py"


def run_langgraph() -> int:
    missing = [m for m in ("langgraph", "langgraph.checkpoint.sqlite") if _missing(m)]
    if missing:
        print(f"raftpoint demo --langgraph: {', '.join(missing)} not installed: pip install -e '.[dev]' "
              "(or '.[langgraph]' plus langgraph-checkpoint-sqlite)", file=sys.stderr)
        return 2
    if not EXAMPLE.exists():
        print(f"raftpoint demo --langgraph: the example is part of the source tree ({EXAMPLE} not found)",
              file=sys.stderr)
        return 2
    return subprocess.call([sys.executable, str(EXAMPLE), "--cluster"])


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True
