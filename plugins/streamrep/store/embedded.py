"""The embedded store: one SQLite file per cluster, no server.

Durability: WAL journal with ``synchronous=NORMAL``. A committed append survives the kill
of any process (the WAL is in the OS before COMMIT returns); only an OS crash or power loss
can drop the last transactions. ``STREAMREP_SYNC=full`` trades speed for that too.

Several processes may write at once: every write is one ``BEGIN IMMEDIATE`` transaction,
so offsets are assigned under SQLite's write lock and are never lost or duplicated.

Messages are keyed by one integer, ``partition id << 40 | offset``: SQLite's rowid itself,
so a partition's offset range is a rowid range with no secondary index to maintain.

Replicated messages first produced in their source (``OriginRun``) keep their origin header
``streamrep.origin`` in ``origin_runs``, one row per run of consecutive offsets, not in each
message: reads put the header back, so readers see the same messages. Format 2 added that
table; a format-1 store is upgraded when it is opened (it has no runs, so it reads as before).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from streamrep.errors import (
    AlreadyExists,
    CorruptStore,
    InvalidArgument,
    NotFound,
    RetryNow,
    StoreFull,
    StreamrepError,
    Unavailable,
)
from streamrep.model.message import ORIGIN_HEADER, Headers, Message, OriginRun
from streamrep.model.offsetsyncs import prune
from streamrep.store.base import ApplyResult, CatalogDoc, PartitionApplies, ReplicaApply, Store

FORMAT = "streamrep-embedded-2"
FORMAT_1 = "streamrep-embedded-1"  # no origin_runs table: upgraded in place when opened
OFFSET_BITS = 40
MAX_OFFSET = (1 << OFFSET_BITS) - 1
BUSY_TIMEOUT_MS = 120_000

_new_tuple = tuple.__new__

# What format 2 added to format 1: the origin of runs of replicated messages (``OriginRun``).
# Offsets ``first`` to ``first + count - 1`` of partition ``pid`` have the origin header
# ``prefix`` + (their offset - first + origin_first).
FORMAT_2_STATEMENTS = (
    "CREATE TABLE IF NOT EXISTS origin_runs(pid INTEGER NOT NULL, first INTEGER NOT NULL, count INTEGER NOT NULL, "
    "prefix BLOB NOT NULL, origin_first INTEGER NOT NULL, PRIMARY KEY(pid, first)) WITHOUT ROWID",
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS store_info(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS catalog(
    kind TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL, PRIMARY KEY(kind, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS partitions(
    id INTEGER PRIMARY KEY, stream TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL,
    start_offset INTEGER NOT NULL DEFAULT 0, end_offset INTEGER NOT NULL DEFAULT 0,
    UNIQUE(stream, topic, partition));
CREATE TABLE IF NOT EXISTS messages(
    id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, key BLOB, value BLOB, headers BLOB);
CREATE TABLE IF NOT EXISTS retired_offsets(
    stream TEXT NOT NULL, topic TEXT NOT NULL, partition INTEGER NOT NULL, end_offset INTEGER NOT NULL,
    PRIMARY KEY(stream, topic, partition)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS marks(
    stream TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY(stream, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS offset_syncs(
    stream TEXT NOT NULL, source TEXT NOT NULL, source_offset INTEGER NOT NULL, partition INTEGER NOT NULL,
    replica_offset INTEGER NOT NULL, count INTEGER NOT NULL, PRIMARY KEY(stream, source, source_offset)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cursors(
    grp TEXT NOT NULL, pid INTEGER NOT NULL, next_offset INTEGER NOT NULL, PRIMARY KEY(grp, pid)) WITHOUT ROWID;
""" + "\n".join(f"{statement};" for statement in FORMAT_2_STATEMENTS)


_NAME_PREFIXES: dict[str, bytes] = {}  # header name -> its encoded length + bytes (names repeat)


def _name_prefix(name: str) -> bytes:
    prefix = _NAME_PREFIXES.get(name)
    if prefix is None:
        raw = name.encode("utf-8")
        prefix = len(raw).to_bytes(2, "big") + raw
        if len(_NAME_PREFIXES) < 1024:
            _NAME_PREFIXES[name] = prefix
    return prefix


def encode_headers(headers: Headers) -> bytes | None:
    """Headers as one blob: per header a 2-byte name length, the UTF-8 name, a 4-byte value
    length and the value. Every replicated message has a header, and this is 6x cheaper than JSON."""
    if not headers:
        return None
    if len(headers) == 1:  # the common case (a replicated message's origin): no generator
        ((k, v),) = headers
        return _name_prefix(k) + len(v).to_bytes(4, "big") + v
    return b"".join(_name_prefix(k) + len(v).to_bytes(4, "big") + v for k, v in headers)


def decode_headers(blob: bytes) -> Headers:
    headers = []
    i, end = 0, len(blob)
    while i < end:
        name_end = i + 2 + int.from_bytes(blob[i : i + 2], "big")
        value_end = name_end + 4 + int.from_bytes(blob[name_end : name_end + 4], "big")
        if value_end > end:
            raise ValueError("truncated message headers")
        headers.append((blob[i + 2 : name_end].decode("utf-8"), bytes(blob[name_end + 4 : value_end])))
        i = value_end
    return tuple(headers)


def _same(a: Sequence[Message], b: Sequence[Message]) -> bool:
    """Whether two batches to write hold the same messages (compared in C, never per row in Python)."""
    if a is b:
        return True
    if type(a) is OriginRun or type(b) is OriginRun:
        if not (isinstance(a, OriginRun) and isinstance(b, OriginRun)) or type(a) is not type(b):
            return False
        return a.source is b.source and a.prefix == b.prefix and a.topic == b.topic
    return len(a) == len(b) and list(a) == list(b)


def _plain(rows: Sequence[tuple[Any, ...]], partition: int, topic: str) -> list[Message]:
    # tuple.__new__ skips Message's Python-level __new__: the same tuple, cheaper per row.
    return [
        _new_tuple(Message, (value, key, decode_headers(headers) if headers else (), ts, partition, offset, topic))
        for offset, ts, key, value, headers in rows
    ]


def _messages(
    rows: Sequence[tuple[Any, ...]], runs: Sequence[tuple[Any, ...]], partition: int, topic: str
) -> list[Message]:
    """Messages from rows ``(offset, ts, key, value, headers)`` in offset order, with the origin
    header put back on those in ``runs`` (``origin_runs`` rows, in order)."""
    if not runs:
        return _plain(rows, partition, topic)
    low = rows[0][0]
    if rows[-1][0] - low != len(rows) - 1:  # never with gap-free offsets: check each row
        return [
            m
            for row in rows
            for m in _messages([row], [r for r in runs if r[0] <= row[0] < r[0] + r[1]], partition, topic)
        ]
    out: list[Message] = []
    done = 0
    for first, count, prefix, origin_first in runs:
        a, b = max(first - low, done), min(first + count - low, len(rows))
        if b <= a:
            continue
        if a > done:
            out += _plain(rows[done:a], partition, topic)
        delta = origin_first - first
        out += [
            _new_tuple(
                Message,
                (value, key, ((ORIGIN_HEADER, prefix + b"%d" % (offset + delta)),), ts, partition, offset, topic),
            )
            for offset, ts, key, value, _ in rows[a:b]
        ]
        done = b
    if done < len(rows):
        out += _plain(rows[done:], partition, topic)
    return out


def _create_owner_only(path: str) -> None:
    """Create the store file readable and writable by its owner alone, unless it exists: its file
    modes are the only boundary of an embedded cluster (SQLite gives its journal the same modes)."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def _rollback(con: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it does on a full disk)."""
    if con.in_transaction:
        try:
            con.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the transaction is gone either way


class _NotAStore(sqlite3.DatabaseError):
    """The file is a SQLite database, but not a streamrep store this version can read."""


def _unreadable(err: sqlite3.Error, message: str) -> StreamrepError:
    """``message`` as CorruptStore if ``err`` says the file itself is bad (corrupt, not a database,
    not a streamrep store), which no retry can fix; otherwise (busy, I/O, disk full) Unavailable."""
    code = getattr(err, "sqlite_errorcode", None)
    if isinstance(err, _NotAStore) or (
        code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    ):
        return CorruptStore(message)
    return Unavailable(message)


class EmbeddedStore(Store):
    """A cluster kept in one SQLite file.

    :param cluster: the cluster's name (used in messages).
    :param path: the SQLite file; created, with its folder, if missing.
    :param create: False for a store that must already exist: a missing file is then an
        error, never a new empty store in its place.
    :param read_only: for a reader that must change nothing (the connection's Test button): the
        file must exist and is opened read-only, without an upgrade and without creating any file.
    """

    def __init__(self, cluster: str, path: str, create: bool = True, read_only: bool = False):
        super().__init__(cluster)
        self.path = path
        self.read_only = read_only
        self.create = create and not read_only
        self._local = threading.local()
        self._pid = os.getpid()

    # -- connections ---------------------------------------------------------------
    def _connection(self) -> sqlite3.Connection:
        # One connection per thread and per process: sqlite3 connections must not cross forks.
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is not None and self._pid == os.getpid():
            return con
        self._pid = os.getpid()
        if not self.create and not os.path.exists(self.path):
            raise Unavailable(f"cluster {self.cluster}: store file {self.path} is missing (deleted or moved)")
        try:
            if not self.read_only:
                os.makedirs(os.path.dirname(os.path.abspath(self.path)), mode=0o700, exist_ok=True)
            if self.create:
                _create_owner_only(self.path)
            con = self._open()
            st = os.stat(self.path)
            self._local.file_id = (st.st_dev, st.st_ino)  # the file this thread's connection has open
        except sqlite3.DatabaseError as err:
            raise _unreadable(err, f"cluster {self.cluster}: cannot open store {self.path}: {err}") from None
        except OSError as err:
            raise Unavailable(f"cluster {self.cluster}: cannot open store {self.path}: {err.strerror}") from None
        self._local.con = con
        return con

    def _open(self) -> sqlite3.Connection:
        """A connection with the schema in place. SQLite answers "database is locked" at once, without
        its busy handler, to a connection that switches a new file to WAL while another does (two
        objects creating one store: 5 of 300 tries with four threads): asked again, within the timeout."""
        if self.read_only:
            return self._open_read_only()
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            con = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
            try:
                con.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                self._init_schema(con)
                return con
            except sqlite3.OperationalError as err:
                con.close()
                busy = getattr(err, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_BUSY
                if not busy or time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
            except BaseException:
                con.close()
                raise

    def _open_read_only(self) -> sqlite3.Connection:
        """A read-only connection that creates no file. SQLite's read-only mode still creates the
        -wal and -shm files of a WAL store when they are missing (and leaves them behind); with no
        -wal file there is nothing beyond the main file to read, so it is opened immutable then."""
        immutable = "" if os.path.exists(self.path + "-wal") else "&immutable=1"
        con = sqlite3.connect(
            f"file:{quote(os.path.abspath(self.path))}?mode=ro{immutable}",
            uri=True,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "store_info" not in tables:
                raise _NotAStore("the file is not a streamrep store")
            row = con.execute("SELECT value FROM store_info WHERE key='format'").fetchone()
            if not row or row[0] not in (FORMAT, FORMAT_1):  # format 1 reads the same; upgraded on a write
                raise _NotAStore(f"unknown store format {row[0] if row else None!r}, expected {FORMAT}")
        except BaseException:
            con.close()
            raise
        return con

    def _init_schema(self, con: sqlite3.Connection) -> None:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and "store_info" not in tables:
            raise _NotAStore("the file is a SQLite database but not a streamrep store")
        if not tables and not self.create:
            # A registered store always has its tables (cluster add made them). An empty file is one
            # truncated or replaced: a new store in its place would have no cluster ACE, so anyone
            # could make themselves its administrator.
            raise _NotAStore(
                "the file is empty, not the registered store (truncated?): restore it "
                "from a backup, or remove the cluster and add it again"
            )
        if "store_info" in tables:
            row = con.execute("SELECT value FROM store_info WHERE key='format'").fetchone()
            if row and row[0] == FORMAT_1:
                self._upgrade(con)
            elif not row or row[0] != FORMAT:
                raise _NotAStore(f"unknown store format {row[0] if row else None!r}, expected {FORMAT}")
        # WAL only once the file is known to be ours (or new): it would change a foreign SQLite file.
        con.execute("PRAGMA journal_mode=WAL")
        sync = "FULL" if os.environ.get("STREAMREP_SYNC", "").lower() == "full" else "NORMAL"
        con.execute(f"PRAGMA synchronous={sync}")
        if "store_info" in tables:
            return
        # Every statement is idempotent, so two processes creating the same store race safely; one
        # transaction, so no one sees the tables without the format row (a CI run met that race).
        con.executescript(
            f"BEGIN IMMEDIATE;\n{SCHEMA}\n"
            f"INSERT OR IGNORE INTO store_info VALUES ('format', '{FORMAT}');\n"
            f"INSERT OR IGNORE INTO store_info VALUES ('store_id', '{uuid.uuid4()}');\nCOMMIT;"
        )

    @staticmethod
    def _upgrade(con: sqlite3.Connection) -> None:
        """Format 1 to 2, in one transaction (another process may be upgrading it too)."""
        con.execute("BEGIN IMMEDIATE")
        try:
            row = con.execute("SELECT value FROM store_info WHERE key='format'").fetchone()
            if row[0] == FORMAT_1:
                for statement in FORMAT_2_STATEMENTS:
                    con.execute(statement)
                con.execute("UPDATE store_info SET value=? WHERE key='format'", (FORMAT,))
        except BaseException:
            con.execute("ROLLBACK")
            raise
        con.execute("COMMIT")

    def _check_file(self) -> None:
        """Unavailable if the file was deleted or replaced since it was opened: reads and
        writes would go to a file no one else can see."""
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != getattr(self._local, "file_id", None):
            raise Unavailable(f"cluster {self.cluster}: store file {self.path} was deleted or replaced while in use")

    def store_id(self) -> str:
        rows = self._query("SELECT value FROM store_info WHERE key='store_id'")
        if rows:
            return str(rows[0][0])
        with self._write() as con:  # a store made before identities: give it one, once
            con.execute("INSERT OR IGNORE INTO store_info VALUES ('store_id', ?)", (str(uuid.uuid4()),))
            return str(con.execute("SELECT value FROM store_info WHERE key='store_id'").fetchone()[0])

    def close(self) -> None:
        con = getattr(self._local, "con", None)
        if con is not None:
            self._local.con = None
            con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under SQLite's write lock. A full disk (or any write error of
        SQLite's) is one ``StoreFull``/``Unavailable`` line naming the cause; SQLite has rolled
        the transaction back itself then, so nothing is half-written."""
        con = self._connection()
        try:
            con.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise self._write_error(err, "is not writable") from None
        try:
            self._check_file()
            yield con
        except sqlite3.Error as err:
            _rollback(con)
            raise self._write_error(err, "write failed") from None
        except BaseException:
            _rollback(con)
            raise
        else:
            try:
                con.execute("COMMIT")
            except sqlite3.Error as err:
                _rollback(con)
                raise self._write_error(err, "commit failed") from None

    def _write_error(self, err: sqlite3.Error, what: str) -> StreamrepError:
        code = getattr(err, "sqlite_errorcode", None)
        if code is not None and code & 0xFF == sqlite3.SQLITE_FULL:
            return StoreFull(
                f"cluster {self.cluster}: the disk holding store {self.path} is full ({what}: {err}); "
                "nothing of this write was kept: free space and run it again"
            )
        return _unreadable(err, f"cluster {self.cluster}: store {self.path} {what}: {err}")

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._connection().execute(sql, args).fetchall()
        except sqlite3.DatabaseError as err:
            raise _unreadable(err, f"cluster {self.cluster}: store {self.path} cannot be read: {err}") from None

    # -- catalog -------------------------------------------------------------------
    def _document(self, kind: str, key: str, text: Any) -> CatalogDoc:
        """Catalog row ``kind``/``key``'s document; CorruptStore naming the row if it holds none.
        Only the file's owner can write a row, so a bad one is damage to the file: refused, never skipped."""
        try:
            doc = json.loads(text)
            if isinstance(doc, dict):
                return doc
            why = "not a JSON object"
        except (ValueError, TypeError, RecursionError) as err:
            why = err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise CorruptStore(
            f"cluster {self.cluster}: store {self.path}: row kind={kind[:80]!r} key={key[:80]!r} of table catalog "
            f"holds no catalog document ({why}); restore the file from a backup"
        )

    def _integers(self, table: str, rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """``rows`` of ``table`` whose columns after the first are integers; CorruptStore naming a row otherwise."""
        for row in rows:
            if not all(type(v) is int for v in row[1:]):
                raise CorruptStore(
                    f"cluster {self.cluster}: store {self.path}: row {str(row[0])[:80]!r} of table {table} holds "
                    f"{', '.join(repr(v)[:40] for v in row[1:])}, not integers; restore the file from a backup"
                )
        return rows

    def catalog_get(self, kind: str, key: str) -> CatalogDoc | None:
        rows = self._query("SELECT doc FROM catalog WHERE kind=? AND key=?", (kind, key))
        return self._document(kind, key, rows[0][0]) if rows else None

    def catalog_list(self, kind: str) -> dict[str, CatalogDoc]:
        rows = self._query("SELECT key, doc FROM catalog WHERE kind=? ORDER BY key", (kind,))
        return {key: self._document(kind, key, doc) for key, doc in rows}

    def catalog_update(
        self, kind: str, key: str, change: Callable[[CatalogDoc | None], CatalogDoc | None]
    ) -> CatalogDoc | None:
        with self._write() as con:
            row = con.execute("SELECT doc FROM catalog WHERE kind=? AND key=?", (kind, key)).fetchone()
            new = change(self._document(kind, key, row[0]) if row else None)
            if new is None:
                con.execute("DELETE FROM catalog WHERE kind=? AND key=?", (kind, key))
            else:
                con.execute("INSERT OR REPLACE INTO catalog VALUES (?, ?, ?)", (kind, key, json.dumps(new)))
            return new

    # -- topics --------------------------------------------------------------------
    def create_topic(self, stream: str, topic: str, partitions: int) -> None:
        with self._write() as con:
            if con.execute("SELECT 1 FROM partitions WHERE stream=? AND topic=? LIMIT 1", (stream, topic)).fetchone():
                raise AlreadyExists(f"topic {topic} already exists")
            self._insert_partitions(con, stream, topic, range(partitions))

    def _insert_partitions(self, con: sqlite3.Connection, stream: str, topic: str, partitions: range) -> None:
        # A topic created again continues after the offsets its earlier incarnation used:
        # replicas keep positions by topic name, and reused offsets would look already applied.
        con.executemany(
            "INSERT INTO partitions(stream, topic, partition, start_offset, end_offset) "
            "SELECT ?1, ?2, ?3, coalesce(max(end_offset), 0), coalesce(max(end_offset), 0) "
            "FROM retired_offsets WHERE stream=?1 AND topic=?2 AND partition=?3",
            [(stream, topic, p) for p in partitions],
        )

    def add_partitions(self, stream: str, topic: str, partitions: int) -> None:
        with self._write() as con:
            (count,) = con.execute(
                "SELECT count(*) FROM partitions WHERE stream=? AND topic=?", (stream, topic)
            ).fetchone()
            if count == 0:
                raise NotFound(f"topic {topic} does not exist")
            if partitions < count:
                raise InvalidArgument(f"topic {topic} has {count} partitions; partitions can only be added")
            self._insert_partitions(con, stream, topic, range(count, partitions))

    def _drop_partitions(self, con: sqlite3.Connection, where: str, args: tuple[Any, ...]) -> int:
        pids = [r[0] for r in con.execute(f"SELECT id FROM partitions WHERE {where}", args)]
        con.execute(
            "INSERT OR REPLACE INTO retired_offsets "
            f"SELECT stream, topic, partition, end_offset FROM partitions WHERE {where}",
            args,
        )
        for pid in pids:
            con.execute("DELETE FROM messages WHERE id >= ? AND id < ?", (pid << OFFSET_BITS, (pid + 1) << OFFSET_BITS))
            con.execute("DELETE FROM cursors WHERE pid=?", (pid,))
            con.execute("DELETE FROM origin_runs WHERE pid=?", (pid,))
            con.execute("DELETE FROM partitions WHERE id=?", (pid,))
        return len(pids)

    def delete_topic(self, stream: str, topic: str) -> None:
        with self._write() as con:
            if not self._drop_partitions(con, "stream=? AND topic=?", (stream, topic)):
                raise NotFound(f"topic {topic} does not exist")

    def topics(self, stream: str) -> dict[str, int]:
        rows = self._query(
            "SELECT topic, count(*) FROM partitions WHERE stream=? GROUP BY topic ORDER BY topic", (stream,)
        )
        return dict(rows)

    def drop_stream(self, stream: str) -> None:
        with self._write() as con:
            self._drop_partitions(con, "stream=?", (stream,))
            con.execute("DELETE FROM marks WHERE stream=?", (stream,))
            con.execute("DELETE FROM retired_offsets WHERE stream=?", (stream,))
            con.execute("DELETE FROM offset_syncs WHERE stream=?", (stream,))

    # -- data ----------------------------------------------------------------------
    def _partition(self, con: sqlite3.Connection, stream: str, topic: str, partition: int) -> tuple[int, int, int]:
        row: tuple[int, int, int] | None = con.execute(
            "SELECT id, start_offset, end_offset FROM partitions WHERE stream=? AND topic=? AND partition=?",
            (stream, topic, partition),
        ).fetchone()
        if row is None:
            raise NotFound(f"topic {topic} has no partition {partition}")
        return row

    def _append(
        self,
        con: sqlite3.Connection,
        stream: str,
        topic: str,
        partition: int,
        messages: Sequence[Message],
        same_as: int | None = None,
    ) -> int:
        """Append ``messages`` to one partition; returns the first offset.

        :param same_as: the first rowid of the same messages, written in this transaction to
            another partition: they are copied inside SQLite, with no Python object per row.
        """
        pid, _, end = self._partition(con, stream, topic, partition)
        if end + len(messages) > MAX_OFFSET:
            raise Unavailable(f"topic {topic} partition {partition} has run out of offsets")
        base = (pid << OFFSET_BITS) + end
        if same_as is not None:
            con.execute(
                "INSERT INTO messages(id, ts, key, value, headers) SELECT id + ?, ts, key, value, headers "
                "FROM messages WHERE id >= ? AND id < ?",
                (base - same_as, same_as, same_as + len(messages)),
            )
            if type(messages) is OriginRun:
                self._add_origin_run(con, pid, end, len(messages), messages.prefix, messages.origin_first)
        elif type(messages) is OriginRun:
            # Header-less source messages: their origin goes into one origin_runs row.
            con.executemany(
                "INSERT INTO messages(id, ts, key, value) VALUES (?, ?, ?, ?)",
                [
                    (rid, timestamp, key, value)
                    for rid, (value, key, _, timestamp, _, _, _) in zip(
                        range(base, base + len(messages)), messages.source, strict=False
                    )
                ],
            )
            self._add_origin_run(con, pid, end, len(messages), messages.prefix, messages.origin_first)
        else:
            con.executemany(
                "INSERT INTO messages(id, ts, key, value, headers) VALUES (?, ?, ?, ?, ?)",
                [
                    (rid, timestamp, key, value, encode_headers(headers) if headers else None)
                    for rid, (value, key, headers, timestamp, _, _, _) in zip(
                        range(base, base + len(messages)), messages, strict=False
                    )
                ],
            )
        con.execute("UPDATE partitions SET end_offset=? WHERE id=?", (end + len(messages), pid))
        return end

    @staticmethod
    def _add_origin_run(
        con: sqlite3.Connection, pid: int, first: int, count: int, prefix: bytes, origin_first: int
    ) -> None:
        """Record a run, or extend the partition's last run if this one continues it (a flow
        applying batch after batch then keeps one row)."""
        last = con.execute(
            "SELECT first, count, prefix, origin_first FROM origin_runs WHERE pid=? ORDER BY first DESC LIMIT 1", (pid,)
        ).fetchone()
        if last is not None and last[0] + last[1] == first and last[2] == prefix and last[3] + last[1] == origin_first:
            con.execute("UPDATE origin_runs SET count=? WHERE pid=? AND first=?", (last[1] + count, pid, last[0]))
        else:
            con.execute("INSERT INTO origin_runs VALUES (?, ?, ?, ?, ?)", (pid, first, count, prefix, origin_first))

    def append(self, stream: str, topic: str, batches: Mapping[int, Sequence[Message]]) -> dict[int, int]:
        with self._write() as con:
            return {
                partition: self._append(con, stream, topic, partition, messages)
                for partition, messages in batches.items()
            }

    def read(self, stream: str, topic: str, partition: int, start: int, max_messages: int) -> list[Message]:
        con = self._connection()
        try:
            pid, first, _ = self._partition(con, stream, topic, partition)
            base = pid << OFFSET_BITS
            # SQLite computes the offsets: cheaper than a Python subtraction per row.
            rows = con.execute(
                "SELECT id - ?, ts, key, value, headers FROM messages WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (base, base + max(start, first), (pid + 1) << OFFSET_BITS, max_messages),
            ).fetchall()
            # The runs that cover the rows read: the last one starting at or before the first
            # row, and those starting after it.
            runs = (
                con.execute(
                    "SELECT * FROM (SELECT first, count, prefix, origin_first FROM origin_runs WHERE pid=?1 AND first <= ?2 "
                    "ORDER BY first DESC LIMIT 1) UNION ALL SELECT first, count, prefix, origin_first FROM origin_runs "
                    "WHERE pid=?1 AND first > ?2 AND first <= ?3 ORDER BY 1",
                    (pid, rows[0][0], rows[-1][0]),
                ).fetchall()
                if rows
                else ()
            )
        except sqlite3.DatabaseError as err:
            raise _unreadable(err, f"cluster {self.cluster}: store {self.path} cannot be read: {err}") from None
        if not rows:  # an idle reader polls here: notice a deleted file rather than wait forever
            self._check_file()
        try:
            return _messages(rows, runs, partition, topic)
        except (ValueError, TypeError) as err:
            raise CorruptStore(
                f"cluster {self.cluster}: store {self.path} holds a corrupt message in {topic}/{partition}: {err}"
            ) from None

    def offsets(self, stream: str, topic: str, partition: int) -> tuple[int, int]:
        rows = self._query(
            "SELECT start_offset, end_offset FROM partitions WHERE stream=? AND topic=? AND partition=?",
            (stream, topic, partition),
        )
        if not rows:
            raise NotFound(f"topic {topic} has no partition {partition}")
        return rows[0]

    def purge_before(self, stream: str, topic: str, timestamp: int) -> int:
        dropped = 0
        with self._write() as con:
            parts = con.execute(
                "SELECT id, start_offset, end_offset FROM partitions WHERE stream=? AND topic=?", (stream, topic)
            ).fetchall()
            for pid, start, end in parts:
                base = pid << OFFSET_BITS
                # Scans in offset order and stops at the first live message: cost is what expired.
                row = con.execute(
                    "SELECT id FROM messages WHERE id >= ? AND id < ? AND ts >= ? ORDER BY id LIMIT 1",
                    (base + start, base + end, timestamp),
                ).fetchone()
                new_start = row[0] - base if row else end
                if new_start > start:
                    con.execute("DELETE FROM messages WHERE id >= ? AND id < ?", (base + start, base + new_start))
                    con.execute("DELETE FROM origin_runs WHERE pid=? AND first + count <= ?", (pid, new_start))
                    con.execute("UPDATE partitions SET start_offset=? WHERE id=?", (new_start, pid))
                    dropped += new_start - start
        return dropped

    def range_stats(
        self, stream: str, topic: str, partition: int, start: int, stop: int | None = None
    ) -> tuple[int, int, int | None, int | None]:
        con = self._connection()
        try:
            pid, first, end = self._partition(con, stream, topic, partition)
            base = pid << OFFSET_BITS
            row: tuple[int, int, int | None, int | None] = con.execute(
                "SELECT count(*), coalesce(sum(length(value)), 0), min(ts), max(ts) FROM messages WHERE id >= ? AND id < ?",
                (base + max(start, first), base + (end if stop is None else min(stop, end))),
            ).fetchone()
        except sqlite3.DatabaseError as err:
            raise _unreadable(err, f"cluster {self.cluster}: store {self.path} cannot be read: {err}") from None
        return row

    # -- replication marks ---------------------------------------------------------
    def marks(self, stream: str) -> dict[str, int]:
        return dict(self._integers("marks", self._query("SELECT key, value FROM marks WHERE stream=?", (stream,))))

    def apply_partitions(self, batches: Sequence[PartitionApplies]) -> list[list[ApplyResult]]:
        # One SQLite transaction per source partition, so none holds the file's write lock for a whole pass.
        return [self._apply_many(b.topic, b.partition, b.applies, b.source) for b in batches]

    def _apply_many(
        self, topic: str, partition: int, applies: Sequence[ReplicaApply], source: str
    ) -> list[ApplyResult]:
        """``apply_many`` in one SQLite transaction: a replica's messages equal to those already
        written to another one in it are copied by SQLite (INSERT ... SELECT), not sent row by row."""
        results: list[ApplyResult] = []
        written: list[tuple[Sequence[Message], int]] = []  # (messages, their first rowid)
        with self._write() as con:
            # The codec is not used: a write to a local file crosses no network (model/network.py).
            for stream, messages, marks, expect, syncs, _ in applies:
                conflict = self._moved(con, stream, expect)
                if conflict is not None:
                    results.append(conflict)
                    continue
                # A savepoint per replica: one that fails (a missing partition) leaves the others written.
                con.execute("SAVEPOINT replica")
                try:
                    results.append(
                        self._apply_one(con, stream, topic, partition, messages, marks, source, syncs, written)
                    )
                except StreamrepError as err:
                    con.execute("ROLLBACK TO replica")
                    results.append(err)
                con.execute("RELEASE replica")
        return results

    def _apply_one(
        self,
        con: sqlite3.Connection,
        stream: str,
        topic: str,
        partition: int,
        messages: Sequence[Message],
        marks: Mapping[str, int],
        source: str,
        syncs: Sequence[tuple[int, int]],
        written: list[tuple[Sequence[Message], int]],
    ) -> int:
        """One replica's part of ``apply_many``; ``written`` lists the batches already written in
        this transaction (with their first rowid), and gains this one if it is new."""
        if messages:
            same_as = next((rowid for other, rowid in written if _same(other, messages)), None)
            first = self._append(con, stream, topic, partition, messages, same_as)
            if same_as is None:
                written.append((messages, (self._partition(con, stream, topic, partition)[0] << OFFSET_BITS) + first))
        else:
            first = self._partition(con, stream, topic, partition)[2]
        con.executemany(
            "INSERT OR REPLACE INTO marks VALUES (?, ?, ?)", [(stream, key, value) for key, value in marks.items()]
        )
        # A sync covers the run of messages up to the next sync (or the end of the batch).
        bounds = [index for index, _ in syncs[1:]] + [len(messages)]
        con.executemany(
            "INSERT OR REPLACE INTO offset_syncs VALUES (?, ?, ?, ?, ?, ?)",
            [
                (stream, source, source_offset, partition, first + index, bound - index)
                for (index, source_offset), bound in zip(syncs, bounds, strict=False)
            ],
        )
        if syncs and self.prune_due(stream, source, len(syncs)):
            where = (stream, source)
            rows = con.execute(
                "SELECT source_offset, partition, replica_offset, count FROM offset_syncs WHERE stream=? AND source=?",
                where,
            ).fetchall()
            kept = prune(rows)
            if kept != sorted(rows):
                con.execute("DELETE FROM offset_syncs WHERE stream=? AND source=?", where)
                con.executemany("INSERT INTO offset_syncs VALUES (?, ?, ?, ?, ?, ?)", [(*where, *k) for k in kept])
        return first

    @staticmethod
    def _moved(con: sqlite3.Connection, stream: str, expect: Mapping[str, int | None]) -> RetryNow | None:
        """The ``RetryNow`` if a mark of ``stream`` no longer holds its ``expect`` value, else None."""
        for key, expected in expect.items():
            row = con.execute("SELECT value FROM marks WHERE stream=? AND key=?", (stream, key)).fetchone()
            if (row[0] if row else None) != expected:
                return RetryNow(
                    f"replication mark {key} of stream {stream} moved ({expected} -> "
                    f"{row[0] if row else None}); another gateway applied this batch"
                )
        return None

    def drop_marks(self, stream: str, marks: Mapping[str, int]) -> int:
        with self._write() as con:
            return sum(
                con.execute("DELETE FROM marks WHERE stream=? AND key=? AND value=?", (stream, key, value)).rowcount
                for key, value in marks.items()
            )

    def offset_syncs(self, stream: str, source: str) -> list[tuple[int, int, int, int]]:
        rows = self._query(
            "SELECT source_offset, source_offset, partition, replica_offset, count FROM offset_syncs "
            "WHERE stream=? AND source=? ORDER BY source_offset",
            (stream, source),
        )
        return [row[1:] for row in self._integers("offset_syncs", rows)]

    # -- cursors -------------------------------------------------------------------
    def commit_cursors(self, group: str, stream: str, topic: str, cursors: Mapping[int, int]) -> None:
        with self._write() as con:
            for partition, offset in cursors.items():
                pid = self._partition(con, stream, topic, partition)[0]
                con.execute("INSERT OR REPLACE INTO cursors VALUES (?, ?, ?)", (group, pid, offset))

    def cursors(self, group: str, stream: str, topic: str) -> dict[int, int]:
        rows = self._query(
            "SELECT p.partition, c.next_offset FROM cursors c JOIN partitions p ON p.id = c.pid "
            "WHERE c.grp=? AND p.stream=? AND p.topic=?",
            (group, stream, topic),
        )
        return dict(rows)

    def groups(self, stream: str) -> list[str]:
        rows = self._query(
            "SELECT DISTINCT c.grp FROM cursors c JOIN partitions p ON p.id = c.pid WHERE p.stream=? ORDER BY c.grp",
            (stream,),
        )
        return [r[0] for r in rows]
