"""Ending a node that can no longer store what Raft has committed.

pysyncobj catches exceptions from its tick and carries on, which after a failed
write leaves it acting on state that is not on disk (and, after a failed fsync, the
page cache no longer says what is). A node that stops is safe: the others hold
every committed entry, and it catches up from them once its disk is fixed and it
is restarted. The exit code tells an operator (or Kubernetes) which it was.
"""
from __future__ import annotations

import logging
import os
from typing import NoReturn

EXIT_IO_ERROR = 74  # EX_IOERR: the disk failed or is full
EXIT_STORE_FULL = 75  # EX_TEMPFAIL: the store's map reached max_map_size

log = logging.getLogger(__name__)


def fail_stop(message: str, code: int = EXIT_IO_ERROR) -> NoReturn:
    log.critical("stopping the node: %s", message)
    logging.shutdown()
    os._exit(code)
