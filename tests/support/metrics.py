"""Reading a node's Prometheus endpoint in tests."""
from __future__ import annotations

import re
import urllib.request


def scrape(address: str) -> dict[str, float]:
    """Every raftpoint_* sample on http://address/metrics, by its name with labels."""
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(raftpoint_\S+) (\S+)$", text, re.MULTILINE)}
