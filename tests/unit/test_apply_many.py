"""Origins kept as runs (OriginRun, the embedded store's origin_runs) and the fan-out apply
(Store.apply_many, transfer.apply_to_replicas): readers see the same messages as with a
header per message, and every replica is still checked and written exactly once."""

import sqlite3

import pytest

from streamrep.errors import RetryNow
from streamrep.model.message import ORIGIN_HEADER, Message, OriginRun
from streamrep.model.paths import StreamPath
from streamrep.model.replication import origin_key, position_key, stop_key
from streamrep.replication.apply import plan_apply
from streamrep.replication.transfer import FlowStopped, SourcePartition, apply_batch, apply_to_replicas
from streamrep.store.base import ReplicaApply, Store
from streamrep.store.embedded import EmbeddedStore
from streamrep.store.embedded.schema import FORMAT, FORMAT_1

SRC = "src-uuid"
T = "t"


@pytest.fixture
def store(tmp_path):
    st = EmbeddedStore("ny", str(tmp_path / "ny.db"))
    yield st
    st.close()


def source_batch(first: int, count: int, partition: int = 0) -> list[Message]:
    return [
        Message(b"v%d" % o, b"k%d" % o if o % 2 else None, (), 1000 + o, partition, o, T)
        for o in range(first, first + count)
    ]


def origin(m: Message) -> bytes | None:
    return m.header(ORIGIN_HEADER)


def unit(partition: int = 0) -> SourcePartition:
    return SourcePartition(SRC, T, partition, StreamPath("sf", "/s"))


def test_an_origin_run_reads_as_messages_with_their_origin_header():
    run = OriginRun(source_batch(5, 3), b"src-uuid/0/", T)
    assert len(run) == 3
    assert [origin(m) for m in run] == [b"src-uuid/0/5", b"src-uuid/0/6", b"src-uuid/0/7"]
    assert run[1] == Message(b"v6", None, ((ORIGIN_HEADER, b"src-uuid/0/6"),), 1006, -1, -1, T)
    assert run[1:] == list(run)[1:] and run == list(run) and run != list(run)[:2]


def test_a_plan_of_own_messages_is_one_run(store):
    plan = plan_apply("rep", SRC, T, 0, source_batch(0, 4), {origin_key(SRC, T, 0): 2})
    assert isinstance(plan.messages, OriginRun) and plan.skipped == 2 and plan.syncs == [(0, 2)]
    assert [m.value for m in plan.messages] == [b"v2", b"v3"]


def test_the_embedded_store_reads_back_the_origins_of_runs_between_plain_messages(store):
    store.create_topic("rep", T, 1)
    store.append("rep", T, {0: [Message(b"plain0", timestamp=1)]})
    store.append("rep", T, {0: OriginRun(source_batch(10, 3), b"src-uuid/0/", T)})
    store.append("rep", T, {0: OriginRun(source_batch(13, 2), b"src-uuid/0/", T)})  # continues the run
    store.append("rep", T, {0: [Message(b"plain6", None, (("h", b"x"),), 2)]})
    store.append("rep", T, {0: OriginRun(source_batch(40, 2), b"other/3/", T)})
    runs = store._connection().execute("SELECT first, count, prefix, origin_first FROM origin_runs").fetchall()
    assert runs == [(1, 5, b"src-uuid/0/", 10), (7, 2, b"other/3/", 40)]  # the continuing run was merged
    read = store.read("rep", T, 0, 0, 100)
    assert [m.offset for m in read] == list(range(9))
    assert [origin(m) for m in read] == [None] + [b"src-uuid/0/%d" % o for o in range(10, 15)] + [
        None,
        b"other/3/40",
        b"other/3/41",
    ]
    assert read[7].headers == ((ORIGIN_HEADER, b"other/3/40"),) and read[6].headers == (("h", b"x"),)
    assert [m.key for m in read[1:6]] == [None, b"k11", None, b"k13", None]
    # A read starting inside a run, and one holding its end only.
    assert [origin(m) for m in store.read("rep", T, 0, 3, 2)] == [b"src-uuid/0/12", b"src-uuid/0/13"]
    assert [origin(m) for m in store.read("rep", T, 0, 5, 2)] == [b"src-uuid/0/14", None]


def test_retention_and_topic_deletion_drop_the_runs_they_empty(store):
    store.create_topic("rep", T, 1)
    store.append("rep", T, {0: OriginRun(source_batch(0, 3), b"a/0/", T)})
    store.append("rep", T, {0: OriginRun(source_batch(5, 3), b"b/0/", T)})
    store.purge_before("rep", T, 1003)  # the first run's messages (ts 1000-1002) expire
    con = store._connection()
    assert con.execute("SELECT prefix FROM origin_runs").fetchall() == [(b"b/0/",)]
    assert [origin(m) for m in store.read("rep", T, 0, 0, 10)] == [b"b/0/5", b"b/0/6", b"b/0/7"]
    store.delete_topic("rep", T)
    assert con.execute("SELECT count(*) FROM origin_runs").fetchone() == (0,)


def test_a_format_1_store_is_upgraded_when_opened_and_keeps_its_messages(tmp_path):
    path = str(tmp_path / "old.db")
    old = EmbeddedStore("c", path)
    old.create_topic("s", T, 1)
    old.append("s", T, {0: [Message(b"m", None, ((ORIGIN_HEADER, b"x/0/7"),), 5)]})
    old.close()
    con = sqlite3.connect(path)  # what a format-1 store looks like: no origin_runs
    con.execute("DROP TABLE origin_runs")
    con.execute("UPDATE store_info SET value=? WHERE key='format'", (FORMAT_1,))
    con.commit()
    con.close()
    store = EmbeddedStore("c", path)
    assert [origin(m) for m in store.read("s", T, 0, 0, 10)] == [b"x/0/7"]
    store.append("s", T, {0: OriginRun(source_batch(0, 1), b"y/0/", T)})
    assert [origin(m) for m in store.read("s", T, 0, 0, 10)] == [b"x/0/7", b"y/0/0"]
    assert store._connection().execute("SELECT value FROM store_info WHERE key='format'").fetchone() == (FORMAT,)
    store.close()


@pytest.mark.parametrize("default", [False, True], ids=["embedded", "base-default"])
def test_apply_many_writes_each_replica_and_refuses_only_the_one_whose_marks_moved(store, default):
    for r in ("r1", "r2", "r3"):
        store.create_topic(r, T, 1)
    pkey = position_key(SRC, T, 0)
    store.apply("r2", T, 0, [], {pkey: 9}, {})  # another gateway moved r2
    run = OriginRun(source_batch(0, 3), b"src-uuid/0/", T)
    applies = [ReplicaApply(r, run, {pkey: 3}, {pkey: None}, [(0, 0)]) for r in ("r1", "r2", "r3")]
    apply_many = Store.apply_many if default else EmbeddedStore.apply_many
    results = apply_many(store, T, 0, applies, source=pkey)
    assert results[0] == 0 and results[2] == 0 and isinstance(results[1], RetryNow)
    for r in ("r1", "r3"):
        assert [origin(m) for m in store.read(r, T, 0, 0, 10)] == [b"src-uuid/0/%d" % o for o in range(3)]
        assert store.marks(r) == {pkey: 3}
        assert store.offset_syncs(r, pkey) == [(0, 0, 0, 3)]
    assert store.offsets("r2", T, 0) == (0, 0) and store.marks("r2") == {pkey: 9}


def test_apply_many_copies_equal_plain_batches_to_each_replica(store):
    for r in ("r1", "r2"):
        store.create_topic(r, T, 2)
    store.append("r2", T, {1: [Message(b"before")] * 4})  # the copies land at each replica's own end
    batch = [Message(b"a", b"k", (("h", b"1"),), 7), Message(b"b", None, (), 8)]
    results = store.apply_many(T, 1, [ReplicaApply(r, list(batch), {"m": 1}, {"m": None}) for r in ("r1", "r2")])
    assert results == [0, 4]
    for r, start in (("r1", 0), ("r2", 4)):
        got = store.read(r, T, 1, start, 10)
        assert [(m.value, m.key, m.headers, m.timestamp, m.offset) for m in got] == [
            (b"a", b"k", (("h", b"1"),), 7, start),
            (b"b", None, (), 8, start + 1),
        ]


def test_apply_to_replicas_shares_one_plan_and_reports_each_replica(store):
    for r in ("r1", "r2", "r3", "r4"):
        store.create_topic(r, T, 1)
    pkey, okey = position_key(SRC, T, 0), origin_key(SRC, T, 0)
    store.apply("r3", T, 0, [], {pkey: 2, okey: 2}, {})  # r3 has offsets 0-1 already
    store.apply("r4", T, 0, [], {stop_key(SRC, T, 0): 1}, {})  # a failover stopped r4's flow
    written, errors = apply_to_replicas(store, ["r1", "r2", "r3", "r4"], unit(), source_batch(0, 5))
    assert written == {"r1": 5, "r2": 5, "r3": 3}
    assert isinstance(errors["r4"], FlowStopped) and set(errors) == {"r4"}
    assert [m.value for m in store.read("r3", T, 0, 0, 10)] == [b"v2", b"v3", b"v4"]
    # Replayed: nothing written twice.
    assert apply_to_replicas(store, ["r1", "r2", "r3"], unit(), source_batch(0, 5))[0] == {"r1": 0, "r2": 0, "r3": 0}
    assert [store.offsets(r, T, 0)[1] for r in ("r1", "r2", "r3")] == [5, 5, 3]
    with pytest.raises(FlowStopped):
        apply_batch(store, "r4", unit(), source_batch(5, 1))


def test_a_replica_that_lost_the_race_is_planned_again_and_reports_no_error(tmp_path):
    """Another gateway commits the same batch between this one's plan and its write: the
    retry re-plans from the new marks, finds nothing left, and reports no error."""
    path = str(tmp_path / "ny.db")

    class Racing(EmbeddedStore):
        raced = False

        def apply_partitions(self, batches):
            if not self.raced:
                self.raced = True
                other = EmbeddedStore("ny", path)  # the other gateway, with its own connection
                apply_batch(other, "r1", unit(), source_batch(0, 4))
                other.close()
            return super().apply_partitions(batches)

    store = Racing("ny", path)
    store.create_topic("r1", T, 1)
    written, errors = apply_to_replicas(store, ["r1"], unit(), source_batch(0, 4))
    assert (written, errors) == ({"r1": 0}, {}) and store.raced
    assert [m.value for m in store.read("r1", T, 0, 0, 10)] == [b"v0", b"v1", b"v2", b"v3"]
    store.close()


def test_a_replica_that_fails_leaves_the_others_of_apply_many_written(store):
    store.create_topic("r1", T, 1)  # r2 has no topic t: its apply fails, r1's and r3's commit
    store.create_topic("r3", T, 1)
    pkey = position_key(SRC, T, 0)
    run = OriginRun(source_batch(0, 2), b"src-uuid/0/", T)
    results = store.apply_many(T, 0, [ReplicaApply(r, run, {pkey: 2}, {pkey: None}) for r in ("r1", "r2", "r3")])
    assert results[0] == 0 and results[2] == 0 and "no partition 0" in str(results[1])
    assert store.marks("r2") == {} and store.marks("r3") == {pkey: 2}
    assert [m.value for m in store.read("r3", T, 0, 0, 10)] == [b"v0", b"v1"]
