"""Replication over a source whose offsets are not gap-free, as on Kafka: transaction markers
take an offset after every committed transaction, and an aborted transaction leaves offsets
that no reader ever gets. Copy, the in-process gateway, the Spark gateway's tasks, status and the
consumer all read spans (``Store.read_span``), so every message arrives exactly once and the
positions reach the source's end offset.

The embedded store has no gaps, so the source cluster here is ``GappedStore``: a test double at
the store boundary that wraps a real ``EmbeddedStore`` and renumbers its offsets the way a
transactional Kafka partition does. The lead's Kafka store tests will cover the same paths on a
real broker; everything above the store here is the real code, on real SQLite files.
"""

from __future__ import annotations

import json
from bisect import bisect_right

import pytest

from integration.replication_helpers import read_next
from streamrep.client.consumer import Consumer
from streamrep.client.producer import Producer
from streamrep.errors import Conflict, InvalidArgument
from streamrep.model.message import Message
from streamrep.model.replication import position_key
from streamrep.replication.apply import plan_apply
from streamrep.replication.copy import CopySummary, copy_stream
from streamrep.replication.gateway import Gateway
from streamrep.replication.reads import read_source
from streamrep.replication.status import replica_status
from streamrep.replication.transfer import SourcePartition, apply_batch, ensure_topics
from streamrep.replication.translate import translate_cursors, translate_offset
from streamrep.store.base import Store
from streamrep.store.embedded import EmbeddedStore

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
TOPIC = "t"


class GappedStore(Store):
    """A transactional Kafka partition's offsets over an embedded store (a test double).

    Every ``append`` is one transaction: its messages take consecutive offsets and a commit
    marker takes the next one. ``abort`` consumes offsets for an aborted transaction (its
    messages and its abort marker), none of which a reader gets. ``offsets()`` ends after the
    last marker (Kafka's last stable offset), and ``read_span`` returns that end once a read
    reaches it, as a Kafka consumer's position does. Everything else is the wrapped store's.
    """

    def __init__(self, inner: EmbeddedStore):
        super().__init__(inner.cluster)
        self.inner = inner
        # per (stream, topic, partition): [(inner first, outer first, count)] and the outer end
        self.runs: dict[tuple[str, str, int], list[tuple[int, int, int]]] = {}
        self.ends: dict[tuple[str, str, int], int] = {}
        self.before_read = None  # called once at the next read_span: what happens meanwhile at the source

    # -- offsets: outer (Kafka-like) <-> inner (gap-free) -------------------------------
    def _outer(self, key, inner: int) -> int:
        runs = self.runs[key]
        i = bisect_right([r[0] for r in runs], inner) - 1
        inner_first, outer_first, _ = runs[i]
        return outer_first + inner - inner_first

    def _inner(self, key, outer: int) -> int:
        """The inner offset of the first message at or after outer offset ``outer``."""
        for inner_first, outer_first, count in self.runs.get(key, []):
            if outer < outer_first + count:
                return inner_first + max(0, outer - outer_first)
        return self.inner.offsets(*key)[1]

    def abort(self, stream: str, topic: str, partition: int, messages: int) -> None:
        """An aborted transaction of ``messages`` messages: that many offsets and a marker."""
        key = (stream, topic, partition)
        self.ends[key] = self.ends.get(key, 0) + messages + 1

    # -- data ----------------------------------------------------------------------------
    def append(self, stream, topic, batches):
        firsts = self.inner.append(stream, topic, batches)
        result = {}
        for partition, inner_first in firsts.items():
            key = (stream, topic, partition)
            outer_first = self.ends.get(key, 0)
            self.runs.setdefault(key, []).append((inner_first, outer_first, len(batches[partition])))
            self.ends[key] = outer_first + len(batches[partition]) + 1  # the commit marker
            result[partition] = outer_first
        return result

    def read(self, stream, topic, partition, start, max_messages):
        key = (stream, topic, partition)
        messages = self.inner.read(stream, topic, partition, self._inner(key, start), max_messages)
        return [m._replace(offset=self._outer(key, m.offset)) for m in messages]

    def read_span(self, stream, topic, partition, start, max_messages, readable=None):
        if self.before_read is not None:
            hook, self.before_read = self.before_read, None
            hook()
        key = (stream, topic, partition)
        inner_start = self._inner(key, start)
        messages = self.read(stream, topic, partition, start, max_messages)
        inner_end = self.inner.offsets(stream, topic, partition)[1]
        if inner_start + len(messages) >= inner_end:  # read to the end: past the last markers
            return messages, max(start, self.ends.get(key, 0))
        return messages, messages[-1].offset + 1

    def offsets(self, stream, topic, partition):
        key = (stream, topic, partition)
        first, end = self.inner.offsets(stream, topic, partition)
        return (self._outer(key, first) if first < end else self.ends.get(key, 0)), self.ends.get(key, 0)

    def range_stats(self, stream, topic, partition, start, stop=None):
        key = (stream, topic, partition)
        return self.inner.range_stats(
            stream, topic, partition, self._inner(key, start), None if stop is None else self._inner(key, stop)
        )

    def purge_before(self, stream, topic, timestamp):
        return self.inner.purge_before(stream, topic, timestamp)

    # -- the rest is the wrapped store's ----------------------------------------------------
    def store_id(self):
        return self.inner.store_id()

    def catalog_get(self, kind, key):
        return self.inner.catalog_get(kind, key)

    def catalog_list(self, kind):
        return self.inner.catalog_list(kind)

    def catalog_update(self, kind, key, change):
        return self.inner.catalog_update(kind, key, change)

    def create_topic(self, stream, topic, partitions):
        return self.inner.create_topic(stream, topic, partitions)

    def add_partitions(self, stream, topic, partitions):
        return self.inner.add_partitions(stream, topic, partitions)

    def delete_topic(self, stream, topic):
        return self.inner.delete_topic(stream, topic)

    def topics(self, stream):
        return self.inner.topics(stream)

    def drop_stream(self, stream):
        return self.inner.drop_stream(stream)

    def commit_cursors(self, group, stream, topic, cursors):
        return self.inner.commit_cursors(group, stream, topic, cursors)

    def cursors(self, group, stream, topic):
        return self.inner.cursors(group, stream, topic)

    def groups(self, stream):
        return self.inner.groups(stream)

    def marks(self, stream):
        return self.inner.marks(stream)

    def apply_partitions(self, batches):
        return self.inner.apply_partitions(batches)

    def drop_marks(self, stream, marks):
        return self.inner.drop_marks(stream, marks)

    def offset_syncs(self, stream, source):
        return self.inner.offset_syncs(stream, source)

    def close(self):
        self.inner.close()


@pytest.fixture
def gapped(admin, home):
    """SF on a gapped source cluster (topic t, two partitions) and its replica NY, agreed both
    ways. Returns the admin and the source's GappedStore."""
    source = home._stores["sanfrancisco"] = GappedStore(home.store("sanfrancisco"))
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, TOPIC, 2)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin, source


def transaction(admin, prefix: str, per_partition: int) -> dict[int, list[str]]:
    """One producer flush (one transaction per partition); returns the values by partition."""
    sent: dict[int, list[str]] = {0: [], 1: []}
    with Producer(admin) as producer:
        for i in range(per_partition):
            for partition in (0, 1):
                value = f"{prefix}-{partition}-{i}"
                producer.send(f"{SF}:{TOPIC}", value, partition=partition)
                sent[partition].append(value)
    return sent


def history(admin, source: GappedStore) -> dict[int, list[str]]:
    """Transactions of 5, 1 and 4 messages per partition, with aborted ones in between."""
    uuid = admin.entry(SF).uuid
    sent: dict[int, list[str]] = {0: [], 1: []}
    for prefix, count, aborted in (("a", 5, 3), ("b", 1, 0), ("c", 4, 2)):
        for partition, values in transaction(admin, prefix, count).items():
            sent[partition] += values
        if aborted:
            for partition in (0, 1):
                source.abort(uuid, TOPIC, partition, aborted)
    return sent


def replica_values(admin, partition: int) -> list[str]:
    sp = admin.path(NY)
    entry, store = admin.entry(sp), admin.store(sp)
    start, end = store.offsets(entry.uuid, TOPIC, partition)
    return [m.value.decode() for m in store.read(entry.uuid, TOPIC, partition, start, end - start)]


def positions(admin) -> dict[int, int]:
    marks = admin.store(admin.path(NY)).marks(admin.entry(NY).uuid)
    uuid = admin.entry(SF).uuid
    return {p: marks.get(position_key(uuid, TOPIC, p)) for p in (0, 1)}


def source_ends(admin, source: GappedStore) -> dict[int, int]:
    uuid = admin.entry(SF).uuid
    return {p: source.offsets(uuid, TOPIC, p)[1] for p in (0, 1)}


def unit_of(admin, partition: int = 0) -> SourcePartition:
    return SourcePartition(admin.entry(SF).uuid, TOPIC, partition, admin.path(SF))


def test_the_double_has_the_gaps_of_a_transactional_source(gapped):
    admin, source = gapped
    history(admin, source)
    uuid = admin.entry(SF).uuid
    offsets = [m.offset for m in source.read(uuid, TOPIC, 0, 0, 100)]
    # a: 0-4, marker 5, aborted 6-9 (3 messages and a marker); b: 10, marker 11; c: 12-15, marker 16, aborted 17-19
    assert offsets == [0, 1, 2, 3, 4, 10, 12, 13, 14, 15]
    assert source.offsets(uuid, TOPIC, 0) == (0, 20)
    assert source.read_span(uuid, TOPIC, 0, 5, 1) == (source.read(uuid, TOPIC, 0, 10, 1), 11)
    assert source.read_span(uuid, TOPIC, 0, 13, 100)[1] == 20  # read to the end: past the markers
    assert source.read_span(uuid, TOPIC, 0, 16, 100) == ([], 20)


# -- copystream -----------------------------------------------------------------------------------
@pytest.mark.parametrize("batch_size", [1, 3, 5, 100])
def test_a_copy_from_a_gapped_source_is_exactly_once_and_up_to_date(gapped, batch_size):
    admin, source = gapped
    sent = history(admin, source)
    summary = copy_stream(admin, SF, NY, batch_size=batch_size)
    assert summary.messages == 20
    assert {p: replica_values(admin, p) for p in (0, 1)} == sent
    assert positions(admin) == source_ends(admin, source) == {0: 20, 1: 20}
    [row] = replica_status(admin, SF)
    assert (row.is_uptodate, row.pending_messages, row.lag_millis) == (True, 0, 0)
    # a rerun copies nothing twice
    assert copy_stream(admin, SF, NY, batch_size=batch_size).messages == 0
    assert {p: replica_values(admin, p) for p in (0, 1)} == sent


# -- the in-process gateway -------------------------------------------------------------------------
@pytest.mark.parametrize("max_messages", [1, 4, 5000])
def test_the_gateway_replicates_a_gapped_source_exactly_once_to_its_end(gapped, max_messages):
    admin, source = gapped
    gateway = Gateway(admin, "newyork", "gw1")
    sent = history(admin, source)
    assert gateway.run_once(max_messages=max_messages) == 20
    assert {p: replica_values(admin, p) for p in (0, 1)} == sent
    assert positions(admin) == source_ends(admin, source)
    [row] = replica_status(admin, SF)
    assert (row.state, row.is_uptodate, row.pending_messages) == ("REPLICA_STATE_REPLICATING", True, 0)
    assert gateway.run_once(max_messages=max_messages) == 0  # nothing pending: a pass reads nothing

    more = transaction(admin, "d", 3)
    source.abort(admin.entry(SF).uuid, TOPIC, 0, 1)
    [row] = replica_status(admin, SF)
    assert (row.is_uptodate, row.pending_messages) == (False, 6)
    assert gateway.run_once(max_messages=max_messages) == 6
    assert {p: replica_values(admin, p) for p in (0, 1)} == {p: sent[p] + more[p] for p in (0, 1)}
    assert positions(admin) == source_ends(admin, source) == {0: 26, 1: 24}


# -- apply_batch with spans ---------------------------------------------------------------------------
def test_a_replayed_span_is_skipped_and_one_above_the_position_is_refused(gapped):
    admin, source = gapped
    sent = history(admin, source)
    store, uuid, unit = admin.store(admin.path(NY)), admin.entry(NY).uuid, unit_of(admin)
    src = admin.store(admin.path(SF))
    ensure_topics(src, unit.source_uuid, store, uuid)

    first = read_source(src, unit, 0, 5)  # a's five messages: the next offset is a's marker
    assert first.span == (0, 5)
    assert apply_batch(store, uuid, unit, first.messages, first.source_start, first.span) == 5
    assert apply_batch(store, uuid, unit, first.messages, first.source_start, first.span) == 0  # replay

    # b's message at 10 is read from the marker at 5: no gap, the aborted offsets hold nothing
    second = read_source(src, unit, 5, 1)
    assert ([m.offset for m in second.messages], second.span) == ([10], (5, 11))
    third = read_source(src, unit, 12, 100)  # c, read from above the position (11): a gap
    with pytest.raises(Conflict, match="replication gap"):
        apply_batch(store, uuid, unit, third.messages, third.source_start, third.span)
    assert (replica_values(admin, 0), positions(admin)[0]) == (sent[0][:5], 5)
    # without its span, b's message alone would look like a gap after position 5
    with pytest.raises(Conflict, match="replication gap"):
        apply_batch(store, uuid, unit, second.messages, second.source_start)
    assert apply_batch(store, uuid, unit, second.messages, second.source_start, second.span) == 1
    assert positions(admin)[0] == 11
    assert apply_batch(store, uuid, unit, third.messages, third.source_start, (11, 20)) == 4
    assert (replica_values(admin, 0), positions(admin)[0]) == (sent[0], 20)


def test_a_span_of_only_markers_moves_the_position(gapped):
    admin, source = gapped
    history(admin, source)
    store, uuid, unit = admin.store(admin.path(NY)), admin.entry(NY).uuid, unit_of(admin)
    src = admin.store(admin.path(SF))
    ensure_topics(src, unit.source_uuid, store, uuid)
    read = read_source(src, unit, 0, 100, end=16)  # every message, stopping before c's marker
    assert read.span == (0, 16) and len(read.messages) == 10
    apply_batch(store, uuid, unit, read.messages, read.source_start, read.span)
    assert positions(admin)[0] == 16
    markers = read_source(src, unit, 16, 10)  # c's commit marker and the aborted transaction
    assert (markers.messages, markers.span) == ([], (16, 20))
    assert apply_batch(store, uuid, unit, markers.messages, markers.source_start, markers.span) == 0
    assert positions(admin)[0] == 20
    [row] = replica_status(admin, SF)
    assert row.pending_messages == 10  # partition 1's only: it is not replicated here
    assert replica_values(admin, 0) == [m.value.decode() for m in read.messages]


def test_plan_apply_takes_the_span():
    key = position_key("src", TOPIC, 0)
    batch = [Message(b"x", offset=o, partition=0, topic=TOPIC) for o in (6, 7, 9)]
    plan = plan_apply("rep", "src", TOPIC, 0, batch, {key: 5}, span=(5, 12))
    assert plan.marks[key] == 12 and len(plan.messages) == 3
    assert plan.syncs == [(0, 6), (2, 9)]  # a gap in the source's offsets starts a new run
    assert plan_apply("rep", "src", TOPIC, 0, [], {key: 5}, span=(4, 8)).marks == {key: 8}
    assert plan_apply("rep", "src", TOPIC, 0, [], {key: 9}, span=(4, 8)).empty  # already past it
    with pytest.raises(Conflict, match="replication gap"):
        plan_apply("rep", "src", TOPIC, 0, [], {key: 5}, span=(6, 8))  # would skip offset 5
    with pytest.raises(InvalidArgument, match="does not hold"):
        plan_apply("rep", "src", TOPIC, 0, batch, {key: 5}, span=(5, 9))


# -- offset syncs and cursor translation around gaps -----------------------------------------------------
def test_offset_syncs_break_at_source_gaps_and_translate_exactly(gapped):
    admin, source = gapped
    history(admin, source)
    Gateway(admin, "newyork", "gw1").run_once()  # one batch per partition, gaps inside it
    replica_store, replica_uuid = admin.store(admin.path(NY)), admin.entry(NY).uuid
    syncs = replica_store.offset_syncs(replica_uuid, unit_of(admin).key)
    # (source offset, replica partition, replica offset, run length): a run per transaction
    assert syncs == [(0, 0, 0, 5), (10, 0, 5, 1), (12, 0, 6, 4)]
    end = replica_store.offsets(replica_uuid, TOPIC, 0)[1]
    expected = {0: 0, 4: 4, 5: 5, 7: 5, 10: 5, 11: 6, 12: 6, 15: 9, 16: 10, 20: 10}
    assert {cursor: translate_offset(syncs, cursor, end) for cursor in expected} == expected
    # a consumer group's committed cursor, at the marker after a, fails over to b's message
    source.commit_cursors("g", admin.entry(SF).uuid, TOPIC, {0: 5, 1: 13})
    rows = translate_cursors(admin, SF, NY, "g", commit=True)
    assert {(r.partition, r.replica_offset) for r in rows} == {(0, 5), (1, 7)}
    consumer = Consumer(f"{NY}:{TOPIC}", group="g", admin=admin)
    got = {m.value.decode() for m in consumer.poll(100)}
    assert got == {"b-0-0", "c-0-0", "c-0-1", "c-0-2", "c-0-3", "c-1-1", "c-1-2", "c-1-3"}


# -- the consumer ------------------------------------------------------------------------------------------
def test_a_consumer_of_a_gapped_source_reads_everything_once_and_reaches_the_end(gapped):
    admin, source = gapped
    sent = history(admin, source)
    consumer = Consumer(f"{SF}:{TOPIC}", group="readers", from_start=True, admin=admin)
    got: dict[int, list[str]] = {0: [], 1: []}
    for _ in range(50):
        batch = consumer.poll(3)
        for m in batch:
            got[m.partition].append(m.value.decode())
        if not batch:
            break
    assert got == sent
    assert consumer.positions == source_ends(admin, source)
    assert consumer.lag() == {0: 0, 1: 0}
    consumer.commit()
    again = Consumer(f"{SF}:{TOPIC}", group="readers", admin=admin)
    assert again.poll(100) == [] and again.lag() == {0: 0, 1: 0}
    source.abort(admin.entry(SF).uuid, TOPIC, 1, 2)  # only offsets without messages are new
    assert again.poll(100) == [] and again.lag() == {0: 0, 1: 0}


# -- the Spark gateway's pass tasks ---------------------------------------------------------------------
def test_the_spark_gateways_pass_task_replicates_a_gapped_source_exactly_once(gapped, monkeypatch):
    """What a Spark gateway pass's task runs (``tasks.replicate_share``), in this process: each
    source partition read in spans from the replica's stored position up to the pass's end,
    markers included, so the position reaches the source's end; a repeated pass writes nothing."""
    from streamrep.spark import runtime
    from streamrep.spark.tasks import GatewayPartition, replicate_share

    admin, source = gapped
    # the task's per-process admin is this one, whose source cluster is the double
    monkeypatch.setitem(runtime._ADMINS, runtime.resolve_home(admin.clusters.home), admin)
    sent = history(admin, source)
    ends = source_ends(admin, source)
    # the replica's topics, as the gateway's assignment creates them before a pass
    ensure_topics(source, admin.entry(SF).uuid, admin.store(admin.path(NY)), admin.entry(NY).uuid)
    plan = [GatewayPartition(unit_of(admin, p), ends[p], (admin.entry(NY).uuid,)) for p in (0, 1)]
    commits = list(replicate_share(admin.clusters.home, "newyork", "spark-gw", plan))
    assert [c.errors for c in commits] == [{}, {}]
    assert sum(c.rows for c in commits) == sum(sum(c.written.values()) for c in commits) == 20
    assert positions(admin) == ends
    assert {p: replica_values(admin, p) for p in (0, 1)} == sent
    again = list(replicate_share(admin.clusters.home, "newyork", "spark-gw", plan))
    assert sum(c.rows for c in again) == 0  # nothing past the stored positions
    [row] = replica_status(admin, SF)
    assert row.is_uptodate and row.pending_messages == 0


# -- retention at the source while a span is read -------------------------------------------------------------
def test_messages_removed_by_retention_just_before_a_read_are_recorded_as_lost(gapped):
    """A span starting at the position says nothing about messages retention removed after the
    gateway looked at the source's offsets and before it read: the source's first offset, read
    after the read, records them as lost instead of skipping them silently."""
    admin, source = gapped
    with Producer(admin) as producer:
        for i in range(6):
            producer.send(f"{SF}:{TOPIC}", f"m{i}", partition=0, timestamp=1000 + i)
    gateway = Gateway(admin, "newyork", "gw1")
    units = gateway.assignment().units
    unit = unit_of(admin, 0)
    read = read_next(gateway, unit, units[unit], 2)
    assert not gateway.apply_reads({unit: (units[unit], read.messages, read.source_start, read.span)})[unit][1]
    assert positions(admin)[0] == 2
    uuid = admin.entry(SF).uuid
    source.before_read = lambda: source.purge_before(uuid, TOPIC, 1004)  # drops offsets 0-3
    gateway.run_once()
    assert replica_values(admin, 0) == ["m0", "m1", "m4", "m5"]
    assert positions(admin)[0] == source.offsets(uuid, TOPIC, 0)[1] == 7
    [row] = replica_status(admin, SF)
    assert not row.is_uptodate and "t/0 offsets 2-3 (2)" in row.errors


def test_a_copy_summary_reads_back_as_the_spark_app_prints_it(gapped):
    admin, _ = gapped
    summary = copy_stream(admin, SF, NY)
    printed = json.loads(json.dumps(summary.to_dict()))
    assert list(printed) == ["source", "destination", "messages", "positions"]
    assert printed["positions"] == {f"{t}:{p}": end for t, p, end in summary.positions}
    assert CopySummary.from_dict(printed) == summary
