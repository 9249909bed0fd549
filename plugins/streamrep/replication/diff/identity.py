"""What a comparison matches and compares a message by: its **identity** (``Origin``: where it was
first produced, from the header ``streamrep.origin``, else the stream's own UUID, partition and
offset), its place in a stream (``Place``), and the canonical encoding of its content (``canonical``):
the key, value, headers but the origin and imported headers, timestamp and partition."""

from __future__ import annotations

import hashlib
import struct
from functools import lru_cache
from typing import NamedTuple

from streamrep.model.message import IMPORTED_HEADER, ORIGIN_HEADER, Message

DIGEST_SIZE = 16  # bytes of a message's digest (``digest``)


class Origin(NamedTuple):
    """Where a message was first produced: stream UUID, partition, offset."""

    uuid: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.uuid}/{self.partition}/{self.offset}"


def origin_of(message: Message, stream_uuid: str) -> Origin:
    """A message's origin: its ``streamrep.origin`` header, else (the stream, its partition and offset).
    A header that is not ``<uuid>/<partition>/<offset>`` is content, not an origin."""
    header = message.header(ORIGIN_HEADER)
    if header is not None:
        parts = header.split(b"/")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            return Origin(_text(parts[0]), int(parts[1]), int(parts[2]))
    return Origin(stream_uuid, message.partition, message.offset)


@lru_cache(maxsize=1024)
def _text(uuid: bytes) -> str:
    return uuid.decode("ascii", "replace")


@lru_cache(maxsize=1024)
def _uuid_field(uuid: str) -> bytes:
    return _field(uuid.encode("utf-8"))


def content_headers(message: Message) -> tuple[tuple[str, bytes], ...]:
    """The headers compared: all but the origin and the imported header, in order."""
    headers = message.headers
    if not headers or (len(headers) == 1 and headers[0][0] == ORIGIN_HEADER):
        return ()
    return tuple((k, v) for k, v in headers if k not in _NOT_CONTENT)


_NOT_CONTENT = frozenset({ORIGIN_HEADER, IMPORTED_HEADER})  # where a message came from, not what it holds


_LENGTH = struct.Struct(">q")
_NUMBERS = struct.Struct(">qqqq")
_NONE = _LENGTH.pack(-1)


def _field(data: bytes | None) -> bytes:
    return _NONE if data is None else _LENGTH.pack(len(data)) + data


def canonical(origin: Origin, partition: int, message: Message) -> bytes:
    """The canonical encoding of what is compared: identity, partition, key, value, headers (but the
    origin header) and timestamp; lengths before bytes, None distinct from empty."""
    headers = content_headers(message)
    encoded = (
        _uuid_field(origin.uuid)
        + _NUMBERS.pack(origin.partition, origin.offset, partition, message.timestamp)
        + _field(message.key)
        + _field(message.value)
        + _LENGTH.pack(len(headers))
    )
    for name, value in headers:
        encoded += _field(name.encode("utf-8")) + _field(value)
    return encoded


def chained(origin: Origin, partition: int, message: Message, before: int) -> bytes:
    """A message's CRC input: its canonical encoding and ``before``, the origin offset of the message
    before it of the same origin partition in its partition (-1: none), so order counts too."""
    return canonical(origin, partition, message) + _LENGTH.pack(before)


def digest(encoded: bytes) -> bytes:
    """What the full compare keeps of a message's canonical encoding."""
    return hashlib.blake2b(encoded, digest_size=DIGEST_SIZE).digest()


def imported(message: Message) -> bool:
    """Whether importstream appended the message (its header ``streamrep.imported``)."""
    headers = message.headers
    return bool(headers) and any(name == IMPORTED_HEADER for name, _ in headers)


class Place(NamedTuple):
    """Where a stream holds a message: partition and offset."""

    partition: int
    offset: int
