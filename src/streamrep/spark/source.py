"""The ``streamrep`` PySpark Python Data Source: streams as DataFrames, and replicas as sinks.

Readers (``spark.read`` / ``spark.readStream`` with ``format("streamrep")``):

- ``option("path", "/mapr/<cluster>/<stream>")``: a stream's messages, batch or streaming.
  Options: ``home``, ``topics`` (comma list), ``startingOffsets`` (earliest|latest),
  ``maxRecordsPerTrigger``.
- ``option("gateway", id).option("cluster", C)``: streaming only. The share of a gateway of
  cluster ``C``: every micro-batch heartbeats and recomputes the assignment, so new replicas,
  topics and partitions are picked up without a restart.
- ``option("copyfrom", SRC).option("copyto", DST)``: batch only; each source partition up to
  the end fixed by ``plan_copy`` (passed in option ``ends``, else planned here).

Writers (``format("streamrep")``):

- ``option("mode", "copy").option("copyto", DST)``: batch or streaming, into one stream.
- ``option("mode", "replicate").option("cluster", C)``: streaming, into every unpaused replica
  on cluster ``C`` that each row's source stream feeds.

Exactly-once is the destination's transactional apply (``transfer.apply_batch``), never the
Spark checkpoint: readers resume from the stored positions, writers skip what is already
applied and refuse gaps. The copy and gateway readers' rows carry the span of source offsets
each covers (``SPAN_SCHEMA``), so offsets holding no message (Kafka's transaction markers) move
the positions too. Read and write run in one task with no shuffle, and each input
partition is one source partition, so a write task sees one source partition in offset order.

Nothing open (store, connection, lock) is kept on the pickled objects: stores are opened
inside ``read``/``write``/``latestOffset`` and cached per process in ``_ADMINS``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import Clusters, default_home
from streamrep.errors import InvalidArgument, NotFound
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath, parse_stream_path
from streamrep.replication.copy import CopyPlan, check_copy, copy_partition, plan_copy
from streamrep.replication.gateway import Gateway, Progress, default_gateway_id
from streamrep.replication.transfer import SourcePartition, apply_batch, ensure_topics, next_position, read_until

log = logging.getLogger(__name__)

FORMAT = "streamrep"
READ_CHUNK = 10_000  # messages per store read, and so per Arrow batch and per apply transaction
RETRY_SECONDS = 5.0  # a gateway re-reads a partition its stored positions say is behind at most this often

HEADER = StructType([StructField("key", StringType(), False), StructField("value", BinaryType(), True)])
SCHEMA = StructType(
    [
        StructField("source", StringType(), False),  # the stream path, /mapr/<cluster>/<stream>
        StructField("source_uuid", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("headers", ArrayType(HEADER, False), False),
        StructField("timestamp", LongType(), False),  # ms since the epoch
    ]
)
# The copy and gateway readers add the span of source offsets each row covers: its reader read
# [span_from, span_next) and found this row's message the only one there. A row with offset
# NO_MESSAGE carries only a span (offsets that hold no message, such as Kafka's transaction
# markers), so the writers move the positions past them. Per row, so that the writer's runs,
# however Spark re-batches the rows, know their spans exactly.
SPAN_SCHEMA = StructType(
    SCHEMA.fields
    + [
        StructField("span_from", LongType(), False),
        StructField("span_next", LongType(), False),
    ]
)
NO_MESSAGE = -1
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")  # exactly what Spark checks batches against
SPAN_ARROW_SCHEMA = to_arrow_schema(SPAN_SCHEMA, timezone="UTC")
_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type
_new_tuple = tuple.__new__


# -- per-process state (never pickled) -------------------------------------------------
_ADMINS: dict[str, StreamAdmin] = {}
_GATEWAYS: dict[tuple[str, str, str], Gateway] = {}


def resolve_home(home: str | None) -> str:
    return os.path.abspath(home) if home else default_home()


def admin_for(home: str | None) -> StreamAdmin:
    """This process's admin API over ``home`` (STREAMREP_HOME if None), opened once."""
    key = resolve_home(home)
    admin = _ADMINS.get(key)
    if admin is None:
        admin = _ADMINS[key] = StreamAdmin(Clusters(key))
    return admin


def gateway_for(home: str | None, cluster: str, gateway_id: str) -> Gateway:
    key = (resolve_home(home), cluster, gateway_id)
    gateway = _GATEWAYS.get(key)
    if gateway is None:
        gateway = _GATEWAYS[key] = Gateway(admin_for(home), cluster, gateway_id)
    return gateway


# -- offsets -----------------------------------------------------------------------------
def offset_key(unit: SourcePartition) -> str:
    """The key of a source partition in a Spark offset: ``<source uuid>|<topic>|<partition>``."""
    return f"{unit.source_uuid}|{unit.topic}|{unit.partition}"


def spread(pending: Mapping[str, int], budget: int | None) -> dict[str, int]:
    """Share ``budget`` rows (None: no limit) among partitions with ``pending`` rows each,
    evenly, giving what a small partition does not need to the others."""
    if budget is None:
        return dict(pending)
    shares = {k: 0 for k in pending}
    waiting = sorted((n, k) for k, n in pending.items() if n > 0)
    left = max(0, budget)
    for i, (n, k) in enumerate(waiting):
        fair = left // (len(waiting) - i)
        if fair == 0 and left > 0:
            fair = 1
        shares[k] = min(n, fair)
        left -= shares[k]
    return shares


def limit_rows(limit) -> int | None:
    """The row budget of a Spark ReadLimit; None for no limit."""
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    if limit is None or isinstance(limit, ReadAllAvailable):
        return None
    raise InvalidArgument(f"the streamrep source supports no read limit {type(limit).__name__}")


def default_limit(options: Mapping[str, str]):
    value = options.get("maxrecordspertrigger")
    if value is None:
        return ReadAllAvailable()
    try:
        rows = int(value)
    except ValueError:
        rows = 0
    if rows <= 0:
        raise InvalidArgument(f"maxRecordsPerTrigger must be a positive number, not {value!r}")
    return ReadMaxRows(rows)


# -- rows <-> messages ---------------------------------------------------------------------
def to_batch(
    source: str,
    unit: SourcePartition,
    messages: Sequence[Message],
    spans: tuple[Sequence[int], Sequence[int]] | None = None,
) -> pa.RecordBatch:
    """Messages of one source partition as an Arrow batch of SCHEMA, or of SPAN_SCHEMA with
    ``spans`` (each row's ``span_from`` and ``span_next``)."""
    n = len(messages)
    values, keys, headers, timestamps, _, offsets, _ = zip(*messages, strict=False)
    if any(headers):
        header_array = pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], _HEADERS_TYPE)
    else:
        empty = pa.array([], _HEADERS_TYPE.value_type)
        header_array = pa.ListArray.from_arrays(pa.array([0] * (n + 1), pa.int32()), empty, type=_HEADERS_TYPE)
    columns = [
        pa.array([source] * n, pa.string()),
        pa.array([unit.source_uuid] * n, pa.string()),
        pa.array([unit.topic] * n, pa.string()),
        pa.array([unit.partition] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        header_array,
        pa.array(timestamps, pa.int64()),
    ]
    if spans is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    columns += [pa.array(spans[0], pa.int64()), pa.array(spans[1], pa.int64())]
    return pa.RecordBatch.from_arrays(columns, schema=SPAN_ARROW_SCHEMA)


def read_range(
    source_store, unit: SourcePartition, start: int, end: int, spans: bool = False
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``unit``'s messages from ``start`` up to ``end`` (exclusive).

    :param spans: batches of SPAN_SCHEMA, with a span-only row (offset NO_MESSAGE) for a read
        that found offsets but no message, so that a writer's positions reach ``end``.
    """
    source = str(unit.source)
    position = start
    while position < end:
        messages, read_next = read_until(source_store, unit, position, READ_CHUNK, end)
        if read_next <= position:
            return  # nothing more before the end
        if not spans:
            if messages:
                yield to_batch(source, unit, messages)
        elif messages:
            offsets = [m.offset for m in messages]
            nexts = [o + 1 for o in offsets[:-1]] + [read_next]
            yield to_batch(source, unit, messages, ([position] + nexts[:-1], nexts))
        else:
            span_only = Message(None, offset=NO_MESSAGE, partition=unit.partition, topic=unit.topic)
            yield to_batch(source, unit, [span_only], ([position], [read_next]))
        position = read_next


def _single(column: pa.ChunkedArray | pa.Array) -> bool:
    return len(pc.unique(column)) == 1


def batch_runs(batch: pa.RecordBatch) -> Iterator[tuple[SourcePartition, list[Message], tuple[int, int] | None]]:
    """The rows of an Arrow batch as messages, in runs of one source partition each
    (``offset`` is the source offset), with the span each run covers: None for a batch
    without span columns; with them, a run also ends where the spans are not contiguous."""
    if batch.num_rows == 0:
        return
    spanned = batch.schema.get_field_index("span_next") >= 0
    froms = batch.column("span_from").to_pylist() if spanned else None
    nexts = batch.column("span_next").to_pylist() if spanned else None
    sources = batch.column("source")
    uuids, topics, partitions = batch.column("source_uuid"), batch.column("topic"), batch.column("partition")
    values = batch.column("value").to_pylist()
    keys = batch.column("key").to_pylist()
    offsets = batch.column("offset").to_pylist()
    timestamps = batch.column("timestamp").to_pylist()
    header_column = batch.column("headers")
    if pc.sum(pc.list_value_length(header_column)).as_py():
        headers = [tuple((h["key"], h["value"]) for h in row) for row in header_column.to_pylist()]
    else:
        headers = [()] * batch.num_rows
    contiguous = not spanned or froms[1:] == nexts[:-1]
    if contiguous and _single(uuids) and _single(topics) and _single(partitions) and _single(sources):
        bounds = [(0, batch.num_rows)]
    else:
        idents = list(
            zip(uuids.to_pylist(), topics.to_pylist(), partitions.to_pylist(), sources.to_pylist(), strict=False)
        )
        bounds, first = [], 0
        for i in range(1, len(idents) + 1):
            if i == len(idents) or idents[i] != idents[first] or (spanned and froms[i] != nexts[i - 1]):
                bounds.append((first, i))
                first = i
    for lo, hi in bounds:
        uuid, topic, partition = uuids[lo].as_py(), topics[lo].as_py(), partitions[lo].as_py()
        unit = SourcePartition(uuid, topic, partition, parse_stream_path(sources[lo].as_py(), None))
        messages = [
            _new_tuple(Message, (values[i], keys[i], headers[i], timestamps[i], partition, offsets[i], topic))
            for i in range(lo, hi)
            if offsets[i] != NO_MESSAGE
        ]
        yield unit, messages, (froms[lo], nexts[hi - 1]) if spanned else None


# -- input partitions ------------------------------------------------------------------------
@dataclass
class RangePartition(InputPartition):
    """One source partition, read from ``start`` (or the stored position) up to ``end``."""

    unit: SourcePartition
    start: int
    end: int

    def __post_init__(self):
        InputPartition.__init__(self, offset_key(self.unit))


@dataclass
class CopyPartition(InputPartition):
    """One source partition of a copy: from the destination's stored position up to ``end``."""

    unit: SourcePartition
    end: int
    destination: str
    destination_uuid: str

    def __post_init__(self):
        InputPartition.__init__(self, offset_key(self.unit))


@dataclass
class GatewayPartition(InputPartition):
    """One source partition of a gateway's share: from the lowest stored position of its
    replicas (``replica_uuids``) up to ``end``."""

    unit: SourcePartition
    end: int
    replica_uuids: tuple[str, ...]

    def __post_init__(self):
        InputPartition.__init__(self, offset_key(self.unit))


# -- reader (a): a stream's messages --------------------------------------------------------
class _StreamOptions:
    """The options of a stream read, parsed (plain data only: picklable)."""

    def __init__(self, options: Mapping[str, str]):
        self.home = options.get("home")
        self.path = options.get("path")
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


def _read_range_partition(home: str | None, partition: RangePartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return  # Spark plans InputPartition(None) when partitions() returns none
    store = admin_for(home).store(partition.unit.source)
    yield from read_range(store, partition.unit, partition.start, partition.end)


class StreamBatchReader(DataSourceReader):
    def __init__(self, options: _StreamOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        result = []
        for unit, start, end in self.options.bounds().values():
            if self.options.starting == "earliest" and end > start:
                result.append(RangePartition(unit, start, end))
        return result

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range_partition(self.options.home, partition)


class StreamStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream's messages as a stream. A source partition that appears later is read from
    its start, as a Kafka consumer reads a new partition."""

    def __init__(self, options: _StreamOptions, limit):
        self.options = options
        self.limit = limit
        self.target: dict[str, int] | None = None  # the ends fixed for Trigger.AvailableNow

    def initialOffset(self) -> dict:
        index = 1 if self.options.starting == "earliest" else 2
        return {k: b[index] for k, b in self.options.bounds().items()}

    def getDefaultReadLimit(self):
        return self.limit

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = {k: end for k, (_, _, end) in self.options.bounds().items()}

    def latestOffset(self, start: dict, limit) -> dict:
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

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        _, units = self.options.units()
        result = []
        for key, stop in sorted(end.items()):
            unit = units.get(key)
            begin = start.get(key, 0)
            if unit is not None and stop > begin:
                result.append(RangePartition(unit, begin, stop))
        return result

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        yield from _read_range_partition(self.options.home, partition)


# -- reader (c): copystream ------------------------------------------------------------------
def encode_ends(plan) -> str:
    """A copy plan's ends as the ``ends`` option of the copy reader."""
    return json.dumps({offset_key(u): end for u, end in sorted(plan.ends.items())})


class CopyReader(DataSourceReader):
    """Each source partition of ``copyfrom`` from the destination's stored position up to the
    end the copy was planned with."""

    def __init__(self, options: Mapping[str, str]):
        self.home = options.get("home")
        self.source = options["copyfrom"]
        self.destination = options.get("copyto")
        if not self.destination:
            raise InvalidArgument("option copyto is required with copyfrom")
        self.ends = options.get("ends")

    def partitions(self) -> Sequence[InputPartition]:
        admin = admin_for(self.home)
        if self.ends is None:  # not planned by the caller: plan (and fix the ends) now
            plan = plan_copy(admin, self.source, self.destination)
            dst, dst_uuid, units = plan.destination, plan.destination_uuid, dict(plan.ends)
        else:  # planned by the driver with plan_copy: its ends, and the streams it prepared
            try:
                ends = {str(k): int(v) for k, v in json.loads(self.ends).items()}
            except (ValueError, AttributeError, TypeError):
                raise InvalidArgument("option ends must be a JSON object of source partition ends") from None
            src, dst = admin.path(self.source), admin.path(self.destination)
            src_entry, dst_entry = check_copy(admin, src, dst)
            if dst_entry is None:
                raise NotFound(f"stream {dst} does not exist (plan the copy with plan_copy first)")
            dst_uuid = dst_entry.uuid
            units = {}
            for key, end in ends.items():
                uuid, topic, partition = key.rsplit("|", 2)
                if uuid != src_entry.uuid:
                    raise InvalidArgument(f"option ends names source partition {key}, not one of {src}")
                units[SourcePartition(uuid, topic, int(partition), src)] = end
        return [CopyPartition(unit, end, str(dst), dst_uuid) for unit, end in sorted(units.items())]

    def read(self, partition: CopyPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, CopyPartition):
            return  # Spark plans InputPartition(None) when partitions() returns none
        admin = admin_for(self.home)
        unit = partition.unit
        source_store = admin.store(unit.source)
        dest_store = admin.store(parse_stream_path(partition.destination, None))
        first, _ = source_store.offsets(unit.source_uuid, unit.topic, unit.partition)
        start = next_position(dest_store, partition.destination_uuid, unit, first)
        yield from read_range(source_store, unit, start, partition.end, spans=True)


def copy_task(
    home: str | None, plan: CopyPlan, units: Sequence[SourcePartition], ids: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """copystream's Spark task (``mapInArrow`` over the indexes ``ids`` into ``units``): copies
    its source partitions in this process with ``copy_partition``, so no message crosses into
    the JVM and back (the reader-into-writer path cost a Python object, an Arrow row and a JVM
    row per message, twice). Yields one row, ``written``. The rights are checked again here, as
    the caller (``STREAMREP_USER``) the task runs as.

    :param plan: the copy, planned once on the driver (``plan_copy``: the ends, the topics).
    :param units: the plan's source partitions, in the order the indexes refer to.
    """
    admin = admin_for(home)
    check_copy(admin, plan.source, plan.destination)
    source_store, dest_store = admin.store(plan.source), admin.store(plan.destination)
    written = 0
    for batch in ids:
        for index in batch.column(0).to_pylist():
            written += copy_partition(source_store, dest_store, plan, units[index], READ_CHUNK)
    yield pa.RecordBatch.from_pydict({"written": pa.array([written], pa.int64())})


# -- reader (b): a gateway's share -------------------------------------------------------------
class GatewayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The source partitions a gateway of ``cluster`` replicates.

    An offset maps each assigned source partition to the source offset the slowest of its
    replicas will have reached after the batch. It starts from the stored positions, not from
    Spark's previous offset: where the positions are behind Spark's offset with nothing new
    (a replica resumed, added, or that failed to apply), the offset moves back to the
    positions once, so a batch re-reads from there (at most every RETRY_SECONDS per partition,
    and once per run under Trigger.AvailableNow, so such a run still ends).
    """

    def __init__(self, home: str | None, cluster: str, gateway_id: str, limit):
        self.home = home
        self.cluster = cluster
        self.gateway_id = gateway_id
        self.limit = limit
        self.target: dict[str, int] | None = None
        self.whole = False  # an availableNow run drains every partition, not just a share
        self.rewound: dict[str, float] = {}

    def _gateway(self) -> Gateway:
        return gateway_for(self.home, self.cluster, self.gateway_id)

    def _share(self):
        gateway = self._gateway()
        gateway.heartbeat()
        units = gateway.assignment(self.whole).units
        gateway.picked_up({f for flows in units.values() for f in flows})
        return units, gateway.progress(units)

    def initialOffset(self) -> dict:
        _, progress = self._share()
        return {offset_key(u): p.position for u, p in sorted(progress.items())}

    def getDefaultReadLimit(self):
        return self.limit

    def prepareForTriggerAvailableNow(self) -> None:
        self.whole = True
        _, progress = self._share()
        self.target = {offset_key(u): p.source_end for u, p in progress.items()}

    def latestOffset(self, start: dict, limit) -> dict:
        _, progress = self._share()
        keyed = {offset_key(u): p for u, p in sorted(progress.items())}
        highs = {}
        for key, p in keyed.items():
            highs[key] = p.source_end if self.target is None else min(p.source_end, self.target.get(key, p.position))
        shares = spread({k: max(0, highs[k] - p.position) for k, p in keyed.items()}, limit_rows(limit))
        now = time.monotonic()
        result = {}
        for key, p in keyed.items():
            end = p.position + shares[key]
            if end == start.get(key) and p.position < end and self._may_rewind(key, now):
                end = p.position  # behind Spark's offset: one batch at the positions, then read on
                self.rewound[key] = now
            result[key] = end
        return result

    def _may_rewind(self, key: str, now: float) -> bool:
        last = self.rewound.get(key)
        if last is None:
            return True
        return self.target is None and now - last >= RETRY_SECONDS

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        units, progress = self._share()
        result = []
        for unit, p in sorted(progress.items()):
            stop = end.get(offset_key(unit))
            if stop is not None and stop > p.position:
                result.append(GatewayPartition(unit, stop, tuple(f.replica_uuid for f in units[unit])))
        return result

    def read(self, partition: GatewayPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, GatewayPartition):
            return
        yield from read_share(self.home, self.cluster, partition)


def read_share(home: str | None, cluster: str, partition: GatewayPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches (SPAN_SCHEMA) of one source partition of a gateway's share, from the lowest
    stored position of its replicas up to ``partition.end``.

    :param home: STREAMREP_HOME (None: the default).
    :param cluster: the gateway's (destination) cluster.
    :param partition: the source partition, its end and its replicas.
    """
    admin = admin_for(home)
    source_store = admin.store(partition.unit.source)
    start = _share_start(admin, cluster, partition, source_store)
    yield from read_range(source_store, partition.unit, start, partition.end, spans=True)


def _share_start(admin: StreamAdmin, cluster: str, partition: GatewayPartition, source_store) -> int:
    """Where a share's source partition resumes: the lowest stored position of its replicas."""
    unit = partition.unit
    dest_store = admin.clusters.store(cluster)
    first, _ = source_store.offsets(unit.source_uuid, unit.topic, unit.partition)
    marks = {r: dest_store.marks(r) for r in set(partition.replica_uuids)}
    return min((next_position(dest_store, r, unit, first, m) for r, m in marks.items()), default=partition.end)


def plan_share(
    units: Mapping[SourcePartition, Sequence],
    progress: Mapping[SourcePartition, Progress],
    budget: int | None = None,
    target: Mapping[str, int] | None = None,
    skip: Iterable[str] = (),
) -> list[GatewayPartition]:
    """The source partitions of a gateway's share that have messages to move now, each with the
    end of this pass: the source's end (capped by ``target``), ``budget`` rows at most in all.

    :param units: the share, each source partition with its flows (``Gateway.assignment``).
    :param progress: where each stands (``Gateway.progress``).
    :param budget: rows per pass at most (``maxRecordsPerTrigger``); None: no limit.
    :param target: offset key -> the end an availableNow run drains to.
    :param skip: offset keys to leave out of this pass.
    """
    skip = set(skip)
    keyed = {offset_key(u): (u, p) for u, p in sorted(progress.items()) if offset_key(u) not in skip}
    highs = {
        k: p.source_end if target is None else min(p.source_end, target.get(k, p.position))
        for k, (_, p) in keyed.items()
    }
    shares = spread({k: max(0, highs[k] - p.position) for k, (_, p) in keyed.items()}, budget)
    return [
        GatewayPartition(u, p.position + shares[k], tuple(f.replica_uuid for f in units[u]))
        for k, (u, p) in keyed.items()
        if shares[k] > 0
    ]


def replicate_share(
    home: str | None, cluster: str, gateway_id: str, partitions: Iterable[GatewayPartition]
) -> Iterator[ApplyCommit]:
    """Read and apply each source partition in this process (one Spark task of the gateway's
    driver loop): the same read and the same transactional apply as the streaming reader and
    writer, so the stored positions stay the only truth, but the messages go straight from the
    read to the apply (no Arrow rows and back). Yields one ApplyCommit per partition (``key``
    set to its offset key)."""
    gateway = gateway_for(home, cluster, gateway_id)
    for partition in partitions:
        commit = _apply_runs(gateway, _share_runs(home, cluster, partition))
        commit.key = offset_key(partition.unit)
        yield commit


def worker_id() -> str:
    """This Python worker process, as the driver of a gateway remembers it: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def slot_share(
    plan: Sequence[GatewayPartition], holders: Mapping[str, str], slices: int, slot: int, worker: str
) -> list[GatewayPartition]:
    """The source partitions of ``plan`` that the task of ``slot`` (of ``slices``) applies when it
    runs in ``worker``: those this worker applied last (``holders``: offset key -> worker id), and
    of those no worker holds, every ``slices``-th from ``slot`` on. A partition held by a worker
    that runs no task of this pass is left to the next pass (the driver forgets its holder); so a
    single task (``slices`` 1) applies the whole plan."""
    if slices <= 1:
        return list(plan)
    return [
        p
        for i, p in enumerate(plan)
        if holders.get(offset_key(p.unit)) == worker or (offset_key(p.unit) not in holders and i % slices == slot)
    ]


def next_holders(
    holders: Mapping[str, str], keys: Iterable[str], applied: Mapping[str, str], slices: int
) -> dict[str, str]:
    """Which worker holds each source partition after a pass: the one that applied it
    (``applied``: offset key -> worker id); none for a key of the pass (``keys``) that nobody
    applied (its worker ran no task: gone, or one worker ran two tasks). A worker holding more
    than its fair share (of ``slices`` tasks) releases the rest, so no core stays idle for good.
    """
    held = dict(holders)
    keys = list(keys)
    fair = -(-len(held.keys() | set(keys)) // max(1, slices))  # of every partition, held or not
    for key in keys:
        if key in applied:
            held[key] = applied[key]
        else:
            held.pop(key, None)
    by_worker: dict[str, list[str]] = {}
    for key, worker in sorted(held.items()):
        by_worker.setdefault(worker, []).append(key)
    for keys_held in by_worker.values():
        for key in keys_held[fair:]:
            del held[key]
    return held


def replicate_slot(
    home: str | None,
    cluster: str,
    gateway_id: str,
    plan: Sequence[GatewayPartition],
    holders: Mapping[str, str],
    slices: int,
    slots: Iterable[int],
) -> Iterator[ApplyCommit]:
    """One task of a gateway pass (``jobs._Passes``): ``replicate_share`` over this task's
    ``slot_share``, each ApplyCommit naming this worker. Spark gives a task to any idle Python
    worker, so the task picks its partitions by the worker it finds itself in: a replica
    partition applied by another worker than last time must initialise its transactional
    producer there, fencing the first (106 ms a pass in one process, 275 ms alternating:
    bench/kafka_fencing.py)."""
    me = worker_id()
    for slot in slots:
        for commit in replicate_share(home, cluster, gateway_id, slot_share(plan, holders, slices, slot, me)):
            commit.worker = me
            yield commit


def warm_worker(home: str | None, cluster: str, gateway_id: str, _slice: Iterable[int]) -> Iterator[int]:
    """One task of the gateway's warm-up job (``jobs._Passes.warm``): this Python worker imports
    what a pass's task needs and opens its gateway, so the first pass with data does not wait
    for it. Yields the worker's process id.

    :param home: STREAMREP_HOME (None: the default).
    :param cluster: the gateway's (destination) cluster.
    :param gateway_id: the gateway's id.
    """
    gateway_for(home, cluster, gateway_id)
    yield os.getpid()


def _share_runs(
    home: str | None, cluster: str, partition: GatewayPartition
) -> Iterator[tuple[SourcePartition, list[Message], tuple[int, int]]]:
    """``read_share``'s reads as runs (``batch_runs``' shape): the messages and the span of each."""
    admin = admin_for(home)
    unit = partition.unit
    source_store = admin.store(unit.source)
    position = _share_start(admin, cluster, partition, source_store)
    while position < partition.end:
        messages, read_next = read_until(source_store, unit, position, READ_CHUNK, partition.end)
        if read_next <= position:
            return
        yield unit, messages, (position, read_next)
        position = read_next


# -- writers -----------------------------------------------------------------------------------
@dataclass
class ApplyCommit(WriterCommitMessage):
    """What one write task applied: rows seen, and messages written and errors by
    ``<source uuid>|<replica uuid>``."""

    rows: int = 0
    written: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    key: str | None = None  # the source partition's offset key, when one task applied one
    worker: str | None = None  # the Python worker that applied it (``worker_id``), in a gateway pass


def flow_key(source_uuid: str, replica_uuid: str) -> str:
    return f"{source_uuid}|{replica_uuid}"


def totals(messages: Iterable[ApplyCommit | None]) -> ApplyCommit:
    total = ApplyCommit()
    for m in messages:
        if m is None:
            continue
        total.rows += m.rows
        for k, n in m.written.items():
            total.written[k] = total.written.get(k, 0) + n
        total.errors.update(m.errors)
    return total


def source_start(source_store, unit: SourcePartition) -> int:
    """The oldest offset the source holds, read when rows are applied, after their read (as
    ``transfer.read_source``): what retention removed before the read is recorded as lost."""
    return source_store.offsets(unit.source_uuid, unit.topic, unit.partition)[0]


def _write_copy(home: str | None, destination: str, batches: Iterator[pa.RecordBatch]) -> ApplyCommit:
    """Apply rows into one destination stream; raises on the first error (a batch job fails)."""
    admin = admin_for(home)
    dst = admin.path(destination)
    dst_entry = admin.entry(dst)
    dest_store = admin.store(dst)
    commit = ApplyCommit()
    prepared: set[SourcePartition] = set()
    for batch in batches:
        for unit, messages, span in batch_runs(batch):
            source_store = admin.store(unit.source)
            if unit not in prepared:
                check_copy(admin, unit.source, dst)  # the rights every copy needs, per source
                ensure_topics(source_store, unit.source_uuid, dest_store, dst_entry.uuid, only=[unit.topic])
                prepared.add(unit)
            written = apply_batch(dest_store, dst_entry.uuid, unit, messages, source_start(source_store, unit), span)
            commit.rows += len(messages)
            key = flow_key(unit.source_uuid, dst_entry.uuid)
            commit.written[key] = commit.written.get(key, 0) + written
    return commit


def _write_replicate(home: str | None, cluster: str, gateway_id: str, batches: Iterator[pa.RecordBatch]) -> ApplyCommit:
    """Apply rows into every unpaused replica on ``cluster`` that their source feeds."""
    return _apply_runs(gateway_for(home, cluster, gateway_id), (run for batch in batches for run in batch_runs(batch)))


def _apply_runs(
    gateway: Gateway, runs: Iterable[tuple[SourcePartition, list[Message], tuple[int, int] | None]]
) -> ApplyCommit:
    """Apply runs of one source partition each (``batch_runs``' shape) into every unpaused
    replica on the gateway's cluster that their source feeds. A replica that fails is reported
    and skipped for the rest of the task; the others go on."""
    by_source = None
    failed: set[tuple[SourcePartition, str]] = set()
    commit = ApplyCommit()
    for unit, messages, span in runs:
        if by_source is None:
            by_source = gateway.active_flows()
        flows = [f for f in by_source.get(unit.source_uuid, ()) if (unit, f.replica_uuid) not in failed]
        start = source_start(gateway.admin.store(unit.source), unit)
        written, errors = gateway.apply(unit, flows, messages, start, span)
        commit.rows += len(messages)
        for flow, n in written.items():
            key = flow_key(flow.source_uuid, flow.replica_uuid)
            commit.written[key] = commit.written.get(key, 0) + n
        for flow, error in errors.items():
            failed.add((unit, flow.replica_uuid))
            commit.errors[flow_key(flow.source_uuid, flow.replica_uuid)] = error
    return commit


def _report(path: str | None, total: ApplyCommit) -> None:
    if not path:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"rows": total.rows, "written": sum(total.written.values()), "errors": total.errors}, f)
    os.replace(tmp, path)


class CopyWriter(DataSourceArrowWriter):
    """Batch write into the stream ``copyto``. Option ``report``: a file where commit()
    leaves the totals as JSON (``{"rows", "written", "errors"}``)."""

    def __init__(self, home: str | None, destination: str, report: str | None):
        self.home = home
        self.destination = destination
        self.report = report

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ApplyCommit:
        return _write_copy(self.home, self.destination, iterator)

    def commit(self, messages: list[ApplyCommit | None]) -> None:
        total = totals(messages)
        log.info("copied %d rows into %s: %d written", total.rows, self.destination, sum(total.written.values()))
        _report(self.report, total)


class CopyStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write into the stream ``copyto``."""

    def __init__(self, home: str | None, destination: str, report: str | None):
        self.home = home
        self.destination = destination
        self.report = report

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ApplyCommit:
        return _write_copy(self.home, self.destination, iterator)

    def commit(self, messages: list[ApplyCommit | None], batchId: int) -> None:
        _report(self.report, totals(messages))


class ReplicateStreamWriter(DataSourceStreamArrowWriter):
    """Streaming write into the replicas on ``cluster`` (the gateway's sink). commit() records
    REPLICATING or UNEXPECTED (with the error) on each replica link the batch touched."""

    def __init__(self, home: str | None, cluster: str, gateway_id: str):
        self.home = home
        self.cluster = cluster
        self.gateway_id = gateway_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ApplyCommit:
        return _write_replicate(self.home, self.cluster, self.gateway_id, iterator)

    def commit(self, messages: list[ApplyCommit | None], batchId: int) -> None:
        total = totals(messages)
        record_pass(gateway_for(self.home, self.cluster, self.gateway_id), total)
        log.info(
            "batch %d: %d rows, %d written, %d errors",
            batchId,
            total.rows,
            sum(total.written.values()),
            len(total.errors),
        )


def record_pass(gateway: Gateway, total: ApplyCommit, by_source: Mapping[str, Sequence] | None = None) -> None:
    """Record REPLICATING or UNEXPECTED (with the error) on each replica link a pass touched.

    :param by_source: the active flows (``Gateway.active_flows``), if the caller has them.
    """
    touched = set(total.written) | set(total.errors)
    if not touched:
        return
    by_source = gateway.active_flows() if by_source is None else by_source
    flows = [f for fs in by_source.values() for f in fs if flow_key(f.source_uuid, f.replica_uuid) in touched]
    errors = {
        f: total.errors[flow_key(f.source_uuid, f.replica_uuid)]
        for f in flows
        if flow_key(f.source_uuid, f.replica_uuid) in total.errors
    }
    gateway.record_states(flows, errors)


# -- the data source -----------------------------------------------------------------------------
class StreamrepDataSource(DataSource):
    """``format("streamrep")``; see the module documentation for its modes."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # The copy and gateway readers feed this source's writers: their rows carry spans.
        return SPAN_SCHEMA if self._read_mode() in ("copy", "gateway") else SCHEMA

    def _opt(self, name: str) -> str | None:
        value = self.options.get(name)
        return value if value not in (None, "") else None

    def _read_mode(self) -> str | None:
        if self._opt("copyfrom"):
            return "copy"
        if self._opt("gateway") is not None or (self._opt("cluster") and not self._opt("path")):
            return "gateway"
        if self._opt("path"):
            return "stream"
        return None

    def _mode(self) -> str:
        mode = self._read_mode()
        if mode is None:
            raise InvalidArgument("the streamrep source needs option path, gateway (with cluster) or copyfrom")
        return mode

    def _gateway_options(self) -> tuple[str, str]:
        cluster = self._opt("cluster")
        if not cluster:
            raise InvalidArgument("option cluster is required with gateway")
        return cluster, self._opt("gateway") or default_gateway_id()

    def reader(self, schema: StructType) -> DataSourceReader:
        mode = self._mode()
        if mode == "copy":
            return CopyReader(self.options)
        if mode == "gateway":
            raise InvalidArgument("a gateway reads as a stream: use spark.readStream")
        return StreamBatchReader(_StreamOptions(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        mode = self._mode()
        if mode == "copy":
            raise InvalidArgument("copyfrom is a batch read: use spark.read")
        limit = default_limit(self.options)
        if mode == "gateway":
            cluster, gateway_id = self._gateway_options()
            return GatewayStreamReader(self._opt("home"), cluster, gateway_id, limit)
        return StreamStreamReader(_StreamOptions(self.options), limit)

    def _destination(self) -> str:
        destination = self._opt("copyto") or self._opt("path")
        if not destination:
            raise InvalidArgument("mode copy needs option copyto (the destination stream)")
        return destination

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        mode = (self._opt("mode") or "copy").lower()
        if mode != "copy":
            raise InvalidArgument(f"a batch write supports mode copy, not {mode!r}")
        return CopyWriter(self._opt("home"), self._destination(), self._opt("report"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        mode = (self._opt("mode") or "replicate").lower()
        if mode == "copy":
            return CopyStreamWriter(self._opt("home"), self._destination(), self._opt("report"))
        if mode == "replicate":
            cluster, gateway_id = self._gateway_options()
            return ReplicateStreamWriter(self._opt("home"), cluster, gateway_id)
        raise InvalidArgument(f"a streaming write supports mode replicate or copy, not {mode!r}")


def register(spark) -> None:
    """Register ``format("streamrep")`` with a SparkSession."""
    spark.dataSource.register(StreamrepDataSource)
