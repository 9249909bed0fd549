"""Replicated consumer cursors: every consumer group's committed cursors on a source stream,
carried to each replica, translated to the replica's offsets, so that a consumer failing over to
the replica with the same group continues after its last commit.

The rules, all here (``sync_partitions`` applies them to one source stream and one replica):

1. **Translated by the offset syncs.** A source cursor ``c`` becomes ``translate_offset`` of
   ``c``: the replica offset of the first replicated message at or after ``c`` (offsets belong
   to each stream, so they differ: transaction markers, other upstreams, local producers).
2. **Only once replicated** ("waiting: not replicated yet"). A cursor is synced only when the
   replica's stored position for that source partition is at or past it: every message before
   ``c`` is on the replica and mapped. Before that the translation would point at the replica's
   end, and messages of the source before ``c`` that land later would be replayed; a later pass
   syncs it.
3. **Groups active on the replica are never overwritten** ("skipped: active on replica"). The
   replica's catalog remembers what the sync last wrote per group, topic and partition (and the
   value before, so a write cut off between the record and the commit is retried, not mistaken
   for a user). A replica cursor that is neither means someone committed there: the group is left
   alone from then on. On Kafka a group with members on the replica is also left alone, and so is
   one whose offset change Kafka refuses because it is live.
4. **Forward only.** Sync never moves a replica cursor back ("skipped: behind the replica's
   cursor", e.g. after a reset of the group at the source); equal is "unchanged".
5. **Permissions.** A user's ``sync_cursors`` needs consumeperm on source and replica (the same
   check as ``translate_cursors``). A gateway acts with its cluster's authority, as for data.

The gateway serving a source partition syncs that partition's cursors of every group to each
replica it applies to, at most every ``CURSOR_SYNC_SECONDS`` (``CursorSync``), not every batch.

Left open (documented in docs/user-guide.md): a commit on the replica in the instant between the sync's
read of the replica cursor and its write is overwritten once (no compare-and-set on group offsets).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import Conflict, StreamrepError
from streamrep.model.replication import position_key
from streamrep.replication.flows import Flow
from streamrep.replication.transfer import SourcePartition
from streamrep.replication.translate import check_translate, translate_partition
from streamrep.store.base import CatalogDoc, Store

log = logging.getLogger(__name__)

# How often a gateway syncs the cursors of its share: a few seconds bounds how far a consumer that
# fails over may be set back (it resumes at the last synced commit, never before it), at the cost
# of one pass over the groups (see "Consumer failover" in docs/user-guide.md for measured costs).
CURSOR_SYNC_SECONDS = 5.0
# Catalog documents (in the replica's cluster), one per replica and group: what sync last wrote.
CURSOR_SYNC_KIND = "cursorsync"

SYNCED = "synced"
UNCHANGED = "unchanged"
WAITING = "waiting: not replicated yet"
ACTIVE = "skipped: active on replica"
BEHIND = "skipped: behind the replica's cursor"
OTHER_UPSTREAM = "skipped: synced from another upstream"


@dataclass
class Row:
    """What cursor sync did for one group, topic and partition: the group's cursor on the source
    (``source_offset``), the replica's cursor after the sync (``replica_offset``; None if it has
    none) and ``action`` (``SYNCED``, ``UNCHANGED``, ``WAITING``, or why it was skipped)."""

    group: str
    topic: str
    partition: int
    source_offset: int
    replica_offset: int | None
    action: str = ""


@dataclass(frozen=True)
class CursorRow:
    """A committed cursor (``stream cursor list``): the next ``offset`` the group reads, and the
    ``lag`` (messages after it)."""

    group: str
    topic: str
    partition: int
    offset: int
    lag: int


def sync_cursors(admin: StreamAdmin, source: str, replica: str, takeover: bool = False) -> list[Row]:
    """Translate and commit on ``replica`` every consumer group's committed cursors of
    ``source`` (all topics and partitions) that may move, by the rules of this module.

    :param source: the source stream path.
    :param replica: a direct replica of ``source``.
    :param takeover: first adopt the replica's current cursors as if this sync had written them
        (a failback: the replica is the old source, whose consumers are stopped, and its groups'
        old cursors would otherwise count as "active on replica" for ever). Still forward only,
        and a Kafka group with members there is still left alone.
    :return: one row per group, topic and partition (``Row``).
    """
    src, dst, src_entry, dst_entry = check_translate(admin, source, replica)
    source_store, replica_store = admin.store(src), admin.store(dst)
    partitions = [(t, p) for t, n in source_store.topics(src_entry.uuid).items() for p in range(n)]
    return sync_partitions(source_store, src_entry.uuid, replica_store, dst_entry.uuid, partitions, takeover)


def list_cursors(admin: StreamAdmin, path: str, group: str | None = None) -> list[CursorRow]:
    """The committed cursors on stream ``path`` (needs consumeperm): one row per group, topic
    and partition, with ``offset`` (the next to read) and ``lag`` (messages after it).

    :param group: only this group's.
    """
    sp = admin.path(path)
    entry = admin.entry(sp)
    admin.require(entry, sp, "consumeperm")
    store = admin.store(sp)
    rows: list[CursorRow] = []
    topics = store.topics(entry.uuid)
    for name in [group] if group else store.groups(entry.uuid):
        for topic in topics:
            for p, offset in sorted(store.cursors(name, entry.uuid, topic).items()):
                end = store.offsets(entry.uuid, topic, p)[1]
                rows.append(CursorRow(name, topic, p, offset, max(0, end - offset)))
    return rows


def sync_partitions(
    source_store: Store,
    source_uuid: str,
    replica_store: Store,
    replica_uuid: str,
    partitions: Iterable[tuple[str, int]],
    takeover: bool = False,
) -> list[Row]:
    """The rules of this module for the given source partitions, for every group of the source.

    :param partitions: ``(topic, partition)`` of the source stream.
    :param takeover: as ``sync_cursors``.
    """
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, partition in partitions:
        by_topic[topic].append(partition)
    if not by_topic:
        return []
    groups = source_store.groups(source_uuid)
    if not groups:
        return []
    live = replica_store.active_groups(groups)
    marks = replica_store.marks(replica_uuid)
    replica_topics = replica_store.topics(replica_uuid)
    rows: list[Row] = []
    for group in groups:
        rows += _sync_group(
            group,
            group in live,
            source_store,
            source_uuid,
            replica_store,
            replica_uuid,
            by_topic,
            marks,
            replica_topics,
            takeover,
        )
    return rows


def _sync_group(
    group: str,
    live: bool,
    source_store: Store,
    source_uuid: str,
    replica_store: Store,
    replica_uuid: str,
    by_topic: Mapping[str, Sequence[int]],
    marks: Mapping[str, int],
    replica_topics: Mapping[str, int],
    takeover: bool,
) -> list[Row]:
    key = f"{replica_uuid}|{group}"
    written = (replica_store.catalog_get(CURSOR_SYNC_KIND, key) or {}).get("topics", {})
    rows: list[Row] = []
    moves: dict[str, dict[int, tuple[int, int | None]]] = {}  # topic -> partition -> (new, current)
    adopted: dict[str, dict[int, int]] = {}  # topic -> partition -> current (takeover)
    for topic, parts in sorted(by_topic.items()):
        source_cursors = source_store.cursors(group, source_uuid, topic)
        wanted = sorted(p for p in parts if p in source_cursors)
        if not wanted:
            continue
        count = replica_topics.get(topic, 0)
        replica_cursors = replica_store.cursors(group, replica_uuid, topic) if count else {}
        for p in wanted:
            cursor, current = source_cursors[p], replica_cursors.get(p)
            record = written.get(topic, {}).get(str(p))
            row = Row(group, topic, p, cursor, current)
            rows.append(row)
            if (
                takeover
                and not live
                and current is not None
                and (not _ours(record, current) or record["source"] != source_uuid)
            ):
                record = {"offset": current, "prior": current, "source": source_uuid}
                adopted.setdefault(topic, {})[p] = current
            if live:
                row.action = f"{ACTIVE} (the group has members there)"
            elif not _ours(record, current):
                row.action = f"{ACTIVE} (a cursor was committed there)"
            elif record is not None and record["source"] != source_uuid and current is not None:
                row.action = OTHER_UPSTREAM
            elif p >= count or _position(source_store, source_uuid, topic, p, marks, cursor) < cursor:
                row.action = WAITING
            else:
                target = translate_partition(
                    replica_store, replica_uuid, position_key(source_uuid, topic, p), topic, p, cursor
                )
                if current is not None and target <= current:
                    row.action = UNCHANGED if target == current else BEHIND
                else:
                    row.action = SYNCED
                    row.replica_offset = target
                    moves.setdefault(topic, {})[p] = (target, current)
    if moves or adopted:
        _commit(group, source_uuid, replica_store, replica_uuid, moves, adopted, rows)
    return rows


def _position(
    source_store: Store, source_uuid: str, topic: str, partition: int, marks: Mapping[str, int], cursor: int
) -> int:
    """Where the replica's replication of the source partition stands, as ``transfer.next_position``
    sees it: nothing before the oldest offset the source holds is waited for (an empty partition,
    or messages dropped by the source's ttl before they were replicated)."""
    mark = marks.get(position_key(source_uuid, topic, partition))
    if mark is not None and mark >= cursor:
        return mark  # the common case: no call to the source
    start = source_store.offsets(source_uuid, topic, partition)[0]
    return max(start if mark is None else mark, start)


def _ours(record: Mapping[str, Any] | None, current: int | None) -> bool:
    """Whether the replica's cursor is one this sync wrote (or none at all, with no record)."""
    if record is None:
        return current is None
    return current in (record["offset"], record.get("prior"))


def _record(
    store: Store,
    replica_uuid: str,
    group: str,
    source_uuid: str,
    records: Mapping[str, Mapping[int, tuple[int, int | None]]],
) -> None:
    """Record ``(offset, prior)`` per topic and partition as written by the sync from ``source_uuid``."""

    def change(doc: CatalogDoc | None) -> CatalogDoc:
        topics = {t: dict(ps) for t, ps in (doc or {}).get("topics", {}).items()}
        for topic, parts in records.items():
            for p, (offset, prior) in parts.items():
                topics.setdefault(topic, {})[str(p)] = {"offset": offset, "prior": prior, "source": source_uuid}
        return {"replica": replica_uuid, "group": group, "topics": topics}

    store.catalog_update(CURSOR_SYNC_KIND, f"{replica_uuid}|{group}", change)


def adopt_cursors(store: Store, stream_uuid: str, source_uuid: str) -> int:
    """Record every group's committed cursors on ``stream_uuid`` as if the sync from
    ``source_uuid`` had written them, so that sync may move them forward (a stream that just
    handed its role to ``source_uuid``: its consumers' cursors are no longer "active" commits).
    A group that commits there afterwards is again left alone. Returns how many groups."""
    groups = store.groups(stream_uuid)
    for group in groups:
        cursors = {topic: store.cursors(group, stream_uuid, topic) for topic in store.topics(stream_uuid)}
        _record(
            store,
            stream_uuid,
            group,
            source_uuid,
            {topic: {p: (o, o) for p, o in parts.items()} for topic, parts in cursors.items()},
        )
    return len(groups)


def _commit(
    group: str,
    source_uuid: str,
    replica_store: Store,
    replica_uuid: str,
    moves: Mapping[str, Mapping[int, tuple[int, int | None]]],
    adopted: Mapping[str, Mapping[int, int]],
    rows: list[Row],
) -> None:
    """Record what is about to be written, then write it: a sync cut off in between finds the
    replica still at the recorded ``prior`` value and writes again."""

    records: dict[str, dict[int, tuple[int, int | None]]] = {
        topic: {p: (current, current) for p, current in parts.items()} for topic, parts in adopted.items()
    }
    for topic, parts in moves.items():
        records.setdefault(topic, {}).update(parts)
    _record(replica_store, replica_uuid, group, source_uuid, records)
    for topic, parts in sorted(moves.items()):
        try:
            replica_store.commit_cursors(group, replica_uuid, topic, {p: t for p, (t, _) in parts.items()})
        except Conflict:  # Kafka refused: the group became live on the replica meanwhile
            for row in rows:
                if row.topic == topic and row.partition in parts and row.action == SYNCED:
                    row.action = f"{ACTIVE} (Kafka refused: the group is live there)"
                    row.replica_offset = parts[row.partition][1]


class CursorSync:
    """A gateway's cursor sync: for the source partitions of its share, each replica they feed,
    at most every ``interval`` seconds. A failure is logged and kept in ``errors``; it never
    stops the replication of data.

    :param interval: seconds between passes (``CURSOR_SYNC_SECONDS``); None: never (a caller
        that syncs by itself).
    """

    def __init__(self, interval: float | None = CURSOR_SYNC_SECONDS):
        self.interval = interval
        self._last = float("-inf")
        self.rows: list[Row] = []  # the last pass's rows, for status and tests
        self.errors: dict[str, str] = {}  # replica path -> the last pass's error

    def maybe_sync(
        self, admin: StreamAdmin, replica_store: Store, units: Mapping[SourcePartition, Sequence[Flow]]
    ) -> bool:
        """Sync if a pass is due; returns whether one ran."""
        now = time.monotonic()
        if self.interval is None or now - self._last < self.interval:
            return False
        self._last = now
        self.sync(admin, replica_store, units)
        return True

    def sync(self, admin: StreamAdmin, replica_store: Store, units: Mapping[SourcePartition, Sequence[Flow]]) -> None:
        """One pass now. ``replica_store`` is the gateway's cluster (where its replicas are)."""
        work: dict[tuple[str, str], list[tuple[str, int]]] = defaultdict(list)
        flows: dict[tuple[str, str], Flow] = {}
        for unit, unit_flows in units.items():
            for flow in unit_flows:
                work[(flow.source_uuid, flow.replica_uuid)].append((unit.topic, unit.partition))
                flows[(flow.source_uuid, flow.replica_uuid)] = flow
        rows: list[Row] = []
        errors: dict[str, str] = {}
        for pair, partitions in sorted(work.items()):
            flow = flows[pair]
            try:
                rows += sync_partitions(
                    admin.store(flow.source), flow.source_uuid, replica_store, flow.replica_uuid, partitions
                )
            except StreamrepError as err:
                errors[str(flow.replica)] = str(err)
                log.warning("cursor sync %s -> %s failed: %s", flow.source, flow.replica, err)
        self.rows, self.errors = rows, errors
