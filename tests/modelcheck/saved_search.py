"""A search saved on disk as each depth starts, so a search of many CPU-hours survives
being stopped: run again, it resumes from the last depth saved.

At the start of each depth the search (explore.py) is wholly described by what it
keeps: the worlds queued at that depth, the table of worlds queued so far, the worlds
a violation stopped, the two arrays traces are rebuilt from, the report so far, and
what symmetry.py has learned that a world's hash stands for. Saving those and loading
them again continues the same breadth-first search from that depth: every world of
the depth is expanded against the same visited set, so the search checks what an
uninterrupted one checks. (symmetry.py's bounded memos start empty, as they do each
time they fill: they only decide how soon two renderings of one orbit are merged.)

A save is one directory per depth, written whole and fsynced before `current`
names it (a file replaced atomically), so a search stopped at any moment, even while
saving, resumes from the last complete depth. It is refused, with a reason, unless
it was taken by the same code (the sources of the core, the agent library and the
model), for the same bounds and reductions, by a process that hashes as this one
does, and at a depth within this search's bound (which may be deeper: a search saved
at depth k continues to any bound from k on). A model that changed would mix two
state spaces; and a world's key is a hash of strings, which Python salts per
process unless PYTHONHASHSEED fixes it (the benchmark fixes it). Only the symmetric
key (symmetry.py) is the same in every such process: it renders None as a constant,
where Python 3.11 hashes None by its address.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

from tests.modelcheck import symmetry

_ROOT = Path(__file__).resolve().parents[2]
_MODEL = ("coordinator", "agent_client", "tests/modelcheck")  # what the model's behaviour is made of
_FORMAT = 1
_HINTS = {"hashing": " (a world's key is a hash of its strings: both runs need one PYTHONHASHSEED)"}
CURRENT = "current"


class SaveRefused(Exception):
    """A save that cannot continue this search (other code, bounds or reductions)."""


@dataclass
class Resumed:
    """What a save restores: the search's tables and the depth it resumes at (its
    queued worlds are in `worlds`, a file in Level's format)."""

    at: int
    tables: dict[str, Any]
    worlds: Path


def identity(bounds: object, symmetric: bool, subsume: bool) -> dict[str, Any]:
    """What a save must share with the search that resumes it."""
    return {"format": _FORMAT, "bounds": repr(bounds), "symmetric": symmetric, "subsume": subsume,
            "code": _code_digest(), "hashing": hash(("raftpoint", b"model", 1.5))}


def save(directory: Path, ident: dict[str, Any], at: int, tables: dict[str, Any],
         write_worlds: Callable[[IO[bytes]], None]) -> None:
    """Write the search as it stands at the start of depth `at`; `write_worlds(file)`
    writes the queued worlds. Older saves are removed once this one is current."""
    try:
        _save(directory, ident, at, tables, write_worlds)
    except OSError as e:
        raise SaveRefused(f"the search cannot be saved in {directory}: {e}") from e


def _save(directory: Path, ident: dict[str, Any], at: int, tables: dict[str, Any],
          write_worlds: Callable[[IO[bytes]], None]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    previous = _current(directory)
    target = directory / f"depth-{at}"
    assert target != previous, f"{target} is the save to resume from: it is never rewritten"
    if target.exists():  # a save that stopped before it became current
        shutil.rmtree(target)
    target.mkdir()
    with open(target / "worlds", "wb") as out:
        write_worlds(out)
        _flush(out)
    with open(target / "tables.pickle", "wb") as out:
        pickle.dump({**tables, "learned": symmetry.learned()}, out, pickle.HIGHEST_PROTOCOL)
        _flush(out)
    with open(target / "identity.json", "w") as out:
        json.dump({**ident, "depth": at}, out)
        _flush(out)
    _fsync_directory(target)
    pointer = directory / f"{CURRENT}.tmp"
    with open(pointer, "w") as out:
        out.write(target.name)
        _flush(out)
    os.replace(pointer, directory / CURRENT)
    _fsync_directory(directory)
    for older in directory.glob("depth-*"):  # the one it replaces, and any a stop left behind
        if older != target:
            shutil.rmtree(older, ignore_errors=True)


def load(directory: Path, ident: dict[str, Any]) -> Resumed | None:
    """The search saved in `directory`, or None if there is none; SaveRefused if
    it is another search's."""
    found = _current(directory)
    if found is None:
        return None
    try:
        saved = json.loads((found / "identity.json").read_text())
        at = saved.pop("depth")
        for name, value in ident.items():
            if saved.get(name) != value:
                raise SaveRefused(
                    f"the search saved in {directory} had another {name} "
                    f"({saved.get(name)!r}, this search has {value!r}){_HINTS.get(name, '')}: "
                    f"remove it or use another directory")
        with open(found / "tables.pickle", "rb") as src:
            tables = pickle.load(src)
    except (OSError, ValueError, KeyError, EOFError, pickle.UnpicklingError) as e:
        raise SaveRefused(f"the search saved in {directory} cannot be read ({e}): remove it to start again") from e
    symmetry.relearn(tables.pop("learned"))
    return Resumed(at, tables, found / "worlds")


def _current(directory: Path) -> Path | None:
    pointer = directory / CURRENT
    return directory / pointer.read_text().strip() if pointer.exists() else None


def _code_digest() -> str:
    """A digest of every source file under the model's packages (loaded or not: one
    digest whichever modules a caller imported)."""
    digest = hashlib.sha256()
    for source in sorted(path for part in _MODEL for path in (_ROOT / part).rglob("*.py")):
        digest.update(str(source.relative_to(_ROOT)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def _flush(out: Any) -> None:
    out.flush()
    os.fsync(out.fileno())


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
