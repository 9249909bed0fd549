"""The expensive step of a comparison: read each side's partitions up to the consistent point and
reduce every message to what the compare needs. A ``Scanner`` does it: ``Reader`` in this process,
or ``streamrep.spark.diff.SparkScanner`` in Spark tasks (``-engine spark``), one unit (a side's
topic partition) at a time: ``scan_digests`` for the full compare, ``scan_crcs`` for the CRC
variant's runs (``CRC_RUN`` consecutive origin offsets of one origin partition). ``fetch`` reads
back the messages a difference names, for the ops directories.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from streamrep.errors import NotFound
from streamrep.model.message import Message
from streamrep.replication.diff.identity import Origin, Place, canonical, chained, digest, imported, origin_of
from streamrep.replication.diff.snapshot import Side
from streamrep.store.base import Store

CRC_RUN = 1_000  # identities per CRC run: consecutive origin offsets of one origin partition
READ_BATCH = 5_000  # messages read at a time


class Scanned(NamedTuple):
    """One message as the comparison keeps it: identity, place, digest of its canonical encoding,
    and whether importstream appended it (its order is compared only with others imported)."""

    origin: Origin
    place: Place
    digest: bytes
    imported: bool = False


@dataclass
class Reader:
    """Reads one side's partitions up to the consistent point, counting what it read: the
    ``Scanner`` of a comparison in this process, and what a Spark task of one scans with."""

    messages: int = 0
    bytes: int = 0

    def scan(self, side: Side, topic: str, partition: int) -> Iterator[Message]:
        held = side.bounds.get((topic, partition))
        if held is None:
            return
        at, end = held
        while at < end:
            try:
                batch, after = side.store.read_span(side.uuid, topic, partition, at, min(READ_BATCH, end - at), end)
            except NotFound:  # the topic was deleted after the run started: it holds nothing now
                return
            for message in batch:
                if message.offset < end:
                    self.messages += 1
                    self.bytes += len(message.value or b"") + len(message.key or b"")
                    yield message
            if after <= at:
                return
            at = after

    def digests(
        self, sides: Mapping[str, Side], units: Sequence[Unit], keep: set[Group] | None
    ) -> Iterator[tuple[Unit, list[Scanned]]]:
        for unit in units:
            yield unit, scan_digests(self, sides[unit[0]], unit[1], unit[2], keep)

    def crcs(self, sides: Mapping[str, Side], units: Sequence[Unit]) -> Iterator[tuple[Unit, PartitionCrcs]]:
        for unit in units:
            yield unit, scan_crcs(self, sides[unit[0]], unit[1], unit[2])


Group = tuple[str, int, str, int]  # (topic, stream partition, origin uuid, origin partition): an order group
Run = tuple[str, str, int, int]  # (topic, origin uuid, origin partition, origin offset // CRC_RUN)
Unit = tuple[str, str, int]  # ("src" or "dst", topic, partition): what one scan reads


class PartitionCrcs(NamedTuple):
    """One partition's CRC32 of each run it holds messages of, and how many messages it read."""

    crcs: dict[Run, int]
    messages: int


class Scanner(Protocol):
    """The expensive step of a comparison, pluggable: read partitions up to the consistent point and
    reduce each message to a ``Scanned`` record (``scan_digests``) or into its run's CRC
    (``scan_crcs``). ``Reader`` scans in this process; ``streamrep.spark.diff.SparkScanner`` in
    Spark tasks. Each yields one result per unit, in the order of ``units``, and counts what it read."""

    messages: int
    bytes: int

    def digests(
        self, sides: Mapping[str, Side], units: Sequence[Unit], keep: set[Group] | None
    ) -> Iterable[tuple[Unit, list[Scanned]]]: ...

    def crcs(self, sides: Mapping[str, Side], units: Sequence[Unit]) -> Iterable[tuple[Unit, PartitionCrcs]]: ...


def scan_digests(reader: Reader, side: Side, topic: str, partition: int, keep: set[Group] | None) -> list[Scanned]:
    """One partition's messages as the full compare keeps them (only those of the order groups in
    ``keep``, when given)."""
    found = []
    for message in reader.scan(side, topic, partition):
        origin = origin_of(message, side.uuid)
        if keep is not None and (topic, partition, origin.uuid, origin.partition) not in keep:
            continue
        kept = digest(canonical(origin, partition, message))
        found.append(Scanned(origin, Place(partition, message.offset), kept, imported(message)))
    return found


def scan_crcs(reader: Reader, side: Side, topic: str, partition: int) -> PartitionCrcs:
    """One partition's CRC32 of each run (each message's CRC input: ``chained``)."""
    crcs: dict[Run, int] = {}
    before: dict[tuple[str, int], int] = {}
    read = 0
    for message in reader.scan(side, topic, partition):
        origin = origin_of(message, side.uuid)
        group = (origin.uuid, origin.partition)
        run = (topic, origin.uuid, origin.partition, origin.offset // CRC_RUN)
        encoded = chained(origin, partition, message, before.get(group, -1))
        before[group] = origin.offset
        crcs[run] = zlib.crc32(encoded, crcs.get(run, 0))
        read += 1
    return PartitionCrcs(crcs, read)


def units(sides: Mapping[str, Side], topic: str, partitions: Iterable[int] | None = None) -> list[Unit]:
    """The units of ``topic`` (of ``partitions`` only, when given) each side holds, the source's first,
    each side's in partition order (the order decides which of two copies is the first)."""
    wanted = None if partitions is None else set(partitions)
    return [
        (name, t, partition)
        for name, side in sides.items()
        for t, partition in sorted(side.bounds)
        if t == topic and (wanted is None or partition in wanted)
    ]


def fetch(store: Store, uuid: str, topic: str, places: Iterable[Place]) -> dict[Place, Message]:
    """The messages at ``places`` of one stream's topic, read a span at a time per partition."""
    wanted: dict[int, set[int]] = defaultdict(set)
    for place in places:
        wanted[place.partition].add(place.offset)
    found: dict[Place, Message] = {}
    for partition, offsets in wanted.items():
        at, end = min(offsets), max(offsets) + 1
        while at < end:
            try:
                batch, after = store.read_span(uuid, topic, partition, at, min(READ_BATCH, end - at))
            except NotFound:
                break
            for message in batch:
                if message.offset in offsets:
                    found[Place(partition, message.offset)] = message
            if after <= at:
                break
            at = after
    return found
