"""The embedded store: a cluster in one SQLite file (``file``), in the tables ``schema`` names.

The Store's methods, by concern: the catalog (JSON documents by kind and key), topics
(partitions rows; a topic created again continues after the offsets of the one deleted),
messages (appends with gap-free offsets, reads, retention), replication marks and offset syncs
(written with their messages in one transaction by ``apply_partitions``), and consumer-group
cursors. Messages come back from their rows through ``rows``.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from streamrep.errors import (
    AlreadyExists,
    CorruptStore,
    InvalidArgument,
    NotFound,
    RetryNow,
    StreamrepError,
    Unavailable,
)
from streamrep.model.message import Message, OriginRun
from streamrep.model.offsetsyncs import prune
from streamrep.store.base import ApplyResult, CatalogDoc, PartitionApplies, ReplicaApply
from streamrep.store.embedded.file import EmbeddedFile
from streamrep.store.embedded.rows import encode_headers, from_rows, same_batch
from streamrep.store.embedded.schema import MAX_OFFSET, OFFSET_BITS


class EmbeddedStore(EmbeddedFile):
    """A cluster kept in one SQLite file.

    :param cluster: the cluster's name (used in messages).
    :param path: the SQLite file; created, with its folder, if missing.
    :param create: False for a store that must already exist: a missing file is then an
        error, never a new empty store in its place.
    :param read_only: for a reader that must change nothing (the connection's Test button): the
        file must exist and is opened read-only, without an upgrade and without creating any file.
    """

    # -- identity and catalog ------------------------------------------------------
    def store_id(self) -> str:
        rows = self._query("SELECT value FROM store_info WHERE key='store_id'")
        if rows:
            return str(rows[0][0])
        with self._write() as con:  # a store made before identities: give it one, once
            con.execute("INSERT OR IGNORE INTO store_info VALUES ('store_id', ?)", (str(uuid.uuid4()),))
            return str(con.execute("SELECT value FROM store_info WHERE key='store_id'").fetchone()[0])

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
        with self._reading() as con:
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
        if not rows:  # an idle reader polls here: notice a deleted file rather than wait forever
            self._check_file()
        try:
            return from_rows(rows, runs, partition, topic)
        except (ValueError, TypeError) as err:
            raise CorruptStore(
                f"cluster {self.cluster}: store {self.path} holds a corrupt message in {topic}/{partition}: {err}"
            ) from None

    def offsets(self, stream: str, topic: str, partition: int) -> tuple[int, int]:
        with self._reading() as con:
            _, start, end = self._partition(con, stream, topic, partition)
        return start, end

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
        with self._reading() as con:
            pid, first, end = self._partition(con, stream, topic, partition)
            base = pid << OFFSET_BITS
            row: tuple[int, int, int | None, int | None] = con.execute(
                "SELECT count(*), coalesce(sum(length(value)), 0), min(ts), max(ts) FROM messages WHERE id >= ? AND id < ?",
                (base + max(start, first), base + (end if stop is None else min(stop, end))),
            ).fetchone()
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
            for replica in applies:
                conflict = self._moved(con, replica.stream, replica.expect)
                if conflict is not None:
                    results.append(conflict)
                    continue
                # A savepoint per replica: one that fails (a missing partition) leaves the others written.
                con.execute("SAVEPOINT replica")
                try:
                    results.append(self._apply_one(con, topic, partition, source, replica, written))
                except StreamrepError as err:
                    con.execute("ROLLBACK TO replica")
                    results.append(err)
                con.execute("RELEASE replica")
        return results

    def _apply_one(
        self,
        con: sqlite3.Connection,
        topic: str,
        partition: int,
        source: str,
        replica: ReplicaApply,
        written: list[tuple[Sequence[Message], int]],
    ) -> int:
        """One replica's part of ``apply_many``; ``written`` lists the batches already written in
        this transaction (with their first rowid), and gains this one if it is new."""
        # The codec is not used: a write to a local file crosses no network (model/network.py).
        stream, messages, marks, _, syncs, _ = replica
        if messages:
            same_as = next((rowid for other, rowid in written if same_batch(other, messages)), None)
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
