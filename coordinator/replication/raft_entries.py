"""pysyncobj's log entries, read without running them.

A pysyncobj log entry is a kind byte and a pickle: of `(method id, (LogEntry bytes,))`
for the node's one replicated method, of `[action, address, TCPNode]` for a
membership change, and nothing for a leader's no-op. pysyncobj reads them with the
stock unpickler, which calls whatever a pickle names: whoever can put an entry in
front of it runs code in the node.

Here a pickle may name only what these entries hold (`_codecs.encode`, which
pysyncobj's protocol-2 pickles use for bytes, and pysyncobj's `TCPNode`); any other
name is refused before it is looked up. Membership entries are read this way every
time (pysyncobj reads them again at each start, to rebuild the member list from the
log), and `raftpoint migrate` checks every entry of an old journal this way before
it signs it (`problem`).
"""
from __future__ import annotations

import io
import pickle
from typing import Any

from pysyncobj.node import TCPNode
from pysyncobj.syncobj import _COMMAND_TYPE

REGULAR, NO_OP, MEMBERSHIP, VERSION = (_COMMAND_TYPE.REGULAR, _COMMAND_TYPE.NO_OP, _COMMAND_TYPE.MEMBERSHIP,
                                       _COMMAND_TYPE.VERSION)
_ALLOWED = frozenset({("_codecs", "encode"), (TCPNode.__module__, TCPNode.__name__)})
_MEMBERSHIP_ACTIONS = ("add", "rem")


class ForeignEntry(ValueError):
    """The entry is not one raftpoint or pysyncobj writes; nothing in it was run."""


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise ForeignEntry(f"its pickle names {module}.{name}")
        return super().find_class(module, name)


def kind(command: bytes) -> int:
    """REGULAR, NO_OP, MEMBERSHIP or VERSION (pysyncobj's first byte)."""
    if not command:
        raise ForeignEntry("it is empty")
    return command[0]


def load(command: bytes) -> Any:
    """The pickled part of `command`; ForeignEntry for a pickle naming anything else."""
    try:
        return _Unpickler(io.BytesIO(command[1:])).load()
    except ForeignEntry:
        raise
    except Exception as exc:  # a truncated or garbled pickle raises any of a dozen types
        raise ForeignEntry(f"its pickle does not load ({type(exc).__name__}: {exc})") from None


def membership_change(command: bytes) -> list | None:
    """pysyncobj's parse of a membership entry (None for any other kind), read safely."""
    if kind(command) != MEMBERSHIP:
        return None
    change = load(command)
    if not (isinstance(change, list) and len(change) == 3 and change[0] in _MEMBERSHIP_ACTIONS
            and isinstance(change[1], str) and isinstance(change[2], TCPNode)):
        raise ForeignEntry(f"it is no membership change: {change!r:.80}")
    return change


def problem(command: bytes) -> str | None:
    """Why `command` is not an entry this node writes (None: it is one). Nothing in it runs."""
    try:
        entry_kind = kind(command)
        if entry_kind == NO_OP:
            return None if len(command) == 1 else "a no-op with a payload"
        if entry_kind == MEMBERSHIP:
            membership_change(command)
            return None
        if entry_kind != REGULAR:
            return f"an entry of kind {entry_kind}, which this node never writes"
        call = load(command)
    except ForeignEntry as exc:
        return str(exc)
    if isinstance(call, tuple) and len(call) == 2 and isinstance(call[0], int) and isinstance(call[1], tuple) \
            and len(call[1]) == 1 and isinstance(call[1][0], bytes):
        return None
    return f"a command of another shape: {call!r:.80}"
