"""A stream's messages as Spark rows and back: the ``streamrep`` schema, and Arrow batches of it.

One row is one message of one source partition (``SCHEMA``). The readers yield Arrow batches of
it (``read_range``); the writers take any batches of it apart again, in runs of one source
partition each (``batch_runs``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamrep.model.message import Message
from streamrep.model.paths import parse_stream_path
from streamrep.replication.reads import read_until
from streamrep.replication.transfer import SourcePartition
from streamrep.store.base import Store

READ_CHUNK = 10_000  # messages per store read, and so per Arrow batch and per apply transaction

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
        # As Spark's Kafka source has them, so a job written for Kafka ports over: a timestamp, and
        # its type (0 = CreateTime: streamrep keeps the producer's time).
        StructField("timestamp", TimestampType(), False),
        StructField("timestampType", IntegerType(), False),
    ]
)
CREATE_TIME = 0  # Kafka's timestampType of a producer's timestamp
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")  # exactly what Spark checks batches against
_HEADERS_TYPE = ARROW_SCHEMA.field("headers").type
_TIMESTAMP_TYPE = ARROW_SCHEMA.field("timestamp").type  # microseconds, UTC
_new_tuple = tuple.__new__


def to_batch(source: str, unit: SourcePartition, messages: Sequence[Message]) -> pa.RecordBatch:
    """Messages of one source partition as an Arrow batch of SCHEMA."""
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
        pa.array([ms * 1000 for ms in timestamps], _TIMESTAMP_TYPE),
        pa.array([CREATE_TIME] * n, pa.int32()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def read_range(source_store: Store, unit: SourcePartition, start: int, end: int) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``unit``'s messages from ``start`` up to ``end`` (exclusive)."""
    source = str(unit.source)
    position = start
    while position < end:
        messages, read_next = read_until(source_store, unit, position, READ_CHUNK, end)
        if read_next <= position:
            return  # nothing more before the end
        if messages:
            yield to_batch(source, unit, messages)
        position = read_next


def _single(column: Any) -> bool:
    return len(pc.unique(column)) == 1


def batch_runs(batch: pa.RecordBatch) -> Iterator[tuple[SourcePartition, list[Message]]]:
    """The rows of an Arrow batch as messages, in runs of one source partition each
    (``offset`` is the source offset)."""
    if batch.num_rows == 0:
        return
    sources = batch.column("source")
    uuids, topics, partitions = batch.column("source_uuid"), batch.column("topic"), batch.column("partition")
    values = batch.column("value").to_pylist()
    keys = batch.column("key").to_pylist()
    offsets = batch.column("offset").to_pylist()
    timestamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()  # back to ms
    header_column = batch.column("headers")
    headers: list[tuple[tuple[str, bytes | None], ...]]
    if pc.sum(pc.list_value_length(header_column)).as_py():
        headers = [tuple((h["key"], h["value"]) for h in row) for row in header_column.to_pylist()]
    else:
        headers = [()] * batch.num_rows
    if _single(uuids) and _single(topics) and _single(partitions) and _single(sources):
        bounds = [(0, batch.num_rows)]
    else:
        idents = list(
            zip(uuids.to_pylist(), topics.to_pylist(), partitions.to_pylist(), sources.to_pylist(), strict=False)
        )
        bounds, first = [], 0
        for i in range(1, len(idents) + 1):
            if i == len(idents) or idents[i] != idents[first]:
                bounds.append((first, i))
                first = i
    for lo, hi in bounds:
        uuid, topic, partition = uuids[lo].as_py(), topics[lo].as_py(), partitions[lo].as_py()
        unit = SourcePartition(uuid, topic, partition, parse_stream_path(sources[lo].as_py(), None))
        messages = [
            _new_tuple(Message, (values[i], keys[i], headers[i], timestamps[i], partition, offsets[i], topic))
            for i in range(lo, hi)
        ]
        yield unit, messages
