"""A search saved on disk as each depth starts and every few minutes while it expands
one, so a search of many CPU-hours survives being stopped: run again, it resumes
from the last save.

Between two worlds (one wholly expanded, the next not begun) the search
(explore.py) is wholly described by what it keeps: the worlds of the depth not yet
expanded, the worlds queued so far at the next depth, the table of worlds queued so
far, the worlds a violation stopped, the two arrays traces are rebuilt from, the
report so far, and what symmetry.py has learned that a world's hash stands for.
Saving those and loading them again continues the same breadth-first search from
that point: every world left is expanded against the same visited set, in the same
order, so the search checks what an uninterrupted one checks. (The bounded memos
start empty, as they do each time they fill: symmetry.py's only decide how soon two
renderings of one orbit are merged, explore.py's which keys are computed again.)

A save is one directory per point saved (the depth and how many of its worlds were
expanded), written whole and fsynced before `current` names it (a file replaced
atomically), so a search stopped at any moment, even while saving, resumes from the
last complete save; one search at a time holds a save directory (a lock). A save is
refused, with a reason, unless it is whole (each file's length and SHA-256 are
checked) and was taken by the same code (every
module of this repository the search loaded but tests: the core, the agent library,
the model, the oracle), for the same bounds and reductions, by a process that
hashes as this one does, and at a depth within this search's bound (which may be
deeper: a search saved at depth k continues to any bound from k on). A core patched
at run time (planted.py) is not seen: a save of a patched search is only for a
search patched alike. Saves are pickles: load only your own. A model that changed
would mix two state spaces; and a world's key is a hash of strings, which Python salts per
process unless PYTHONHASHSEED fixes it (the benchmark fixes it). Only the symmetric
key (symmetry.py) is the same in every such process: it renders None as a constant,
where Python 3.11 hashes None by its address.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import pickle
import shutil
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from coordinator import fsutil
from tests.modelcheck import symmetry

_ROOT = Path(__file__).resolve().parents[2]
_MODEL = ("coordinator", "agent_client", "tests", "chaos")  # where the modules the model runs live
_FORMAT = 4
_FILES = ("worlds", "following")  # the depth's worlds not yet expanded; the next depth's so far
_HINTS = {"hashing": " (a world's key is a hash of its strings: both runs need one PYTHONHASHSEED)"}
CURRENT = "current"
_CHUNK = 1 << 20


class SaveRefused(Exception):
    """A save that cannot continue this search (other code, bounds or reductions, or
    damaged), or a directory this search cannot save in."""


@dataclass
class Resumed:
    """What a save restores: the search's tables, the depth it resumes at and how many
    of that depth's worlds were expanded; the worlds left are in `worlds` and the next
    depth's queued so far in `following` (files in Level's format)."""

    at: int
    expanded: int
    tables: dict[str, Any]
    worlds: Path
    following: Path


def identity(bounds: object, symmetric: bool, subsume: bool) -> dict[str, Any]:
    """What a save must share with the search that resumes it."""
    return {"format": _FORMAT, "bounds": repr(bounds), "symmetric": symmetric, "subsume": subsume,
            "code": _code_digest(), "hashing": hash(("raftpoint", b"model", 1.5))}


@contextmanager
def claimed(directory: Path) -> Iterator[None]:
    """Hold `directory` for one search: two searches saving into one would mix them."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / "lock", "a")
    except OSError as e:
        raise SaveRefused(f"the search cannot be saved in {directory}: {e}") from e
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SaveRefused(f"another search is saving in {directory}") from None
        yield


Writer = Callable[[Callable[[bytes], object]], None]


def save(directory: Path, ident: dict[str, Any], at: int, expanded: int, tables: dict[str, Any],
         files: dict[str, Writer]) -> None:
    """Write the search as it stands at depth `at` once `expanded` of its worlds are;
    `files[name](put)` puts each file of worlds (_FILES). Older saves are removed once
    this one is current."""
    try:
        _save(directory, ident, at, expanded, tables, files)
    except OSError as e:
        raise SaveRefused(f"the search cannot be saved in {directory}: {e} (the save before it, if any, "
                          f"remains)") from e


def _save(directory: Path, ident: dict[str, Any], at: int, expanded: int, tables: dict[str, Any],
          files: dict[str, Writer]) -> None:
    previous = _current(directory)
    target = directory / (f"depth-{at}" if expanded == 0 else f"depth-{at}-{expanded}")
    if target == previous:
        raise SaveRefused(f"{target} is the save this search resumed from: it is never rewritten")
    if target.exists():  # a save that stopped before it became current
        shutil.rmtree(target)
    target.mkdir()
    written = {name: _write(target / name, files[name]) for name in _FILES}
    with open(target / "tables.pickle", "wb") as out:
        pickle.dump({**tables, "learned": symmetry.learned()}, out, pickle.HIGHEST_PROTOCOL)
        _flush(out)
    with open(target / "identity.json", "w") as out:
        json.dump({**ident, "depth": at, "expanded": expanded,
                   "files": {name: {"bytes": length, "sha256": sha} for name, (length, sha) in written.items()}}, out)
        _flush(out)
    fsutil.fsync_dir(target)
    fsutil.fsync_dir(directory)
    fsutil.atomic_write(directory / CURRENT, target.name.encode())
    for older in directory.glob("depth-*"):  # the one it replaces, and any a stop left behind
        if older != target:
            shutil.rmtree(older, ignore_errors=True)


def load(directory: Path, ident: dict[str, Any], depth: int) -> Resumed | None:
    """The search saved in `directory`, or None if there is none; SaveRefused if it
    is another search's, deeper than `depth`, or damaged."""
    try:
        found = _current(directory)
        if found is None:
            return None
        saved = json.loads((found / "identity.json").read_text())
        if not isinstance(saved, dict):
            raise ValueError(f"its identity is {saved!r}")
    except Exception as e:  # whatever a damaged save raises: it is refused, not crashed on
        raise SaveRefused(f"the search saved in {directory} cannot be read ({e!r}): remove it to start again") from e
    for name, value in ident.items():
        if saved.get(name) != value:
            raise SaveRefused(
                f"the search saved in {directory} had another {name} "
                f"({saved.get(name)!r}, this search has {value!r}){_HINTS.get(name, '')}: "
                f"remove it or use another directory")
    try:
        at, expanded, files = saved["depth"], saved["expanded"], saved["files"]
    except KeyError as e:
        raise SaveRefused(f"the search saved in {directory} cannot be read ({e!r}): remove it to start again") from e
    if at > depth:
        raise SaveRefused(f"the search saved in {directory} is at depth {at}, past this search's bound of {depth}")
    try:
        for name in _FILES:
            if _file_digest(found / name) != (files[name]["bytes"], files[name]["sha256"]):
                raise ValueError(f"its {name} are not the ones it saved")
        with open(found / "tables.pickle", "rb") as src:
            tables = pickle.load(src)
        learned = tables.pop("learned")
    except Exception as e:
        raise SaveRefused(f"the search saved in {directory} cannot be read ({e!r}): remove it to start again") from e
    symmetry.relearn(learned)
    return Resumed(at, expanded, tables, found / "worlds", found / "following")


def _current(directory: Path) -> Path | None:
    pointer = directory / CURRENT
    return directory / pointer.read_text().strip() if pointer.exists() else None


def _write(path: Path, write: Writer) -> tuple[int, str]:
    """Write a file of worlds, fsynced; its length and SHA-256."""
    digest, length = hashlib.sha256(), 0
    with open(path, "wb") as out:
        def put(data: bytes) -> None:
            nonlocal length
            out.write(data)
            digest.update(data)
            length += len(data)
        write(put)
        _flush(out)
    return length, digest.hexdigest()


def _file_digest(path: Path) -> tuple[int, str]:
    digest, length = hashlib.sha256(), 0
    with open(path, "rb") as src:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            length += len(chunk)
    return length, digest.hexdigest()


def _code_digest() -> str:
    """A digest of the source of every module of this repository loaded, but tests
    (test_*.py, conftest.py): what the search runs, whichever entry point loaded it."""
    digest = hashlib.sha256()
    for source in sorted(_loaded_sources()):
        digest.update(str(source.relative_to(_ROOT)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def _loaded_sources() -> set[Path]:
    found = set()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if (path.suffix == ".py" and path.is_relative_to(_ROOT) and path.relative_to(_ROOT).parts[0] in _MODEL
                and not path.name.startswith("test_") and path.name != "conftest.py"):
            found.add(path)
    return found


def _flush(out: IO[Any]) -> None:
    out.flush()
    fsutil.fsync_file(out.fileno())
