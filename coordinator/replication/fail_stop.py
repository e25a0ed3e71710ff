"""Ending a node that can no longer store or apply what Raft has committed.

pysyncobj catches exceptions from its tick and carries on, which after a failed
write leaves it acting on state that is not on disk (and, after a failed fsync, the
page cache no longer says what is), and after a failed apply tries the same entry
again at every tick. A node that stops is safe: the others hold every committed
entry, and it catches up from them once its disk is fixed and it is restarted. The
exit code tells an operator (or Kubernetes) which it was.
"""
from __future__ import annotations

import logging
import os
import traceback
from typing import NoReturn

EXIT_IO_ERROR = 74  # EX_IOERR: the disk failed or is full
EXIT_STORE_FULL = 75  # EX_TEMPFAIL: the store's map reached max_map_size
EXIT_APPLY_FAILED = 70  # EX_SOFTWARE: a committed entry could not be applied (a bug)

log = logging.getLogger(__name__)


def fail_stop(message: str, code: int = EXIT_IO_ERROR) -> NoReturn:
    log.critical("stopping the node: %s", message)
    logging.shutdown()
    os._exit(code)


def describe(exc: BaseException) -> str:
    """An exception on one line: its type, message and the line that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return " ".join(f"{type(exc).__name__}: {exc}".split()) + where
