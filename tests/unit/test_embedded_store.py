"""Tests for streamrep.store.embedded: the SQLite store behind embedded clusters."""

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.errors import (
    AlreadyExists,
    CorruptStore,
    InvalidArgument,
    NotFound,
    StreamrepError,
    Unavailable,
)
from streamrep.model.message import Message
from streamrep.store.embedded import EmbeddedStore

S = "stream-uuid-1"


@pytest.fixture
def store(tmp_path):
    st_ = EmbeddedStore("sanfrancisco", str(tmp_path / "clusters" / "sanfrancisco.db"))
    yield st_
    st_.close()


def msgs(*values, ts=1000, **kw):
    return [Message(v if isinstance(v, bytes) else v.encode(), timestamp=ts, **kw) for v in values]


def values(messages):
    return [m.value.decode() for m in messages]


# --- topics ---------------------------------------------------------------------


def test_create_topic_and_list(store):
    store.create_topic(S, "clicks", 3)
    store.create_topic(S, "views", 1)
    store.create_topic("other-stream", "clicks", 2)
    assert store.topics(S) == {"clicks": 3, "views": 1}
    assert store.topics("other-stream") == {"clicks": 2}
    assert store.topics("no-such-stream") == {}


def test_create_existing_topic(store):
    store.create_topic(S, "clicks", 1)
    with pytest.raises(AlreadyExists, match="topic clicks already exists"):
        store.create_topic(S, "clicks", 2)
    assert store.topics(S) == {"clicks": 1}


def test_add_partitions(store):
    store.create_topic(S, "clicks", 1)
    store.append(S, "clicks", {0: msgs("a")})
    store.add_partitions(S, "clicks", 3)
    assert store.topics(S) == {"clicks": 3}
    assert store.offsets(S, "clicks", 2) == (0, 0)
    assert store.offsets(S, "clicks", 0) == (0, 1)
    store.add_partitions(S, "clicks", 3)  # same count: nothing to do
    assert store.topics(S) == {"clicks": 3}


def test_add_partitions_never_shrinks(store):
    store.create_topic(S, "clicks", 3)
    with pytest.raises(InvalidArgument, match="has 3 partitions; partitions can only be added"):
        store.add_partitions(S, "clicks", 2)


def test_add_partitions_unknown_topic(store):
    with pytest.raises(NotFound, match="topic nope does not exist"):
        store.add_partitions(S, "nope", 2)


# --- append and read ---------------------------------------------------------------


def test_append_offsets_gap_free_across_batches_and_partitions(store):
    store.create_topic(S, "t", 2)
    assert store.append(S, "t", {0: msgs("a", "b"), 1: msgs("x")}) == {0: 0, 1: 0}
    assert store.append(S, "t", {0: msgs("c")}) == {0: 2}
    assert store.append(S, "t", {1: msgs("y", "z"), 0: msgs("d", "e")}) == {1: 1, 0: 3}
    p0 = store.read(S, "t", 0, 0, 100)
    p1 = store.read(S, "t", 1, 0, 100)
    assert [m.offset for m in p0] == [0, 1, 2, 3, 4]
    assert values(p0) == ["a", "b", "c", "d", "e"]
    assert [m.offset for m in p1] == [0, 1, 2]
    assert values(p1) == ["x", "y", "z"]
    assert {m.partition for m in p1} == {1}
    assert {m.topic for m in p0} == {"t"}
    assert store.offsets(S, "t", 0) == (0, 5)
    assert store.offsets(S, "t", 1) == (0, 3)


def test_append_ignores_message_partition_and_offset(store):
    store.create_topic(S, "t", 2)
    store.append(S, "t", {1: [Message(b"v", partition=0, offset=99)]})
    (m,) = store.read(S, "t", 1, 0, 10)
    assert (m.partition, m.offset) == (1, 0)
    assert store.offsets(S, "t", 0) == (0, 0)


def test_append_is_atomic_across_partitions(store):
    store.create_topic(S, "t", 2)
    with pytest.raises(NotFound, match="has no partition 5"):
        store.append(S, "t", {0: msgs("a"), 5: msgs("b")})
    assert store.offsets(S, "t", 0) == (0, 0)
    assert store.read(S, "t", 0, 0, 10) == []


def test_append_to_unknown_topic(store):
    with pytest.raises(NotFound):
        store.append(S, "nope", {0: msgs("a")})


def test_topics_are_separate_per_stream(store):
    store.create_topic(S, "t", 1)
    store.create_topic("s2", "t", 1)
    store.append(S, "t", {0: msgs("mine")})
    store.append("s2", "t", {0: msgs("theirs", "too")})
    assert values(store.read(S, "t", 0, 0, 10)) == ["mine"]
    assert values(store.read("s2", "t", 0, 0, 10)) == ["theirs", "too"]


def test_read_ranges_and_limits(store):
    store.create_topic(S, "t", 1)
    store.append(S, "t", {0: msgs(*[str(i) for i in range(10)])})
    assert values(store.read(S, "t", 0, 3, 4)) == ["3", "4", "5", "6"]
    assert values(store.read(S, "t", 0, 8, 100)) == ["8", "9"]
    assert store.read(S, "t", 0, 10, 100) == []
    assert store.read(S, "t", 0, 50, 100) == []
    assert store.read(S, "t", 0, 0, 0) == []


def test_read_unknown_partition(store):
    store.create_topic(S, "t", 1)
    with pytest.raises(NotFound, match="topic t has no partition 1"):
        store.read(S, "t", 1, 0, 10)


def test_offsets_unknown_partition(store):
    with pytest.raises(NotFound, match="topic t has no partition 0"):
        store.offsets(S, "t", 0)


def test_key_value_timestamp_round_trip(store):
    store.create_topic(S, "t", 1)
    store.append(
        S,
        "t",
        {0: [Message(b"\x00\xffvalue", key=b"\x01key", timestamp=1234567890123), Message(b"", key=None, timestamp=5)]},
    )
    a, b = store.read(S, "t", 0, 0, 10)
    assert (a.value, a.key, a.timestamp) == (b"\x00\xffvalue", b"\x01key", 1234567890123)
    assert (b.value, b.key, b.timestamp, b.headers) == (b"", None, 5, ())


HEADER_NAMES = st.text(min_size=1, max_size=10)


@settings(max_examples=50, deadline=None)
@given(headers=st.lists(st.tuples(HEADER_NAMES, st.binary(max_size=40)), max_size=5))
def test_headers_with_arbitrary_bytes_round_trip(tmp_path_factory, headers):
    store = EmbeddedStore("c", str(tmp_path_factory.mktemp("h") / "c.db"))
    try:
        store.create_topic(S, "t", 1)
        store.append(S, "t", {0: [Message(b"v", headers=tuple(headers))]})
        (m,) = store.read(S, "t", 0, 0, 1)
        assert m.headers == tuple(headers)
    finally:
        store.close()


def test_headers_keep_order_and_duplicates(store):
    store.create_topic(S, "t", 1)
    headers = (("origin", b"\x00\x80\xff"), ("h", b"1"), ("h", b"2"))
    store.append(S, "t", {0: [Message(b"v", headers=headers)]})
    (m,) = store.read(S, "t", 0, 0, 1)
    assert m.headers == headers
    assert m.header("h") == b"2"
    assert m.header("missing") is None


# --- retention ------------------------------------------------------------------------


def test_purge_before_drops_only_the_prefix(store):
    store.create_topic(S, "t", 2)
    # A late old message after a fresh one stays: retention removes a prefix only.
    store.append(
        S,
        "t",
        {
            0: [
                Message(b"old1", timestamp=100),
                Message(b"old2", timestamp=200),
                Message(b"new", timestamp=1000),
                Message(b"late-old", timestamp=150),
            ],
            1: [Message(b"new1", timestamp=2000)],
        },
    )
    assert store.purge_before(S, "t", 500) == 2
    assert store.offsets(S, "t", 0) == (2, 4)
    assert store.offsets(S, "t", 1) == (0, 1)
    assert values(store.read(S, "t", 0, 0, 10)) == ["new", "late-old"]
    assert [m.offset for m in store.read(S, "t", 0, 0, 10)] == [2, 3]


def test_purge_never_reuses_offsets(store):
    store.create_topic(S, "t", 1)
    store.append(S, "t", {0: msgs("a", "b", "c", ts=10)})
    assert store.purge_before(S, "t", 10_000) == 3
    assert store.offsets(S, "t", 0) == (3, 3)
    assert store.read(S, "t", 0, 0, 10) == []
    assert store.append(S, "t", {0: msgs("d", ts=20_000)}) == {0: 3}
    assert store.offsets(S, "t", 0) == (3, 4)
    assert [(m.offset, m.value) for m in store.read(S, "t", 0, 0, 10)] == [(3, b"d")]


def test_purge_nothing_expired(store):
    store.create_topic(S, "t", 1)
    store.append(S, "t", {0: msgs("a", ts=1000)})
    assert store.purge_before(S, "t", 1000) == 0  # "at or after" the timestamp is kept
    assert store.offsets(S, "t", 0) == (0, 1)


def test_purge_twice_counts_once(store):
    store.create_topic(S, "t", 1)
    store.append(S, "t", {0: msgs("a", "b", ts=1)})
    assert store.purge_before(S, "t", 5) == 2
    assert store.purge_before(S, "t", 5) == 0
    assert store.offsets(S, "t", 0) == (2, 2)


# --- cursors ---------------------------------------------------------------------------


def test_cursors(store):
    store.create_topic(S, "t", 3)
    assert store.cursors("g1", S, "t") == {}
    store.commit_cursors("g1", S, "t", {0: 5, 2: 7})
    store.commit_cursors("g2", S, "t", {0: 1})
    store.commit_cursors("g1", S, "t", {0: 6})
    assert store.cursors("g1", S, "t") == {0: 6, 2: 7}
    assert store.cursors("g2", S, "t") == {0: 1}


def test_commit_cursor_unknown_partition(store):
    store.create_topic(S, "t", 1)
    with pytest.raises(NotFound, match="has no partition 3"):
        store.commit_cursors("g", S, "t", {0: 1, 3: 1})
    assert store.cursors("g", S, "t") == {}


# --- delete ------------------------------------------------------------------------------


def test_delete_topic_removes_data_and_cursors(store):
    store.create_topic(S, "t", 2)
    store.create_topic(S, "keep", 1)
    store.append(S, "t", {0: msgs("a", "b"), 1: msgs("c")})
    store.append(S, "keep", {0: msgs("k")})
    store.commit_cursors("g", S, "t", {0: 2})
    store.delete_topic(S, "t")
    assert store.topics(S) == {"keep": 1}
    with pytest.raises(NotFound):
        store.read(S, "t", 0, 0, 10)
    assert store.cursors("g", S, "t") == {}
    # Recreated, it starts empty, with no cursors left over, after the offsets its earlier
    # incarnation used (replicas keep positions by topic name: reused offsets would be skipped).
    store.create_topic(S, "t", 2)
    assert store.offsets(S, "t", 0) == (2, 2)
    assert store.offsets(S, "t", 1) == (1, 1)
    assert store.read(S, "t", 0, 0, 10) == []
    assert store.cursors("g", S, "t") == {}
    assert store.append(S, "t", {0: msgs("new")}) == {0: 2}
    assert values(store.read(S, "t", 0, 0, 10)) == ["new"]
    # Growing it to 3 partitions: the new one never existed, so it starts at 0.
    store.add_partitions(S, "t", 3)
    assert store.offsets(S, "t", 2) == (0, 0)
    assert values(store.read(S, "keep", 0, 0, 10)) == ["k"]


def test_delete_unknown_topic(store):
    with pytest.raises(NotFound, match="topic nope does not exist"):
        store.delete_topic(S, "nope")


def test_drop_stream(store):
    store.create_topic(S, "a", 1)
    store.create_topic(S, "b", 2)
    store.create_topic("s2", "a", 1)
    store.append(S, "a", {0: msgs("x")})
    store.append("s2", "a", {0: msgs("y")})
    store.commit_cursors("g", S, "a", {0: 1})
    store.drop_stream(S)
    assert store.topics(S) == {}
    assert store.cursors("g", S, "a") == {}
    assert values(store.read("s2", "a", 0, 0, 10)) == ["y"]
    store.drop_stream(S)  # retry: nothing left, no error


# --- catalog ------------------------------------------------------------------------------


def test_catalog_crud(store):
    assert store.catalog_get("stream", "/a") is None
    assert store.catalog_update("stream", "/a", lambda cur: {"n": 1, "was": cur}) == {"n": 1, "was": None}
    assert store.catalog_update("stream", "/a", lambda cur: {"n": cur["n"] + 1}) == {"n": 2}
    store.catalog_update("stream", "/b", lambda cur: {"n": 9})
    store.catalog_update("gateways", "/a", lambda cur: {"other": True})
    assert store.catalog_get("stream", "/a") == {"n": 2}
    assert store.catalog_list("stream") == {"/a": {"n": 2}, "/b": {"n": 9}}
    assert store.catalog_list("gateways") == {"/a": {"other": True}}
    assert store.catalog_update("stream", "/a", lambda cur: None) is None
    assert store.catalog_get("stream", "/a") is None
    assert list(store.catalog_list("stream")) == ["/b"]


def test_catalog_update_aborts_when_change_raises(store):
    store.catalog_update("stream", "/a", lambda cur: {"n": 1})

    def boom(cur):
        raise AlreadyExists("nope")

    with pytest.raises(AlreadyExists, match="nope"):
        store.catalog_update("stream", "/a", boom)
    with pytest.raises(ZeroDivisionError):
        store.catalog_update("stream", "/new", lambda cur: 1 / 0)
    assert store.catalog_get("stream", "/a") == {"n": 1}
    assert store.catalog_get("stream", "/new") is None
    # The store is still usable: the failed transaction was rolled back, not left open.
    store.catalog_update("stream", "/a", lambda cur: {"n": 2})
    assert EmbeddedStore("x", store.path).catalog_get("stream", "/a") == {"n": 2}


# --- files ---------------------------------------------------------------------------------


def test_data_survives_close_and_reopen(tmp_path):
    path = str(tmp_path / "c.db")
    first = EmbeddedStore("c", path)
    first.create_topic(S, "t", 1)
    first.append(S, "t", {0: msgs("a", "b")})
    first.commit_cursors("g", S, "t", {0: 1})
    first.catalog_update("stream", "/s", lambda cur: {"uuid": S})
    first.close()
    second = EmbeddedStore("c", path)
    assert values(second.read(S, "t", 0, 0, 10)) == ["a", "b"]
    assert second.cursors("g", S, "t") == {0: 1}
    assert second.catalog_get("stream", "/s") == {"uuid": S}
    assert second.append(S, "t", {0: msgs("c")}) == {0: 2}
    second.close()
    # Closing and using the same object again reopens it.
    first.close()
    assert first.offsets(S, "t", 0) == (0, 3)
    first.close()


def test_new_store_uses_wal(tmp_path):
    store = EmbeddedStore("c", str(tmp_path / "c.db"))
    store.create_topic(S, "t", 1)
    store.close()
    con = sqlite3.connect(tmp_path / "c.db")
    assert con.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    con.close()


def test_creates_missing_folders(tmp_path):
    path = tmp_path / "a" / "b" / "c.db"
    store = EmbeddedStore("c", str(path))
    store.create_topic(S, "t", 1)
    assert path.exists()
    store.close()


def assert_one_line_unavailable(err, *fragments):
    message = str(err.value)
    assert isinstance(err.value, StreamrepError)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_corrupt_file_is_a_corrupt_store_not_unavailable(tmp_path):
    """Corruption is the user's to fix (restore the file): never Unavailable, which is retried."""
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database at all\n" * 200)
    store = EmbeddedStore("broken", str(path))
    with pytest.raises(CorruptStore) as err:
        store.topics(S)
    assert_one_line_unavailable(err, "cluster broken", str(path))


def test_foreign_sqlite_file_is_a_corrupt_store(tmp_path):
    path = tmp_path / "foreign.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers(name) VALUES ('ada')")
    con.commit()
    con.close()
    store = EmbeddedStore("foreign", str(path))
    with pytest.raises(CorruptStore) as err:
        store.catalog_get("stream", "/a")
    assert_one_line_unavailable(err, "not a streamrep store")
    with pytest.raises(CorruptStore):
        store.create_topic(S, "t", 1)
    # The foreign file is untouched: same tables and data, and not switched to WAL.
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert con.execute("SELECT name FROM customers").fetchall() == [("ada",)]
    assert {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")} == {"customers"}
    con.close()


def test_unknown_store_format_is_a_corrupt_store(tmp_path):
    path = tmp_path / "future.db"
    store = EmbeddedStore("c", str(path))
    store.create_topic(S, "t", 1)
    store.close()
    con = sqlite3.connect(path)
    con.execute("UPDATE store_info SET value='streamrep-embedded-99' WHERE key='format'")
    con.commit()
    con.close()
    with pytest.raises(CorruptStore) as err:
        EmbeddedStore("c", str(path)).topics(S)
    assert_one_line_unavailable(err, "unknown store format", "streamrep-embedded-99")


def test_unwritable_directory_is_unavailable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = EmbeddedStore("c", str(blocker / "clusters" / "c.db"))
    with pytest.raises(Unavailable) as err:
        store.create_topic(S, "t", 1)
    assert_one_line_unavailable(err, "cluster c", "cannot open store")
