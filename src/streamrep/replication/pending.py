"""What a replica has not applied yet: the messages its source holds beyond the replica's stored
positions, less those that came from the replica itself (multi-master), which a gateway skips."""

from __future__ import annotations

from dataclasses import dataclass

from streamrep.client.catalog import HasCatalog
from streamrep.model.message import Message
from streamrep.model.replication import position_key
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.store.base import Store

# Up to this many pending messages per partition are read to leave out those that came from
# the replica itself (multi-master): they will be skipped, not applied. Above it, the count is
# an upper bound.
PRECISE_PENDING_MAX = 10_000


def to_apply(messages: list[Message], replica_uuid: str) -> tuple[int, int, int | None, int | None]:
    """``range_stats`` of the messages a gateway would apply to the replica (not its own)."""
    prefix = f"{replica_uuid}/".encode("ascii")
    kept = [m for m in messages if not (m.header(ORIGIN_HEADER) or b"").startswith(prefix)]
    if not kept:
        return 0, 0, None, None
    stamps = [m.timestamp for m in kept]
    return len(kept), sum(len(m.value or b"") for m in kept), min(stamps), max(stamps)


def partition_pending(
    source_store: Store, src_uuid: str, dst_uuid: str, marks: dict[str, int], topic: str, partition: int
) -> tuple[int, int, int | None, int | None]:
    """``(messages, bytes, oldest ts, newest ts)`` of one source partition not yet applied to the
    replica ``dst_uuid`` whose marks are ``marks``: exact (origin-filtered) for small backlogs."""
    start, _ = source_store.offsets(src_uuid, topic, partition)
    position = max(marks.get(position_key(src_uuid, topic, partition), start), start)
    n, b, lo, hi = source_store.range_stats(src_uuid, topic, partition, position)
    if 0 < n <= PRECISE_PENDING_MAX:
        read, _ = source_store.read_span(src_uuid, topic, partition, position, n)
        n, b, lo, hi = to_apply(read, dst_uuid)
    return n, b, lo, hi


@dataclass(frozen=True)
class Pending:
    """What a replica lacks: ``messages`` and value ``bytes`` its source holds that it has not
    applied, and the timestamps of the ``oldest`` and ``newest`` of them (None with none)."""

    messages: int
    bytes: int
    oldest: int | None = None
    newest: int | None = None


def pending(admin: HasCatalog, source: str, replica: str) -> Pending:
    """What the source holds that ``replica`` has not applied: messages, bytes, and the
    timestamps of the oldest and newest of them."""
    catalog = admin.catalog
    src, dst = catalog.path(source), catalog.path(replica)
    src_entry, dst_entry = catalog.entry(src), catalog.entry(dst)
    source_store, replica_store = catalog.store(src), catalog.store(dst)
    marks = replica_store.marks(dst_entry.uuid)
    messages = size = 0
    oldest: int | None = None
    newest: int | None = None
    for topic, count in source_store.topics(src_entry.uuid).items():
        for partition in range(count):
            n, b, lo, hi = partition_pending(source_store, src_entry.uuid, dst_entry.uuid, marks, topic, partition)
            messages, size = messages + n, size + b
            if lo is not None and hi is not None:
                oldest = lo if oldest is None else min(oldest, lo)
                newest = hi if newest is None else max(newest, hi)
    return Pending(messages, size, oldest, newest)
