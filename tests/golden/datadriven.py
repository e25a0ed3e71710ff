"""Golden scripts: a case is a command and the output it must print, so a story of
commands reads top to bottom and a new case costs two lines (after etcd-io/raft's
testdata/*.txt and the datadriven library).

File format
-----------
A script is a sequence of cases separated by blank lines; lines starting with ``#``
between cases are comments::

    # a story about ...
    create-group g mode=bcs agents=a,b,c
    ----
    ok: group g (bcs), members a b c

A case is one command line, a ``----`` line, and the expected output: every line up
to the next blank line or the end of the file (so output never holds a blank line;
an empty output is a ``----`` line followed by a blank line). A command line is
split like a shell line (quotes group words): the first word names the command,
``key=value`` words are options, the other words are arguments. A driver that does
not read an option it was given, or is given an unknown command, fails the script
with its file and line: a typo must not pass silently.

Each file runs against a fresh driver. Output that differs from the expected text
fails with a unified diff per case. With the environment variable ``REWRITE=1`` the
files are rewritten with the actual output instead (for adding cases: write the
command and a ``----`` line, rewrite, read the result and keep it if it is right).

Drivers (one per script family, in tests/golden/testdata/<family>/)
--------------------------------------------------------------------
``state_machine`` (state_machine_driver.py): the replicated state machine over the
in-memory store. Commands act on the last created group unless given ``group=``::

    create-group NAME [mode=coordinated|bcs|hmnr|fdas|uncoordinated] [retention=N] [agents=a,b]
    register AGENT
    commit AGENT INDEX [epoch=E] [kind=basic|forced|coordinated] [inc=I] [sha=HEX]
    report AGENT MSG=SENDER.INTERVAL>RECEIVER.INTERVAL[@GENERATION] ... [inc=I]
    start-epoch | abort-epoch EPOCH [reason=TEXT]
    fail AGENT [inc=I]            declare AGENT's incarnation failed: the recovery
    ack AGENT [order=N] [inc=I]   acknowledge AGENT's (only) pending order
    deregister AGENT [inc=I] | gc | orders | show

A refused command prints ``refused: STATUS/REASON_CODE field: reason`` and the driver checks the
store was left untouched. ``inc`` defaults to the agent's current incarnation.

``recovery_line`` (history_driver.py): a checkpoint history built event by event::

    agents A B ...                 start a new history
    checkpoint AGENT [index=N]     AGENT checkpoints (next index, or N)
    send AGENT MSG | recv AGENT MSG
    fail AGENT ...                 the recovery line if these agents fail now,
                                   the rolled-back agents and the domino depth
    cut AGENT=INDEX|current ...    is this cut consistent: orphans, in transit
    useless                        checkpoints on a Z-cycle
    watermark [retention=N]        the oldest checkpoint per agent GC must keep

``cic_bcs`` (cic_driver.py): the BCS protocol at each agent, over the same history
commands; ``send`` prints the piggyback, ``recv`` the forced checkpoint (if any)
before delivery, ``recv AGENT MSG piggyback=HEX`` delivers a forged piggyback.
"""
from __future__ import annotations

import difflib
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

SEPARATOR = "----"
_OPTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*=")


class ScriptError(Exception):
    """The script itself is wrong (unknown command, missing argument, unread option)."""


class Command:
    """One parsed command line; drivers read arguments and options through it, so
    whatever they did not read can be reported as a mistake in the script."""

    def __init__(self, text: str, where: str) -> None:
        self.text = text
        self.where = where
        try:
            words = shlex.split(text)
        except ValueError as exc:
            raise ScriptError(f"{where}: cannot split {text!r}: {exc}") from None
        self.name = words[0]
        self.args = [w for w in words[1:] if not _OPTION.match(w)]
        self.options = dict(w.split("=", 1) for w in words[1:] if _OPTION.match(w))
        self._read: set[str] = set()

    def error(self, message: str) -> ScriptError:
        return ScriptError(f"{self.where}: {self.text!r}: {message}")

    def arg(self, position: int) -> str:
        if position >= len(self.args):
            raise self.error(f"needs at least {position + 1} argument(s)")
        return self.args[position]

    def int_arg(self, position: int) -> int:
        return self.to_int(self.arg(position), f"argument {position + 1}")

    def option(self, key: str, default: str | None = None) -> str | None:
        self._read.add(key)
        return self.options.get(key, default)

    def int_option(self, key: str, default: int | None = None) -> int | None:
        value = self.option(key)
        return default if value is None else self.to_int(value, key)

    def all_options(self) -> dict[str, str]:
        """For commands whose option keys are data (message ids)."""
        self._read.update(self.options)
        return dict(self.options)

    def check_all_read(self) -> None:
        unread = sorted(set(self.options) - self._read)
        if unread:
            raise self.error(f"unknown option(s) {', '.join(unread)}")

    def to_int(self, value: str, what: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise self.error(f"{what} must be an integer, got {value!r}") from None


class Driver(Protocol):
    def run(self, command: Command) -> str: ...


class Dispatching:
    """Base of the drivers: `foo-bar ...` runs the method `cmd_foo_bar(command)`."""

    def run(self, command: Command) -> str:
        handler = getattr(self, "cmd_" + command.name.replace("-", "_"), None)
        if handler is None:
            raise command.error(f"unknown command {command.name!r} for {type(self).__name__}")
        output = handler(command)
        command.check_all_read()
        return output


@dataclass(frozen=True)
class Case:
    command: str
    line: int  # 1-based line of the command
    expected: tuple[str, ...]
    span: tuple[int, int]  # 0-based [start, end) of the expected lines in the file


def parse(text: str, name: str) -> list[Case]:
    lines = text.splitlines()
    cases: list[Case] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            i += 1
            continue
        if i + 1 >= len(lines) or lines[i + 1] != SEPARATOR:
            raise ScriptError(f"{name}:{i + 1}: command {line!r} must be followed by a {SEPARATOR!r} line")
        start = end = i + 2
        while end < len(lines) and lines[end].strip():
            end += 1
        cases.append(Case(line, i + 1, tuple(lines[start:end]), (start, end)))
        i = end
    return cases


@dataclass(frozen=True)
class Outcome:
    case: Case
    actual: tuple[str, ...]

    @property
    def matches(self) -> bool:
        return self.case.expected == self.actual


def run_script(text: str, name: str, driver: Driver) -> list[Outcome]:
    outcomes = []
    for case in parse(text, name):
        output = driver.run(Command(case.command, f"{name}:{case.line}"))
        actual = tuple(output.splitlines())
        if any(not line.strip() for line in actual):
            raise ScriptError(f"{name}:{case.line}: output of {case.command!r} holds a blank line:\n{output}")
        outcomes.append(Outcome(case, actual))
    return outcomes


def mismatch_report(outcomes: list[Outcome], name: str) -> str:
    """Empty when every case matched; otherwise one unified diff per differing case."""
    parts = []
    for o in outcomes:
        if not o.matches:
            diff = difflib.unified_diff(o.case.expected, o.actual, "expected", "actual", lineterm="")
            parts.append(f"{name}:{o.case.line}: {o.case.command}\n" + "\n".join(diff))
    return "\n\n".join(parts)


def rewritten(text: str, outcomes: list[Outcome]) -> str:
    lines = text.splitlines()
    for o in sorted(outcomes, key=lambda o: o.case.span, reverse=True):
        start, end = o.case.span
        lines[start:end] = o.actual
    return "\n".join(lines) + "\n"


def check_file(path: Path, make_driver: Callable[[], Driver], *, rewrite: bool | None = None) -> str:
    """Run one script; return the mismatch report ("" when it passed). With rewrite
    (default: REWRITE=1 in the environment) the file takes the actual output."""
    if rewrite is None:
        rewrite = os.environ.get("REWRITE") == "1"
    text = path.read_text()
    outcomes = run_script(text, path.name, make_driver())
    if rewrite:
        path.write_text(rewritten(text, outcomes))
        return ""
    return mismatch_report(outcomes, path.name)
