"""The ``streamrep`` stream readers: ``spark.read`` and ``spark.readStream`` of a stream's messages.

Each input partition is one source partition, read from a start to an end offset. The batch
reader reads every source partition from its oldest offset to its end now; the streaming reader's
offsets (``offsets.py``) map each source partition to the source offset read up to.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

from streamrep.errors import InvalidArgument, NotFound
from streamrep.model.paths import StreamPath
from streamrep.replication.transfer import SourcePartition
from streamrep.spark.offsets import Offsets, limit_rows, offset_key, spread
from streamrep.spark.rows import read_range
from streamrep.spark.runtime import admin_for


@dataclass
class RangePartition(InputPartition):
    """One source partition, read from ``start`` up to ``end`` (exclusive)."""

    unit: SourcePartition
    start: int
    end: int

    def __post_init__(self) -> None:
        InputPartition.__init__(self, offset_key(self.unit))


class StreamOptions:
    """The options of a stream read, parsed (plain data only: picklable)."""

    def __init__(self, options: Mapping[str, str]):
        self.home = options.get("home")
        path = options.get("path")
        if not path:
            raise InvalidArgument("the streamrep source needs option path (the stream, /mapr/<cluster>/<stream>)")
        self.path = path
        topics = options.get("topics")
        self.topics = None if not topics else sorted({t.strip() for t in topics.split(",") if t.strip()})
        self.starting = (options.get("startingoffsets") or "earliest").strip().lower()
        if self.starting not in ("earliest", "latest"):
            raise InvalidArgument(f"startingOffsets must be earliest or latest, not {options.get('startingoffsets')!r}")

    def units(self) -> tuple[StreamPath, dict[str, SourcePartition]]:
        """The stream and its source partitions now (of the selected topics), by offset key."""
        admin = admin_for(self.home)
        sp = admin.path(self.path)
        entry = admin.entry(sp)
        admin.require(entry, sp, "consumeperm")
        topics = admin.store(sp).topics(entry.uuid)
        if self.topics is not None:
            missing = [t for t in self.topics if t not in topics]
            if missing:
                raise NotFound(f"topic {sp}:{missing[0]} does not exist")
        units = {}
        for topic, count in topics.items():
            if self.topics is None or topic in self.topics:
                for partition in range(count):
                    unit = SourcePartition(entry.uuid, topic, partition, sp)
                    units[offset_key(unit)] = unit
        return sp, units

    def bounds(self) -> dict[str, tuple[SourcePartition, int, int]]:
        sp, units = self.units()
        store = admin_for(self.home).store(sp)
        return {k: (u, *store.offsets(u.source_uuid, u.topic, u.partition)) for k, u in sorted(units.items())}


def _read_range_partition(home: str | None, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return  # Spark plans InputPartition(None) when partitions() returns none
    store = admin_for(home).store(partition.unit.source)
    yield from read_range(store, partition.unit, partition.start, partition.end)


class StreamBatchReader(DataSourceReader):
    def __init__(self, options: StreamOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        result = []
        for unit, start, end in self.options.bounds().values():
            if self.options.starting == "earliest" and end > start:
                result.append(RangePartition(unit, start, end))
        return result

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range_partition(self.options.home, partition)


class StreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream's messages as a stream. A source partition that appears later is read from
    its start, as a Kafka consumer reads a new partition."""

    def __init__(self, options: StreamOptions, limit: ReadLimit):
        self.options = options
        self.limit = limit
        self.target: dict[str, int] | None = None  # the ends fixed for Trigger.AvailableNow

    def initialOffset(self) -> Offsets:
        earliest = self.options.starting == "earliest"
        return {k: first if earliest else end for k, (_, first, end) in self.options.bounds().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return self.limit

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {k: end for k, (_, _, end) in self.options.bounds().items()}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        bounds = self.options.bounds()
        positions, highs = {}, {}
        for key, (_, first, end) in bounds.items():
            positions[key] = max(start.get(key, first), first)
            highs[key] = end if self.target is None else min(end, self.target.get(key, positions[key]))
        shares = spread({k: max(0, highs[k] - positions[k]) for k in bounds}, limit_rows(limit))
        result = {}
        for key in bounds:
            # Keep Spark's value where there is nothing new, so an idle stream compares equal.
            result[key] = positions[key] + shares[key] if shares[key] else start.get(key, positions[key])
        return result

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        _, units = self.options.units()
        result = []
        for key, stop in sorted(end.items()):
            unit = units.get(key)
            begin = start.get(key, 0)
            if unit is not None and stop > begin:
                result.append(RangePartition(unit, begin, stop))
        return result

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range_partition(self.options.home, partition)
