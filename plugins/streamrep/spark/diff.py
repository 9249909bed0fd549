"""diffstreams and diffstreamswithcrc on Spark (``-engine spark``, MapR's ``-mapreduce true``).

The driver fixes the consistent point and compares, with ``replication/diff/``'s code, the same
as in process; only the expensive step runs in Spark tasks: ``SparkScanner`` reads every message
and digests it (``scan_digests``) or sums it into its run's CRC (``scan_crcs``), one task per
partition of either stream (``scan_task``), and brings back compact records: 40 bytes a message
for the full compare (``pack``), one CRC a run of ``CRC_RUN`` messages for the CRC variant.
Each ``Scanner`` call is one Spark job: one per topic, so ``-first_exit`` stops after the first
topic that differs, as in process. ``diff_job`` runs a whole comparison and writes the ops
directories on the driver.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from streamrep.client.admin import StreamAdmin
from streamrep.model.paths import StreamPath
from streamrep.replication.diff import (
    DIGEST_SIZE,
    DiffResult,
    Group,
    Origin,
    PartitionCrcs,
    Place,
    Reader,
    Scanned,
    Side,
    Unit,
    check_diff,
    scan_crcs,
    scan_digests,
)
from streamrep.replication.ops import DiffRequest, diff_to_ops
from streamrep.spark.runtime import admin_for, resolve_home

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class ScanUnit(NamedTuple):
    """What a task needs of one unit, pickled to it (no store: the task opens its own)."""

    path: StreamPath
    uuid: str
    topic: str
    partition: int
    bounds: tuple[int, int]


class Packed(NamedTuple):
    """One partition's ``Scanned`` records, columnar: the origin UUIDs it names, four numbers a
    message (index into ``uuids``, origin partition, origin offset, offset) and the digests."""

    uuids: list[str]
    numbers: array[int]
    digests: bytes


def pack(scans: Sequence[Scanned]) -> Packed:
    index: dict[str, int] = {}
    numbers = array("q")
    for s in scans:
        numbers.extend(
            (index.setdefault(s.origin.uuid, len(index)), s.origin.partition, s.origin.offset, s.place.offset)
        )
    return Packed(list(index), numbers, b"".join(s.digest for s in scans))


def unpack(packed: Packed, partition: int) -> list[Scanned]:
    uuids, n, d = packed.uuids, packed.numbers, packed.digests
    return [
        Scanned(
            Origin(uuids[n[4 * j]], n[4 * j + 1], n[4 * j + 2]),
            Place(partition, n[4 * j + 3]),
            d[DIGEST_SIZE * j : DIGEST_SIZE * (j + 1)],
        )
        for j in range(len(n) // 4)
    ]


def scan_task(
    home: str,
    streams: tuple[str, str],
    units: Sequence[ScanUnit],
    crc: bool,
    keep: set[Group] | None,
    indexes: Iterable[int],
) -> Iterator[tuple[int, Packed | PartitionCrcs, int, int]]:
    """A Spark task: scan its units (``indexes`` into ``units``) in this Python worker, with the
    rights checked again as the caller the task runs as. Yields per unit its index, what it found
    (``Packed`` records, or with ``crc`` its ``PartitionCrcs``), and the messages and bytes read."""
    admin = admin_for(home)
    check_diff(admin, *streams)
    for i in indexes:
        unit = units[i]
        side = Side(unit.path, unit.uuid, admin.store(unit.path), {(unit.topic, unit.partition): unit.bounds})
        reader = Reader()
        if crc:
            found: Packed | PartitionCrcs = scan_crcs(reader, side, unit.topic, unit.partition)
        else:
            found = pack(scan_digests(reader, side, unit.topic, unit.partition, keep))
        yield i, found, reader.messages, reader.bytes


class SparkScanner:
    """The ``Scanner`` of a comparison on Spark: each call is one Spark job, a task per unit.

    :param streams: the source and destination as given (the tasks check the rights on them).
    """

    def __init__(self, spark: SparkSession, home: str, streams: tuple[str, str]) -> None:
        self.context = spark.sparkContext
        self.home = home
        self.streams = streams
        self.messages = 0
        self.bytes = 0

    def _scan(
        self, sides: Mapping[str, Side], units: Sequence[Unit], crc: bool, keep: set[Group] | None = None
    ) -> list[Any]:
        """What ``scan_task`` found for each of ``units``, in their order."""
        if not units:
            return []
        specs = [
            ScanUnit(sides[name].path, sides[name].uuid, topic, partition, sides[name].bounds[(topic, partition)])
            for name, topic, partition in units
        ]
        job = functools.partial(scan_task, self.home, self.streams, specs, crc, keep)
        what = "CRCs" if crc else "digests"
        self.context.setJobDescription(f"diff {self.streams[0]} {self.streams[1]}: {what} of {units[0][1]}")
        found: list[Any] = [None] * len(specs)
        for i, scanned, messages, size in (
            self.context.parallelize(range(len(specs)), len(specs)).mapPartitions(job).collect()
        ):
            found[i] = scanned
            self.messages += messages
            self.bytes += size
        return found

    def digests(
        self, sides: Mapping[str, Side], units: Sequence[Unit], keep: set[Group] | None
    ) -> Iterator[tuple[Unit, list[Scanned]]]:
        for unit, packed in zip(units, self._scan(sides, units, False, keep), strict=True):
            yield unit, unpack(packed, unit[2])

    def crcs(self, sides: Mapping[str, Side], units: Sequence[Unit]) -> Iterator[tuple[Unit, PartitionCrcs]]:
        yield from zip(units, self._scan(sides, units, True), strict=True)


def diff_job(spark: SparkSession, admin: StreamAdmin, request: DiffRequest, home: str | None = None) -> DiffResult:
    """``request`` on Spark: the comparison of ``replication/diff/`` with a ``SparkScanner``; the ops
    directories written into its ``outdir`` (checked first: a new or empty directory) by the driver."""
    scanner = SparkScanner(spark, resolve_home(home or admin.clusters.home), (request.src, request.dst))
    return diff_to_ops(admin, request, scanner)
