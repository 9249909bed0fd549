"""Messages to and from the embedded store's rows: the headers blob, and the origin header put
back on the messages of an ``origin_runs`` row (``schema``).

Reads build one Message per row, so these run per row: tuples are built with ``tuple.__new__``
and batches compared in C.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from streamrep.model.message import ORIGIN_HEADER, Headers, Message, OriginRun

_new_tuple = tuple.__new__

_NAME_PREFIXES: dict[str, bytes] = {}  # header name -> its encoded length + bytes (names repeat)


def _name_prefix(name: str) -> bytes:
    prefix = _NAME_PREFIXES.get(name)
    if prefix is None:
        raw = name.encode("utf-8")
        prefix = len(raw).to_bytes(2, "big") + raw
        if len(_NAME_PREFIXES) < 1024:
            _NAME_PREFIXES[name] = prefix
    return prefix


def encode_headers(headers: Headers) -> bytes | None:
    """Headers as one blob: per header a 2-byte name length, the UTF-8 name, a 4-byte value
    length and the value. Every replicated message has a header, and this is 6x cheaper than JSON."""
    if not headers:
        return None
    if len(headers) == 1:  # the common case (a replicated message's origin): no generator
        ((k, v),) = headers
        return _name_prefix(k) + len(v).to_bytes(4, "big") + v
    return b"".join(_name_prefix(k) + len(v).to_bytes(4, "big") + v for k, v in headers)


def decode_headers(blob: bytes) -> Headers:
    headers = []
    i, end = 0, len(blob)
    while i < end:
        name_end = i + 2 + int.from_bytes(blob[i : i + 2], "big")
        value_end = name_end + 4 + int.from_bytes(blob[name_end : name_end + 4], "big")
        if value_end > end:
            raise ValueError("truncated message headers")
        headers.append((blob[i + 2 : name_end].decode("utf-8"), bytes(blob[name_end + 4 : value_end])))
        i = value_end
    return tuple(headers)


def same_batch(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """Whether two batches to write hold the same messages (compared in C, never per row in Python)."""
    if a is b:
        return True
    if type(a) is OriginRun or type(b) is OriginRun:
        if not (isinstance(a, OriginRun) and isinstance(b, OriginRun)) or type(a) is not type(b):
            return False
        return a.source is b.source and a.prefix == b.prefix and a.topic == b.topic
    return len(a) == len(b) and list(a) == list(b)


def _plain(rows: Sequence[tuple[Any, ...]], partition: int, topic: str) -> list[Message]:
    # tuple.__new__ skips Message's Python-level __new__: the same tuple, cheaper per row.
    return [
        _new_tuple(Message, (value, key, decode_headers(headers) if headers else (), ts, partition, offset, topic))
        for offset, ts, key, value, headers in rows
    ]


def from_rows(
    rows: Sequence[tuple[Any, ...]], runs: Sequence[tuple[Any, ...]], partition: int, topic: str
) -> list[Message]:
    """Messages from rows ``(offset, ts, key, value, headers)`` in offset order, with the origin
    header put back on those in ``runs`` (``origin_runs`` rows, in order)."""
    if not runs:
        return _plain(rows, partition, topic)
    low = rows[0][0]
    if rows[-1][0] - low != len(rows) - 1:  # never with gap-free offsets: check each row
        return [
            m
            for row in rows
            for m in from_rows([row], [r for r in runs if r[0] <= row[0] < r[0] + r[1]], partition, topic)
        ]
    out: list[Message] = []
    done = 0
    for first, count, prefix, origin_first in runs:
        a, b = max(first - low, done), min(first + count - low, len(rows))
        if b <= a:
            continue
        if a > done:
            out += _plain(rows[done:a], partition, topic)
        delta = origin_first - first
        out += [
            _new_tuple(
                Message,
                (value, key, ((ORIGIN_HEADER, prefix + b"%d" % (offset + delta)),), ts, partition, offset, topic),
            )
            for offset, ts, key, value, _ in rows[a:b]
        ]
        done = b
    if done < len(rows):
        out += _plain(rows[done:], partition, topic)
    return out
