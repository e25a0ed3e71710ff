"""Invariants 2 and 3: one identity per stable epoch, and epochs that never go back.

2. An epoch's member set is fixed when it starts; once stable, its committed set
   equals its members. Every view of an epoch (StartEpoch answers, GetGroup's recent
   epochs) must agree on both, and each member has at most one acknowledged
   checkpoint per epoch, among those the stable epoch counts as committed.
3. A read that starts after another completed never sees a lower current_epoch or
   stable_epoch for the group (Register, StartEpoch, CommitCheckpoint and GetGroup
   answers all report them).
"""
from __future__ import annotations

import heapq
from collections import defaultdict

from chaos.invariants.facts import Facts, Observation
from chaos.report import InvariantResult

IDENTITY = "stable-epochs-have-one-identity"
MONOTONIC = "epochs-monotonic"


def check_identity(facts: Facts) -> InvariantResult:
    result = InvariantResult(IDENTITY, True)
    counts = {"epochs_seen": 0, "stable_epochs": 0, "acknowledged_epoch_checkpoints": 0}
    for group in facts.groups:
        views: dict[int, list[tuple[dict, Observation]]] = defaultdict(list)
        for obs in facts.observations(group):
            for view in obs.epochs:
                views[view["epoch"]].append((view, obs))
        acked: dict[tuple[int, str], list] = defaultdict(list)
        for req in facts.of(group, "commit"):
            if req.ok and req.value.get("kind") == "COORDINATED_CUT":
                acked[(req.answer["epoch"], req.value["agent"])].append(req)
        counts["epochs_seen"] += len(views)
        counts["acknowledged_epoch_checkpoints"] += sum(len(v) for v in acked.values())
        for epoch, seen in sorted(views.items()):
            first_view, first_obs = seen[0]
            for view, obs in seen[1:]:
                if view["members"] != first_view["members"]:
                    result.violate(f"{group} epoch {epoch} seen with members {first_view['members']} and "
                                   f"{view['members']}", first_obs.req.ok_op, obs.req.ok_op)
            stable = [(v, o) for v, o in seen if v["state"] == "EPOCH_STABLE"]
            if not stable:
                continue
            counts["stable_epochs"] += 1
            for v, o in stable:
                if v["committed"] != v["members"]:
                    result.violate(f"{group} epoch {epoch} is stable with committed {v['committed']} but members "
                                   f"{v['members']}", o.req.ok_op)
            view, obs = stable[0]
            for other, other_obs in stable[1:]:
                if other["committed"] != view["committed"]:
                    result.violate(f"{group} epoch {epoch} is stable with committed {view['committed']} and with "
                                   f"{other['committed']}", obs.req.ok_op, other_obs.req.ok_op)
            for (e, agent), reqs in acked.items():
                if e == epoch and agent not in view["committed"]:
                    result.violate(f"{group} epoch {epoch}: {agent}'s checkpoint {reqs[0].answer['index']} was "
                                   f"acknowledged for it, but the stable epoch's committed set is "
                                   f"{view['committed']}", reqs[0].ok_op, obs.req.ok_op)
        for (epoch, agent), reqs in acked.items():
            indexes = sorted({r.answer["index"] for r in reqs})
            if len(indexes) > 1:
                result.violate(f"{group} epoch {epoch}: {agent} has checkpoints {indexes} acknowledged for it",
                               *(r.ok_op for r in reqs[:3]))
    result.counts = counts
    return result


def check_monotonic(facts: Facts) -> InvariantResult:
    result = InvariantResult(MONOTONIC, True)
    compared = 0
    for group in facts.groups:
        observations = facts.observations(group)
        for metric in ("current", "stable"):
            compared += _sweep(group, metric, [o for o in observations if getattr(o, metric) is not None], result)
    result.counts = {"observations_compared": compared}
    return result


def _sweep(group: str, metric: str, observations: list[Observation], result: InvariantResult) -> int:
    """Each observation against the highest value among those that ended before it started."""
    by_end = [(o.end, i, o) for i, o in enumerate(observations)]
    heapq.heapify(by_end)
    best: Observation | None = None
    for o in sorted(observations, key=lambda o: o.start):
        while by_end and by_end[0][0] < o.start:
            _, _, done = heapq.heappop(by_end)
            if best is None or getattr(done, metric) > getattr(best, metric):
                best = done
        if best is not None and getattr(o, metric) < getattr(best, metric):
            result.violate(f"{group}: {metric}_epoch went back from {getattr(best, metric)} to "
                           f"{getattr(o, metric)} in a later read", best.req.ok_op, o.req.first.invoke, o.req.ok_op)
    return len(observations)
