"""The checker's verdict: one result per invariant, printable as a table or as JSON."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from chaos.history import Op

MAX_EXAMPLES = 5


@dataclass
class InvariantResult:
    """`examples` are concrete counter-examples: why, and the ops involved."""

    name: str
    ok: bool
    counts: dict[str, Any] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    violations: int = 0

    def violate(self, why: str, *ops: Op | None) -> None:
        """Count a violation; keep the first few as examples."""
        self.ok = False
        self.violations += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"why": why, "ops": [asdict(op) for op in ops if op is not None]})


@dataclass
class Report:
    results: list[InvariantResult]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def result(self, name: str) -> InvariantResult:
        return next(r for r in self.results if r.name == name)

    def failed(self) -> list[str]:
        return [r.name for r in self.results if not r.ok]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "summary": self.summary, "invariants": [asdict(r) for r in self.results]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, default=str)

    def table(self) -> str:
        rows = [("invariant", "result", "violations", "counts")]
        for r in self.results:
            counts = ", ".join(f"{k}={_fmt(v)}" for k, v in r.counts.items())
            rows.append((r.name, "ok" if r.ok else "VIOLATED", str(r.violations), counts))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
        lines.insert(1, "-" * len(lines[0]))
        if self.summary:
            lines.insert(0, "  ".join(f"{k}={_fmt(v)}" for k, v in self.summary.items()))
        for r in self.results:
            for ex in r.examples:
                lines.append(f"  {r.name}: {ex['why']}")
                lines += [f"    #{o['index']} t={o['time']:.3f} {o['process']} {o['type']} {o['f']} "
                          f"{json.dumps(o['value'], sort_keys=True, default=str)[:300]}"
                          + (f" error={o['error']}" if o["error"] else "") for o in ex["ops"]]
        return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
