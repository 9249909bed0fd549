"""The embedded store's file: one SQLite file per cluster, no server.

Durability: WAL journal with ``synchronous=NORMAL``. A committed append survives the kill
of any process (the WAL is in the OS before COMMIT returns); only an OS crash or power loss
can drop the last transactions. ``STREAMREP_SYNC=full`` trades speed for that too.

Several processes may write at once: every write is one ``BEGIN IMMEDIATE`` transaction
(``_write``), so offsets are assigned under SQLite's write lock and are never lost or duplicated.
Each thread of each process has its own connection. SQLite's errors become one line naming the
cause: a file that is damaged or not a store is ``CorruptStore`` (no retry cures it), a full disk
``StoreFull``, the rest ``Unavailable``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from streamrep.errors import CorruptStore, StoreFull, StreamrepError, Unavailable
from streamrep.store.base import CatalogDoc, Store
from streamrep.store.embedded.schema import NotAStore, check_readable, prepare

BUSY_TIMEOUT_MS = 120_000


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


def _unreadable(err: sqlite3.Error, message: str) -> StreamrepError:
    """``message`` as CorruptStore if ``err`` says the file itself is bad (corrupt, not a database,
    not a streamrep store), which no retry can fix; otherwise (busy, I/O, disk full) Unavailable."""
    code = getattr(err, "sqlite_errorcode", None)
    if isinstance(err, NotAStore) or (
        code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
    ):
        return CorruptStore(message)
    return Unavailable(message)


class EmbeddedFile(Store):
    """The connections to one SQLite file and its transactions, made from ``EmbeddedStore``'s
    parameters; ``EmbeddedStore`` is the store."""

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
                prepare(con, self.create)
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
            check_readable(con)
        except BaseException:
            con.close()
            raise
        return con

    def _check_file(self) -> None:
        """Unavailable if the file was deleted or replaced since it was opened: reads and
        writes would go to a file no one else can see."""
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if st is None or (st.st_dev, st.st_ino) != getattr(self._local, "file_id", None):
            raise Unavailable(f"cluster {self.cluster}: store file {self.path} was deleted or replaced while in use")

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

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's connection, to read with: SQLite's errors as one line (``_unreadable``)."""
        con = self._connection()
        try:
            yield con
        except sqlite3.DatabaseError as err:
            raise _unreadable(err, f"cluster {self.cluster}: store {self.path} cannot be read: {err}") from None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._reading() as con:
            return con.execute(sql, args).fetchall()

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
