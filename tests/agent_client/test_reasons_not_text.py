"""Clients decide on a refusal's reason code, never on its text: the text is for people
and may change, the code is the contract (proto/v1/coordinator.proto, ReasonCode)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT_PACKAGES = ("agent_client", "chaos", "raftpoint", "benchmarks")
TEXT_MATCHING = re.compile("|".join((
    r"\bin\s+[\w.]+\.reason\b(?!_)",  # "orphan" in exc.reason
    r"\.reason\s*[!=]=",  # exc.reason == "..."
    r"\.reason\.(?:startswith|endswith|find|index|lower|split)\(",
    r"\bin\s+[\w.]+\.details\(\)",  # "stale" in err.details()
    r"\.details\(\)\s*[!=]=",
    r"\.refused\([^)]*,\s*[\"']",  # outcome.refused(code, "some text")
)))


def text_matches(source: str) -> list[str]:
    return [line.strip() for line in source.splitlines() if TEXT_MATCHING.search(line)]


def test_the_pattern_finds_what_it_forbids() -> None:
    assert text_matches('    return "orphan message" in exc.reason\n'
                        '    if "still open" not in exc.reason:\n'
                        '    if outcome.refused("FAILED_PRECONDITION", "rollback order"):\n') == [
        'return "orphan message" in exc.reason', 'if "still open" not in exc.reason:',
        'if outcome.refused("FAILED_PRECONDITION", "rollback order"):']
    assert text_matches("    return exc.reason_code == pb.REASON_ORPHAN_MESSAGE\n") == []


def test_no_client_branches_on_the_text_of_a_refusal() -> None:
    sources = [p for package in CLIENT_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(sources) > 20
    found = {str(p.relative_to(ROOT)): hits for p in sources if (hits := text_matches(p.read_text()))}
    assert found == {}
