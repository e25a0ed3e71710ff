"""The config-typo fault: the auth files every node reads, left broken by a careless edit for a while.

An operator's edit leaves the bindings file with a table header not closed (no
longer TOML) and the tokens file with a line that is not `<identity> <sha256 hex>`.
Each file is replaced whole, as an editor or a ConfigMap update does, with its own
text plus the typo, and put back the same way when healed. So a node reading it
meanwhile sees one version or the other, never a half-written one: an empty
bindings file parses and grants nothing, which would be a revocation, not a typo.

A node keeps the last good version of a file that no longer parses in force
(coordinator.transport.auth.WatchedFile), so nothing may change for any client: the
invariants must hold, and no agent that kept heartbeating may be declared failed
(no-healthy-agent-declared-failed, judging the scenario's flood). Every node of a
harness cluster reads the same two files, so one edit breaks them on every node.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from coordinator import fsutil
from coordinator.transport.auth import AuthConfigError, parse_bindings, parse_tokens

BINDINGS_TYPO = '\n["careless-edit"\nrole = "admin"\n'  # the table header's "]" forgotten
TOKENS_TYPO = "careless-edit 0f3a\n"  # a hash cut short


class ConfigTypo:
    """Break `bindings` and `tokens` (either may be None: a cluster without that file) and put them back."""

    def __init__(self, bindings: Path | None, tokens: Path | None) -> None:
        self.files = [(path, typo, parse) for path, typo, parse in
                      ((bindings, BINDINGS_TYPO, parse_bindings), (tokens, TOKENS_TYPO, parse_tokens))
                      if path is not None]
        self._kept: dict[Path, bytes] = {}

    def inject(self) -> None:
        if not self.files:
            raise ValueError("config-typo needs a cluster with auth files")
        for path, typo, parse in self.files:
            text = path.read_text()
            broken = text + typo
            if _parses(parse, broken, str(path)):
                raise ValueError(f"the typo leaves {path} parsable: not the fault it is meant to be")
            self._kept[path] = text.encode()
            fsutil.atomic_write(path, broken.encode(), durable=False)

    def heal(self) -> None:
        for path, kept in self._kept.items():
            fsutil.atomic_write(path, kept, durable=False)
        self._kept.clear()


def _parses(parse: Callable[[str, str], Any], text: str, source: str) -> bool:
    try:
        parse(text, source)
    except AuthConfigError:
        return False
    return True
