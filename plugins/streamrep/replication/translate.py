"""Offset translation for consumer failover: a consumer group's cursor on a source stream,
expressed as the matching cursor on a replica, from the offset syncs the apply recorded."""

from __future__ import annotations

from dataclasses import dataclass

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.offsetsyncs import translate_offset
from streamrep.model.paths import StreamPath
from streamrep.model.replication import position_key
from streamrep.store.base import Store

__all__ = ["TranslatedCursor", "check_translate", "translate_cursors", "translate_offset", "translate_partition"]


def check_translate(
    admin: StreamAdmin, source: str, replica: str
) -> tuple[StreamPath, StreamPath, StreamEntry, StreamEntry]:
    """Resolve ``source`` and its direct ``replica``, and check that the caller may move a
    group's cursors between them: consumeperm on both. Returns their paths and entries."""
    src, dst = admin.path(source), admin.path(replica)
    src_entry, dst_entry = admin.entry(src), admin.entry(dst)
    rules.require_link(src_entry.replicas, dst, src, "replica")  # syncs exist only for direct replicas
    admin.require(src_entry, src, "consumeperm")
    admin.require(dst_entry, dst, "consumeperm")
    return src, dst, src_entry, dst_entry


def translate_partition(
    replica_store: Store, replica_uuid: str, source_key: str, topic: str, partition: int, cursor: int
) -> int:
    """``translate_offset`` of one source partition's ``cursor`` into ``replica_uuid``.

    The replica's end is read before its syncs: a batch applied in between then shows in the
    syncs (it maps the cursor exactly), never only in the end (which would skip the batch)."""
    end = replica_store.offsets(replica_uuid, topic, partition)[1]
    return translate_offset(replica_store.offset_syncs(replica_uuid, source_key), cursor, end)


@dataclass(frozen=True)
class TranslatedCursor:
    """A group's cursor on the source (``source_offset``) and where it lands on the replica."""

    topic: str
    partition: int
    source_offset: int
    replica_offset: int


def translate_cursors(
    admin: StreamAdmin, source: str, replica: str, group: str, commit: bool = False
) -> list[TranslatedCursor]:
    """Translate every committed cursor of ``group`` on ``source`` to ``replica``; with
    ``commit`` store them as the same group's cursors on the replica (needs consumeperm there)."""
    if not group:
        raise InvalidArgument("a consumer group is required")
    src, dst, src_entry, dst_entry = check_translate(admin, source, replica)
    source_store, replica_store = admin.store(src), admin.store(dst)
    replica_topics = replica_store.topics(dst_entry.uuid)
    rows = []
    for topic in source_store.topics(src_entry.uuid):
        cursors = source_store.cursors(group, src_entry.uuid, topic)
        translated: dict[int, int] = {}
        for partition, cursor in sorted(cursors.items()):
            if partition >= replica_topics.get(topic, 0):
                continue  # not replicated yet: nothing to translate to
            translated[partition] = translate_partition(
                replica_store, dst_entry.uuid, position_key(src_entry.uuid, topic, partition), topic, partition, cursor
            )
            rows.append(TranslatedCursor(topic, partition, cursor, translated[partition]))
        if commit and translated:
            replica_store.commit_cursors(group, dst_entry.uuid, topic, translated)
    return rows
