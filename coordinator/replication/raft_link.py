"""How a Raft message travels between two nodes: pysyncobj's framing, and ours.

pysyncobj 0.3.17 frames every message as Fernet(zlib(pickle((peer's key, message))))
under the Raft password: AES-128-CBC, HMAC-SHA256 and base64 over a compressed
pickle. On the messages of a write (a few hundred bytes) zlib costs more than it
saves and Fernet takes three passes where one AEAD call does (benchmarks/
raft_message_cost.py has the figures). The link frame here carries the same pickle,
compressed only when it is large, sealed with AES-256-GCM:

    frame = LINK_V1 | flags | AES-GCM(link key of this direction, nonce = message
            number, payload, associated data = LINK_V1 | flags)

- Confidentiality and authentication: the link keys come from the password (the
  same PBKDF2 stretching pysyncobj applies, then HKDF), so only a node holding the
  password can read or forge a frame; the flags byte is authenticated too.
- Replay: each connection's link keys are derived from both random keys its ends
  exchanged when it opened (pysyncobj's key exchange), one key per direction, and
  the nonce is the message's number on that connection. A frame recorded on another
  connection, or earlier on this one, or sent back to its sender, does not open:
  stricter than pysyncobj's check (the peer's key in every message, and a sender
  timestamp of whole seconds that must not go backwards).
- Rolling upgrade: a node of this version marks the random key it sends with
  LINK_OFFER (inside the Fernet-sealed key exchange, so no one without the password
  can add or strip the mark); an old node echoes the marked key like any other.
  Link frames go only to a peer whose key carried the mark, and only after the key
  exchange, which stays in pysyncobj's framing. Both framings are read; once a
  connection has carried a link frame, a Fernet frame on it is refused.

The pickle is the one pysyncobj reads today (after authentication, as before);
only what wraps it changes.
"""
from __future__ import annotations

import base64
import struct
import zlib
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC
from pysyncobj import pickle as pysyncobj_pickle

# The first byte of a link frame. A Fernet token is base64 and starts with "g"
# (its version byte 0x80, encoded), so one byte tells the framings apart.
LINK_V1 = 0x01
# Appended to a node's random key by a node that reads link frames.
LINK_OFFER = b"raftpoint-link-v1"
# Payloads up to this size travel uncompressed: on a write's messages zlib cost more
# CPU than the bytes it saved were worth on a local network.
COMPRESS_ABOVE = 4096
_COMPRESSED = 0x01
_NONCE = struct.Struct(">4xQ")  # 96 bits: the message's number on its connection and direction
_HKDF_LABEL = b"raftpoint raft link v1"
_KEY_LENGTH = struct.Struct(">H")


class LinkRefused(ValueError):
    """A frame that must not be read: the connection carrying it is closed."""


class RaftCipher(Fernet):
    """pysyncobj's encryptor (Fernet, which the key exchange and old peers use), with the
    link secret derived from the same stretched password. `salt` is pysyncobj's: an old
    node must derive the same Fernet key."""

    def __init__(self, password: str | bytes, salt: bytes) -> None:
        stretched = _stretch(password, salt)
        super().__init__(base64.urlsafe_b64encode(stretched))
        self.link_secret = _hkdf(stretched, b"secret", _HKDF_LABEL)


def _stretch(password: str | bytes, salt: bytes) -> bytes:
    """The password stretched exactly as pysyncobj stretches it (PBKDF2-SHA256, 100,000
    rounds): the Fernet key an old node derives is this one."""
    raw = password if isinstance(password, bytes) else password.encode()
    return PBKDF2HMAC(algorithm=hashes.SHA256(), length=32, salt=salt, iterations=100000).derive(raw)


def _hkdf(secret: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(secret)


def offers_link(random_key: Any) -> bool:
    """Whether a node's random key says it reads link frames."""
    return isinstance(random_key, bytes) and random_key.endswith(LINK_OFFER)


def is_link_frame(data: bytes) -> bool:
    return len(data) > 0 and data[0] == LINK_V1


class Link:
    """The two directions of one connection, sealed with keys that exist only for it.

    `own_key` is the random key this end sent during the key exchange, `peer_key` the
    one it received; the peer builds its Link with the two swapped. Not thread-safe:
    pysyncobj's Raft thread owns the connection."""

    def __init__(self, secret: bytes, own_key: bytes, peer_key: bytes) -> None:
        self.keys = (own_key, peer_key)
        self._out = AESGCM(_direction_key(secret, sender=own_key, receiver=peer_key))
        self._in = AESGCM(_direction_key(secret, sender=peer_key, receiver=own_key))
        self._sent = 0
        self._received = 0

    @property
    def opened(self) -> int:
        """How many frames this end has opened: after the first, only link frames are read."""
        return self._received

    def seal(self, message: Any) -> bytes:
        payload = pysyncobj_pickle.dumps(message)
        flags = 0
        if len(payload) > COMPRESS_ABOVE:
            payload, flags = zlib.compress(payload, 3), _COMPRESSED
        header = bytes((LINK_V1, flags))
        sealed = self._out.encrypt(_NONCE.pack(self._sent), payload, header)
        self._sent += 1
        return header + sealed

    def open(self, frame: bytes) -> Any:
        """The message in `frame`; LinkRefused when it is not the next one sealed for this
        connection with this password (forged, tampered, replayed, reordered)."""
        if len(frame) < 2 or frame[0] != LINK_V1 or frame[1] & ~_COMPRESSED:
            raise LinkRefused("not a link frame of version 1")
        header = frame[:2]
        try:
            payload = self._in.decrypt(_NONCE.pack(self._received), frame[2:], header)
        except InvalidTag:
            raise LinkRefused(f"frame {self._received} of this connection does not authenticate") from None
        self._received += 1
        if frame[1] & _COMPRESSED:
            payload = zlib.decompress(payload)
        return pysyncobj_pickle.loads(payload)


def _direction_key(secret: bytes, *, sender: bytes, receiver: bytes) -> bytes:
    """The key of one direction of one connection: both random keys, in the order of
    the direction, so the two directions never share a key (nor a nonce)."""
    return _hkdf(secret, _KEY_LENGTH.pack(len(sender)) + sender + receiver, _HKDF_LABEL + b" direction")
