"""How the commands that show a group print: an aligned table for people by default,
JSON (`--json`) for scripts, with the API's own field names."""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Sequence

from google.protobuf import json_format
from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper
from google.protobuf.message import Message


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def plain(message: Message) -> dict[str, Any]:
    """A message as JSON-ready data: proto field names, unset fields included, 64-bit
    integers as numbers."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True, unquote_int64_if_possible=True)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Columns as wide as their widest cell; "(none)" under the headers for no rows."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]
    for row in (list(headers), *cells):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if not cells:
        print("(none)")


def utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds)) if seconds > 0 else "unset"


def enum_word(enum: EnumTypeWrapper, value: int, prefix: str = "") -> str:
    """An enum value as a lower-case word: AGENT_FAILED with prefix "AGENT_" is "failed"
    (a value this client does not know, from a newer coordinator: its number)."""
    try:
        return enum.Name(value).removeprefix(prefix).lower()
    except ValueError:
        return str(value)
