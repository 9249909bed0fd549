"""The ``streamrep`` data source's code without a Spark session: its options, and its writer fed
what its batch reader yields, re-batched as Spark may (the reads and writes on Spark itself are
in tests/integration/test_spark.py)."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from streamrep.client import Consumer, Producer
from streamrep.errors import InvalidArgument

SF, NY = "/mapr/sanfrancisco/events", "/mapr/newyork/events"


@pytest.fixture
def events(admin, monkeypatch):
    """SF with topic t (3 partitions, 30 messages, some with headers) and an empty NY; the data
    source's per-process admin is this test's."""
    from streamrep.spark import runtime

    monkeypatch.setitem(runtime._ADMINS, runtime.resolve_home(admin.clusters.home), admin)
    admin.create_stream(SF)
    admin.create_topic(SF, "t", 3)
    admin.create_stream(NY, copymetafrom=SF)
    with Producer(admin) as producer:
        for i in range(30):
            producer.send(f"{SF}:t", f"v{i}", key=f"k{i % 7}", headers=[("n", str(i).encode())] if i % 2 else None)
    return admin


def source(**options: str):
    from streamrep.spark.source import StreamrepDataSource

    return StreamrepDataSource({k.lower(): v for k, v in options.items()})  # Spark lower-cases option names


def values(admin, path: str) -> Counter:
    consumer = Consumer(f"{path}:t", from_start=True, admin=admin)
    got: Counter = Counter()
    while batch := consumer.poll(1000, timeout=0.2):
        got.update(m.value.decode() for m in batch)
    return got


def test_options_are_checked_before_any_read_or_write(home):
    from streamrep.spark.reader import StreamBatchReader, StreamStreamReader
    from streamrep.spark.rows import SCHEMA
    from streamrep.spark.writer import CopyStreamWriter, CopyWriter

    assert source(path=SF).schema() == SCHEMA
    with pytest.raises(InvalidArgument, match="needs option path"):
        source().reader(SCHEMA)
    with pytest.raises(InvalidArgument, match="startingOffsets must be earliest or latest"):
        source(path=SF, startingOffsets="newest").streamReader(SCHEMA)
    with pytest.raises(InvalidArgument, match="maxRecordsPerTrigger must be a positive number"):
        source(path=SF, maxRecordsPerTrigger="0").streamReader(SCHEMA)
    assert isinstance(source(path=SF).reader(SCHEMA), StreamBatchReader)
    assert isinstance(source(path=SF, maxRecordsPerTrigger="5").streamReader(SCHEMA), StreamStreamReader)
    with pytest.raises(InvalidArgument, match="needs option copyto"):
        source().writer(SCHEMA, False)
    with pytest.raises(InvalidArgument, match="supports mode copy, not 'replicate'"):
        source(copyto=NY, mode="replicate").streamWriter(SCHEMA, False)
    assert isinstance(source(copyto=NY).writer(SCHEMA, False), CopyWriter)
    assert isinstance(source(copyto=NY).streamWriter(SCHEMA, False), CopyStreamWriter)


@pytest.mark.parametrize("rows_per_batch", [1, 7, 1000])
def test_the_writer_applies_what_the_reader_yields_exactly_once(events, rows_per_batch, tmp_path):
    from streamrep.spark.writer import CopyWriter

    admin = events
    reader = source(path=SF, home=admin.clusters.home).reader(None)
    partitions = reader.partitions()
    assert len(partitions) == 3
    table = pa.Table.from_batches([b for p in partitions for b in reader.read(p)])
    assert table.num_rows == 30
    rebatched = [
        b for chunk in range(0, table.num_rows, rows_per_batch) for b in table.slice(chunk, rows_per_batch).to_batches()
    ]
    report = tmp_path / "report.json"
    writer = CopyWriter(admin.clusters.home, NY, str(report))
    commit = writer.write(iter(rebatched))
    assert (commit.rows, sum(commit.written.values()), commit.errors) == (30, 30, {})
    assert values(admin, NY) == Counter(f"v{i}" for i in range(30))
    again = writer.write(iter(rebatched))  # a task repeated by Spark: the stored positions skip it all
    assert (again.rows, sum(again.written.values())) == (30, 0)
    writer.commit([commit, None, again])
    assert report.read_text() == '{"rows": 60, "written": 30, "errors": {}}'
    assert values(admin, NY) == Counter(f"v{i}" for i in range(30))
    copied = {m.value: m for m in Consumer(f"{NY}:t", from_start=True, admin=admin).poll(100)}
    assert ("n", b"1") in copied[b"v1"].headers
    # the timestamp crosses Spark's TimestampType (microseconds) and comes back to the millisecond
    assert table.schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert set(table.column("timestampType").to_pylist()) == {0}
    originals = Consumer(f"{SF}:t", from_start=True, admin=admin).poll(100)
    assert {m.value: m.timestamp for m in originals} == {v: m.timestamp for v, m in copied.items()}


def test_the_streaming_reader_reads_each_offset_range_once(events):
    admin = events
    reader = source(path=SF, home=admin.clusters.home, maxRecordsPerTrigger="10").streamReader(None)
    start = reader.initialOffset()
    assert set(start.values()) == {0}
    seen: Counter = Counter()
    batches = 0
    while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
        rows = [r for p in reader.partitions(start, end) for b in reader.read(p) for r in b.to_pylist()]
        assert len(rows) <= 10
        seen.update(r["value"].decode() for r in rows)
        start, batches = end, batches + 1
    assert batches == 3 and seen == Counter(f"v{i}" for i in range(30))
    with Producer(admin) as producer:
        producer.send(f"{SF}:t", "late", partition=2)
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    [partition] = reader.partitions(start, end)
    assert [r["value"] for b in reader.read(partition) for r in b.to_pylist()] == [b"late"]
