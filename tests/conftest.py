"""Fixtures shared by every test directory."""
from tests.support.cluster import client, cluster  # noqa: F401  (pytest finds fixtures by name)
