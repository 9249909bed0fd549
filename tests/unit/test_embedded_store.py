"""Tests for streamrep.store.embedded: the SQLite store behind embedded clusters, beyond what every
store promises (that is tests/store/test_conformance.py, run on this store too)."""

import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.errors import (
    CorruptStore,
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


# --- what the embedded store gives beyond the Store contract (tests/store/test_conformance.py) ----


def test_append_to_unknown_topic(store):
    """NotFound at once (Kafka's producer waits for the topic, then reports it Unavailable)."""
    with pytest.raises(NotFound):
        store.append(S, "nope", {0: msgs("a")})


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


def test_a_topic_made_again_continues_after_the_offsets_of_the_deleted_one(store):
    store.create_topic(S, "t", 2)
    store.append(S, "t", {0: msgs("a", "b"), 1: msgs("c")})
    store.commit_cursors("g", S, "t", {0: 2})
    store.delete_topic(S, "t")
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


def test_objects_creating_one_new_store_at_once_all_open_it(tmp_path):
    """Two processes or threads that create the same new store race safely: SQLite refused one of
    them ("database is locked", without waiting) while another switched the new file to WAL
    (5 of 300 tries with four threads before the fix)."""
    for attempt in range(200):
        stores = [EmbeddedStore("c", str(tmp_path / f"s{attempt}.db")) for _ in range(4)]
        together = threading.Barrier(len(stores))  # every first open at the same moment

        def bump(store: EmbeddedStore) -> None:
            together.wait()
            store.catalog_update("k", "c", lambda doc: {"n": (doc or {"n": 0})["n"] + 1})

        with ThreadPoolExecutor(len(stores)) as pool:
            list(pool.map(bump, stores))  # an open refused raises here
        assert stores[0].catalog_get("k", "c") == {"n": 4}, f"try {attempt}"
        for store in stores:
            store.close()


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


@pytest.mark.parametrize(
    ("table", "row", "fragments"),
    [
        (
            "catalog",
            ("stream", "/s", "{not json"),
            ["row kind='stream' key='/s' of table catalog", "no catalog document"],
        ),
        ("catalog", ("stream", "/s", "[1, 2]"), ["row kind='stream' key='/s' of table catalog", "not a JSON object"]),
        ("catalog", ("stream", "/s", "[" * 100_000), ["row kind='stream' key='/s' of table catalog"]),
        ("marks", (S, "p|x|t|0", "five"), ["row 'p|x|t|0' of table marks holds 'five', not integers"]),
        (
            "offset_syncs",
            (S, "src", 0, 0, "one", 1),
            ["row '0' of table offset_syncs holds 0, 0, 'one', 1, not integers"],
        ),
    ],
)
def test_a_corrupt_row_is_a_corrupt_store_naming_its_table_and_row(store, table, row, fragments):
    """A row the file's owner (or a damaged disk) left malformed: one line naming it, never a traceback."""
    assert store.catalog_list("stream") == {}  # the file and its tables made
    con = sqlite3.connect(store.path)
    con.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)
    con.commit()
    con.close()
    read = {
        "catalog": lambda: store.catalog_list("stream"),
        "marks": lambda: store.marks(S),
        "offset_syncs": lambda: store.offset_syncs(S, "src"),
    }[table]
    with pytest.raises(CorruptStore) as err:
        read()
    assert_one_line_unavailable(err, "cluster sanfrancisco", "restore the file", *fragments)
    if table == "catalog":
        with pytest.raises(CorruptStore):
            store.catalog_get("stream", "/s")
        with pytest.raises(CorruptStore):
            store.catalog_update("stream", "/s", lambda doc: {"uuid": S, "path": "/s"})


def test_unwritable_directory_is_unavailable(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    store = EmbeddedStore("c", str(blocker / "clusters" / "c.db"))
    with pytest.raises(Unavailable) as err:
        store.create_topic(S, "t", 1)
    assert_one_line_unavailable(err, "cluster c", "cannot open store")
