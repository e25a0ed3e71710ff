"""What processes and the machine spent, read from /proc (Linux): benchmarks report the
servers' CPU apart from the load generators', which share the machine, and how busy
the machine was, so a latency measured on a saturated machine is not taken for the
server's."""
from __future__ import annotations

import os
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def total_cpu_seconds(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def box_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle, summed over its cores (/proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / TICKS  # user..steal; guest time is already in user
