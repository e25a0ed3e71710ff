"""Random small histories (<= 4 agents, <= 5 checkpoints each) built from events."""
from __future__ import annotations

from hypothesis import strategies as st

from coordinator.core.history import EventLog, History


@st.composite
def histories(draw, max_agents: int = 4, max_checkpoints: int = 5, max_events: int = 24) -> History:
    n = draw(st.integers(2, max_agents))
    agents = [f"p{i}" for i in range(n)]
    log = EventLog(agents)
    in_flight: list[tuple[str, str]] = []
    counts = dict.fromkeys(agents, 0)
    for step in range(draw(st.integers(0, max_events))):
        agent = agents[draw(st.integers(0, n - 1))]
        op = draw(st.sampled_from(("send", "receive", "checkpoint")))
        if op == "checkpoint" and counts[agent] < max_checkpoints - 1:
            log.checkpoint(agent, log.interval(agent) - 1 + draw(st.integers(1, 2)))  # indexes may jump
            counts[agent] += 1
        elif op == "send":
            to = agents[draw(st.integers(0, n - 1))]
            if to != agent:
                mid = f"m{step}"
                log.send(agent, mid)
                in_flight.append((mid, to))
        elif op == "receive" and in_flight:
            mid, to = in_flight.pop(draw(st.integers(0, len(in_flight) - 1)))
            log.receive(to, mid)
    return log.history()
