"""Fixtures shared by every test directory."""
from tests.support.cluster import client, cluster, shared_client, shared_cluster  # noqa: F401  (pytest finds fixtures by name)
from tests.support.s3 import own_s3_server, s3_server, s3_url  # noqa: F401,E402
