"""A checksum on every stored record, so a value changed at rest is never served.

LMDB checks nothing of what it returns: a flipped bit in data.mdb came back as a
valid-looking value, was served once the node led, and spread to the nodes that
installed its snapshots. Each value is stored sealed -- SEAL, a CRC-32 of key and
value, the value -- and unsealed on every read, by the digest too (which is
computed over the values as written, so sealed and unsealed replicas agree).

Values stored before seals existed are JSON text (coordinator.core.codec and the
encoded results), which never starts with the byte 0xFF that no UTF-8 text holds;
they are accepted unsealed, explicitly, and sealed when next written.
"""
from __future__ import annotations

import struct
import zlib

from coordinator.storage.protocol import DamagedAtRest

SEAL = b"\xff"
_CRC = struct.Struct(">I")
_HEAD = len(SEAL) + _CRC.size


class RecordDamaged(DamagedAtRest):
    """A stored record no longer matches its checksum."""


def seal(key: bytes, value: bytes) -> bytes:
    return SEAL + _CRC.pack(zlib.crc32(value, zlib.crc32(key))) + value


def unseal(key: bytes, stored: bytes, where: object) -> bytes:
    """The value as written; RecordDamaged (naming `where`, the store) if it changed since."""
    if stored[:1] != SEAL:
        return stored  # written before seals
    value = stored[_HEAD:]
    if len(stored) < _HEAD or _CRC.unpack_from(stored, 1)[0] != zlib.crc32(value, zlib.crc32(key)):
        raise RecordDamaged(f"store {where}: record {bytes(key)[:80]!r} does not match its checksum (damaged at "
                            f"rest); nothing was served from it")
    return value
