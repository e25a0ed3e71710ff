"""Paged AdminService reads, read whole."""
from __future__ import annotations

from typing import Any

from agent_client.connection import Connection


def every_page(conn: Connection, method: str, request: Any, items: str) -> tuple[Any, list[Any]]:
    """(the first page, the `items` field of every page in order) of a paged AdminService read."""
    first = answer = conn.call("AdminService", method, request)
    found: list[Any] = list(getattr(answer, items))
    while answer.next_page_token:
        request.page_token = answer.next_page_token
        answer = conn.call("AdminService", method, request)
        found.extend(getattr(answer, items))
    return first, found
