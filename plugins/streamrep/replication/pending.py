"""What a replica has not applied yet: the messages its source holds beyond the replica's stored
positions, less those that came from the replica itself (multi-master: the source's offset syncs
from the replica say which, and a gateway would skip them), so a reverse link right after a
multi-master autosetup has nothing pending."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from streamrep.client.admin import StreamAdmin
from streamrep.model.message import Message
from streamrep.model.replication import position_key
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.store.base import Store

# Up to this many offsets per partition that may hold pending messages are read, so the count is
# exact (messages that came from the replica itself are left out: a gateway skips them). Above it,
# the count is an estimate, from watermarks and offset syncs, and says so (``pendingIsEstimate``).
PRECISE_PENDING_MAX = 10_000
PROBE_BATCH = 1_000  # messages read at a time when an estimate looks for its first applicable message


class Counted(NamedTuple):
    """One source partition's pending figures: ``messages``, value ``bytes``, the ``oldest`` and
    ``newest`` timestamps (None with none), and whether they are an ``estimate``."""

    messages: int
    bytes: int
    oldest: int | None
    newest: int | None
    estimate: bool = False


NOTHING = Counted(0, 0, None, None)


def to_apply(messages: list[Message], replica_uuid: str) -> Counted:
    """The figures of the messages a gateway would apply to the replica (not its own)."""
    prefix = f"{replica_uuid}/".encode("ascii")
    kept = [m for m in messages if not (m.header(ORIGIN_HEADER) or b"").startswith(prefix)]
    if not kept:
        return NOTHING
    stamps = [m.timestamp for m in kept]
    return Counted(len(kept), sum(len(m.value or b"") for m in kept), min(stamps), max(stamps))


def uncovered(syncs: list[tuple[int, int, int, int]], start: int, end: int) -> list[tuple[int, int]]:
    """``[start, end)`` less the source's offsets that its offset syncs from the replica cover: those
    messages came from the replica, so they will not be applied back to it (``model/offsetsyncs.py``;
    a blur mark covers nothing)."""
    ranges = []
    at = start
    for _, _, replica_offset, count in syncs:  # the source's own offsets, ascending
        first, last = max(replica_offset, at), min(replica_offset + count, end)
        if first < last:
            if at < first:
                ranges.append((at, first))
            at = last
    if at < end:
        ranges.append((at, end))
    return ranges


def _read(store: Store, uuid: str, topic: str, partition: int, span: tuple[int, int]) -> Iterator[list[Message]]:
    """The messages of ``span`` of one partition, a batch at a time."""
    at, end = span
    while at < end:
        batch, at = store.read_span(uuid, topic, partition, at, min(PROBE_BATCH, end - at))
        batch = [m for m in batch if m.offset < end]
        if not batch:
            return
        yield batch


def applied_position(marks: dict[str, int], src_uuid: str, topic: str, partition: int, start: int) -> int:
    """The next offset of a source partition that a replica (whose marks are ``marks``) will apply:
    its position mark, or the source's first offset held (``start``) when it has none or one below it."""
    return max(marks.get(position_key(src_uuid, topic, partition), start), start)


def partition_pending(
    source_store: Store, src_uuid: str, dst_uuid: str, marks: dict[str, int], topic: str, partition: int
) -> Counted:
    """What one source partition holds that the replica ``dst_uuid`` (whose marks are ``marks``)
    will still apply: from its stored position to the source's end, less what the source got from
    the replica (its offset syncs). Exact up to ``PRECISE_PENDING_MAX`` candidate offsets, and
    always exact at zero (``isUptodate`` depends on it); above, an estimate: on Kafka, the
    candidate offsets (transaction markers included); on the embedded store, its message count."""
    start, end = source_store.offsets(src_uuid, topic, partition)
    position = applied_position(marks, src_uuid, topic, partition, start)
    if position >= end:
        return NOTHING
    ranges = uncovered(source_store.offset_syncs(src_uuid, position_key(dst_uuid, topic, partition)), position, end)
    candidates = sum(b - a for a, b in ranges)
    if candidates <= PRECISE_PENDING_MAX:
        read = [m for span in ranges for batch in _read(source_store, src_uuid, topic, partition, span) for m in batch]
        return to_apply(read, dst_uuid)
    # An estimate, but never a false "something pending": find the first message to apply.
    first = next(
        (
            found
            for span in ranges
            for batch in _read(source_store, src_uuid, topic, partition, span)
            if (found := to_apply(batch, dst_uuid)).messages
        ),
        None,
    )
    if first is None:
        return NOTHING
    if source_store.counts_cheaply:  # the embedded store counts messages without reading them
        spans = [source_store.range_stats(src_uuid, topic, partition, a, b) for a, b in ranges]
        messages, size = sum(s[0] for s in spans), sum(s[1] for s in spans)
        newest = max((s[3] for s in spans if s[3] is not None), default=first.newest)
    else:  # Kafka: the candidate offsets, sized as the first messages read, and the newest read at the end
        messages = candidates
        size = first.bytes * messages // first.messages
        tail_from = max(ranges[-1][0], ranges[-1][1] - PROBE_BATCH)
        tail = [
            m for batch in _read(source_store, src_uuid, topic, partition, (tail_from, ranges[-1][1])) for m in batch
        ]
        newest = to_apply(tail, dst_uuid).newest or first.newest
    return Counted(max(messages, first.messages), size, first.oldest, newest, True)


@dataclass(frozen=True)
class Pending:
    """What a replica lacks: ``messages`` and value ``bytes`` its source holds that it has not
    applied, and the timestamps of the ``oldest`` and ``newest`` of them (None with none)."""

    messages: int
    bytes: int
    oldest: int | None = None
    newest: int | None = None
    estimate: bool = False  # ``messages`` and ``bytes`` are estimates (``partition_pending``)


def pending(admin: StreamAdmin, source: str, replica: str) -> Pending:
    """What the source holds that ``replica`` has not applied: messages, bytes, and the
    timestamps of the oldest and newest of them."""
    src, dst = admin.path(source), admin.path(replica)
    src_entry, dst_entry = admin.entry(src), admin.entry(dst)
    source_store, replica_store = admin.store(src), admin.store(dst)
    marks = replica_store.marks(dst_entry.uuid)
    messages = size = 0
    oldest: int | None = None
    newest: int | None = None
    estimate = False
    for topic, count in source_store.topics(src_entry.uuid).items():
        for partition in range(count):
            n, b, lo, hi, guess = partition_pending(
                source_store, src_entry.uuid, dst_entry.uuid, marks, topic, partition
            )
            messages, size, estimate = messages + n, size + b, estimate or guess
            if lo is not None and hi is not None:
                oldest = lo if oldest is None else min(oldest, lo)
                newest = hi if newest is None else max(newest, hi)
    return Pending(messages, size, oldest, newest, estimate)
