"""The embedded store's file format: its tables, the format row that names them, and the
upgrade from format 1.

Messages are keyed by one integer, ``partition id << 40 | offset``: SQLite's rowid itself,
so a partition's offset range is a rowid range with no secondary index to maintain.

Format 2 added ``origin_runs``: replicated messages first produced in their source
(``OriginRun``) keep their origin header ``streamrep.origin`` there, one row per run of
consecutive offsets, not in each message. A format-1 store is upgraded when it is opened for
writing (it has no runs, so it reads as before); any other format is refused.
"""

from __future__ import annotations

import os
import sqlite3
import uuid

FORMAT = "streamrep-embedded-2"
FORMAT_1 = "streamrep-embedded-1"  # no origin_runs table: upgraded in place when opened
OFFSET_BITS = 40
MAX_OFFSET = (1 << OFFSET_BITS) - 1

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


class NotAStore(sqlite3.DatabaseError):
    """The file is a SQLite database, but not a streamrep store this version can read."""


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _format(con: sqlite3.Connection) -> str | None:
    row = con.execute("SELECT value FROM store_info WHERE key='format'").fetchone()
    return str(row[0]) if row else None


def _unknown(found: str | None) -> NotAStore:
    return NotAStore(f"unknown store format {found!r}, expected {FORMAT}")


def check_readable(con: sqlite3.Connection) -> None:
    """Refuse, as ``NotAStore``, a file a read-only connection cannot read as a store."""
    if "store_info" not in _tables(con):
        raise NotAStore("the file is not a streamrep store")
    found = _format(con)
    if found not in (FORMAT, FORMAT_1):  # format 1 reads the same; upgraded on a write
        raise _unknown(found)


def prepare(con: sqlite3.Connection, create: bool) -> None:
    """Make the file a store of this ``FORMAT`` for a writing connection: create its tables if it
    is new (and ``create``), upgrade it if it is of format 1, refuse it (``NotAStore``) otherwise."""
    tables = _tables(con)
    if tables and "store_info" not in tables:
        raise NotAStore("the file is a SQLite database but not a streamrep store")
    if not tables and not create:
        # A registered store always has its tables (cluster add made them). An empty file is one
        # truncated or replaced: a new store in its place would have no cluster ACE, so anyone
        # could make themselves its administrator.
        raise NotAStore(
            "the file is empty, not the registered store (truncated?): restore it "
            "from a backup, or remove the cluster and add it again"
        )
    if "store_info" in tables:
        found = _format(con)
        if found == FORMAT_1:
            _upgrade(con)
        elif found != FORMAT:
            raise _unknown(found)
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
