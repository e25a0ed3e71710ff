"""Epoch scheduling arithmetic for coordinated groups (pure)."""
from __future__ import annotations

import math

from coordinator.core.model import GroupSpec


def young_daly_interval(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """Young/Daly first-order optimum sqrt(2·δ·MTBF): checkpoint often enough that
    expected lost work balances the time spent checkpointing."""
    if checkpoint_cost_s <= 0 or mtbf_s <= 0:
        return 0.0
    return math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)


def epoch_interval(spec: GroupSpec) -> float:
    """Seconds between epochs; 0 means epochs are only started on request."""
    if spec.checkpoint_interval_s > 0:
        return spec.checkpoint_interval_s
    return young_daly_interval(spec.checkpoint_cost_s, spec.mtbf_s)
