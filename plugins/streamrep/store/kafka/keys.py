"""The record formats of the Kafka store's internal topics and transactional ids: one codec.

Invariants:

- A record key joins its fields with ``SEPARATOR`` (the ASCII unit separator, which no stream UUID,
  catalog kind, topic name or position key contains). Every field but the last must not contain it;
  the last may (a catalog key, a mark name), since a key is split at most ``fields - 1`` times.
- Keys are UTF-8 in Kafka. A record without a value (a tombstone) deletes its key when folded.
- ``catalog``: ``<kind>␟<key>`` -> the document as JSON.
- ``marks``: ``<stream uuid>␟<mark>`` -> the mark's integer value in ASCII.
- ``syncs``: ``<stream uuid>␟<source position key>␟<source offset>`` -> JSON
  ``[replica partition, replica offset, run length]``.
- A record's format is its ``streamrep.format`` header (``FORMAT_HEADER``); without one it is format 1,
  the format above, which every streamrep so far writes. A later format that changes a value's
  encoding or meaning writes a higher number, and keeps the key's format (what a record names), so an
  older reader can tell which document, stream or source it cannot read (``folds``).
- The parsers are strict, and raise ``ValueError`` naming what is wrong: the records are written by
  streamrep, but anyone allowed to write the topic can write anything there (``folds`` skips it).
- A transactional id names what it writes: ``<internal prefix><kind>.<digest>``, the digest being
  the SHA-1 of the separator-joined parts (ids are kept by the coordinator, so they stay short).
  Writers of the same thing share an id, which is what fences one with the other: changing this
  format would let an old and a new writer of one partition run side by side. It changed once: a
  replica partition's writers shared an id per partition (``partition_txid``), and share one per
  lane now (``apply_txid``). The move is fenced per replica stream (``LANES_MARK``).
- Format 2 is the ``LANES_MARK`` record alone: a streamrep that reads format 1 only refuses the
  replica's marks, and so never applies to it again under its per-partition ids.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

from streamrep.model.lanes import apply_lane

SEPARATOR = "\x1f"
FORMAT = 2  # the newest record format this streamrep reads and writes
LANES_FORMAT = 2  # the format of ``LANES_MARK``
# The mark (never a model mark: those have fields) that says a replica stream's writers use lane ids:
# LANES_MARKED once it is written, LANES_FENCED once every per-partition id was fenced after that.
LANES_MARK = "lanes"
LANES_MARKED = 1
LANES_FENCED = 2
FORMAT_HEADER = "streamrep.format"
_INTEGER = re.compile(r"-?[0-9]+")  # int() would also take spaces, "+", "_" and non-ASCII digits


def record_format(headers: Sequence[tuple[str, bytes | None]] | None) -> int:
    """The format of a record with ``headers`` (none: format 1)."""
    for name, value in headers or ():
        if name == FORMAT_HEADER:
            return _integer(value or b"", "format header")
    return 1


def _integer(text: bytes | str, what: str) -> int:
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"the {what} is not an integer: {text[:40]!r}")
    return int(text)


def _split(record_key: str, fields: int, what: str) -> list[str]:
    parts = record_key.split(SEPARATOR, fields - 1)
    if len(parts) != fields:
        raise ValueError(f"the key {record_key[:80]!r} is no {what} key ({fields} fields)")
    return parts


def _join(*fields: str) -> str:
    for field in fields[:-1]:
        if SEPARATOR in field:
            raise ValueError(f"a key field cannot contain the separator: {field!r}")
    return SEPARATOR.join(fields)


# -- catalog -----------------------------------------------------------------------------------
def catalog_key(kind: str, key: str) -> str:
    """The record key of catalog document ``kind``/``key``."""
    return _join(kind, key)


def parse_catalog_key(record_key: str) -> tuple[str, str]:
    """``(kind, key)`` of a catalog record key."""
    kind, key = _split(record_key, 2, "catalog")
    return kind, key


# -- marks -------------------------------------------------------------------------------------
def mark_key(stream: str, mark: str) -> str:
    """The record key of replication mark ``mark`` of ``stream``."""
    return _join(stream, mark)


def parse_mark_key(record_key: str) -> tuple[str, str]:
    """``(stream, mark)`` of a marks record key."""
    stream, mark = _split(record_key, 2, "marks")
    return stream, mark


def mark_value(value: int) -> bytes:
    return str(value).encode("ascii")


def parse_mark_value(value: bytes) -> int:
    return _integer(value, "mark's value")


# -- offset syncs ------------------------------------------------------------------------------
def sync_key(stream: str, source: str, source_offset: int) -> str:
    """The record key of the offset sync of ``stream`` starting at ``source_offset`` of ``source``."""
    return _join(stream, source, str(source_offset))


def parse_sync_key(record_key: str) -> tuple[str, str, int]:
    """``(stream, source, source offset)`` of a syncs record key."""
    stream, source, offset = _split(record_key, 3, "offset syncs")
    return stream, source, _integer(offset, "source offset")


def sync_value(partition: int, replica_offset: int, count: int) -> bytes:
    return json.dumps([partition, replica_offset, count]).encode("ascii")


def parse_sync_value(value: bytes) -> tuple[int, int, int]:
    fields = json.loads(value)
    if not (
        isinstance(fields, list) and len(fields) == 3 and all(type(f) is int and f >= 0 for f in fields)
    ):  # type(): a bool is no offset
        raise ValueError("an offset sync is not [replica partition, replica offset, run length]")
    partition, replica_offset, count = fields
    return partition, replica_offset, count


# -- transactional ids -------------------------------------------------------------------------
def transactional_id(internal_prefix: str, kind: str, *names: str) -> str:
    """The transactional id of the writes of ``kind`` to the thing ``names`` names."""
    digest = hashlib.sha1(SEPARATOR.join((kind, *names)).encode("utf-8")).hexdigest()[:20]
    return f"{internal_prefix}{kind}.{digest}"


def catalog_txid(internal_prefix: str, kind: str, key: str) -> str:
    """The id of every writer of catalog document ``kind``/``key``."""
    return transactional_id(internal_prefix, "catalog", kind, key)


def partition_txid(internal_prefix: str, stream: str, topic: str, partition: int) -> str:
    """The id every writer of one replica partition had before lanes: fenced, never written under."""
    return transactional_id(internal_prefix, "apply", stream, topic, str(partition))


def lanes_txid(internal_prefix: str, stream: str) -> str:
    """The id of the writers of a replica stream's ``LANES_MARK``."""
    return transactional_id(internal_prefix, "lanes", stream)


def apply_txid(internal_prefix: str, stream: str, topic: str, partition: int) -> str:
    """The id of every writer of one replica partition, its messages and its marks: one per lane of
    the replica stream (``model.lanes``), shared by the partitions of that lane."""
    return transactional_id(internal_prefix, "apply", stream, "lane", str(apply_lane(topic, partition)))
