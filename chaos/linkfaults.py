"""What a proxied link does to its traffic, and the arithmetic behind it (no I/O).

A link is one listening address forwarding TCP connections to one target. Its two
directions are named from the dialer's side: `up` carries what the dialer sends,
`down` what the target answers. Faults are immutable values so the proxy can swap
them atomically and a run can record exactly what was in force.
"""
from __future__ import annotations

import ipaddress
import random
from dataclasses import dataclass
from enum import Enum

UP, DOWN = "up", "down"
DIRECTIONS = (UP, DOWN)
# Flaky links are judged on a fixed tick so a seed gives the same decisions whatever
# the scheduler's actual timing.
FLAKY_TICK_S = 0.1


class Mode(str, Enum):
    PASS = "pass"
    DELAY = "delay"
    DROP = "drop"  # a blackhole: bytes are read and discarded, nothing is closed


class Partition(str, Enum):
    """How a cut link behaves. RESET and REFUSE end every connection, so each side
    knows at once that it is alone; BLACKHOLE keeps connections open and silently
    drops both directions, as a pulled cable or a firewall DROP rule does, so each
    side finds out only by its own timeouts."""

    RESET = "reset"    # existing connections reset; new ones accepted and reset at once
    REFUSE = "refuse"  # existing connections reset; the listener closed: ECONNREFUSED
    BLACKHOLE = "blackhole"  # everything dropped; new connections reach the target but stay silent

    @property
    def ends_connections(self) -> bool:
        return self is not Partition.BLACKHOLE


@dataclass(frozen=True)
class Direction:
    """The fault of one direction. Delay keeps byte order: a chunk is never released
    before the one read ahead of it, so jitter stretches gaps but never reorders."""

    mode: Mode = Mode.PASS
    delay_ms: float = 0.0
    jitter_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.delay_ms < 0 or self.jitter_ms < 0:
            raise ValueError("delay_ms and jitter_ms must be >= 0")


PASS = Direction()
DROP = Direction(Mode.DROP)


def delay(ms: float, jitter_ms: float = 0.0) -> Direction:
    return Direction(Mode.DELAY, float(ms), float(jitter_ms))


@dataclass(frozen=True)
class LinkFaults:
    up: Direction = PASS
    down: Direction = PASS
    partition: Partition | None = None
    flaky_p: float = 0.0  # probability per second that each open connection is reset

    def __post_init__(self) -> None:
        if not 0.0 <= self.flaky_p <= 1.0:
            raise ValueError(f"flaky_p must be in [0, 1], got {self.flaky_p}")

    def direction(self, name: str) -> Direction:
        if name not in DIRECTIONS:
            raise ValueError(f"direction must be {UP!r} or {DOWN!r}, got {name!r}")
        return self.up if name == UP else self.down

    def effective(self, name: str) -> Direction:
        """What the direction does to bytes now: a blackhole partition drops them all."""
        return DROP if self.partition is Partition.BLACKHOLE else self.direction(name)

    @property
    def rejects_connections(self) -> bool:
        return self.partition is not None and self.partition.ends_connections

    @property
    def healthy(self) -> bool:
        return self == HEALTHY


HEALTHY = LinkFaults()


def release_time(previous: float, now: float, fault: Direction, rng: random.Random) -> float:
    """When a chunk read at `now` may be written on: `now` plus the sampled delay
    (uniform in delay ± jitter, never negative), but not before the previous chunk."""
    wait = 0.0
    if fault.mode is Mode.DELAY:
        wait = max(0.0, fault.delay_ms + rng.uniform(-fault.jitter_ms, fault.jitter_ms)) / 1000.0
    return max(previous, now + wait)


def must_reset_on_change(old: Direction, new: Direction, dropped_bytes: bool) -> bool:
    """A connection that lost bytes to a drop is no longer a framed stream for either
    end; once the direction stops dropping, the only honest continuation is a reset
    (as a real peer would see after its retransmissions gave up)."""
    return dropped_bytes and old.mode is Mode.DROP and new.mode is not Mode.DROP


def reset_probability(p_per_second: float, dt: float = FLAKY_TICK_S) -> float:
    """Chance to reset within `dt` so that a connection survives one second with 1 - p."""
    if p_per_second >= 1.0:
        return 1.0
    return 1.0 - (1.0 - p_per_second) ** dt


class FlakyDice:
    """Seeded reset decisions for one link: the same seed gives the same sequence."""

    def __init__(self, seed: int | str) -> None:
        self._rng = random.Random(seed)

    def resets(self, connections: list[int], p_per_second: float) -> list[int]:
        """Which of `connections` (ids, in any order) to reset this tick."""
        q = reset_probability(p_per_second)
        return [c for c in sorted(connections) if self._rng.random() < q]


LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


def loopback_address(address: str, what: str) -> tuple[str, int]:
    """Split host:port, refusing anything outside 127.0.0.0/8 (never a real network)."""
    host, sep, port = address.rpartition(":")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(f"{what} must be a loopback IPv4 address with a port, got {address!r}") from None
    if not sep or not port.isdigit() or ip not in LOOPBACK:
        raise ValueError(f"{what} must be in 127.0.0.0/8 with a port, got {address!r}")
    return host, int(port)
