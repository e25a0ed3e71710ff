"""Fixtures shared by every test directory."""
from tests.support.cluster import client, cluster, shared_client, shared_cluster  # noqa: F401  (pytest finds fixtures by name)
