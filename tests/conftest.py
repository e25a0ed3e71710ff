"""Fixtures shared by every test directory."""
from __future__ import annotations

import logging
from typing import Iterator

import pytest

from tests.support.cluster import client, cluster, shared_client, shared_cluster  # noqa: F401  (pytest finds fixtures by name)
from tests.support.s3 import own_s3_server, s3_server, s3_url  # noqa: F401


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A test that runs the node's main() installs a root handler bound to the sys.stderr
    of that moment, which is pytest's capture file for that one test: every later log
    line in the process would then fail on a closed file and print a traceback instead."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    root.handlers[:], level = saved
    root.setLevel(level)
