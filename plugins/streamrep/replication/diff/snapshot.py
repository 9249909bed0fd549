"""The consistent point of a comparison: each stream (``Side``) as it was when the run started,
read through the ``Store`` interface only (``snapshot``), with the rights checked (``check_diff``).

Each side is read up to its end when the run starts. A message one side holds and the other lacks
is **in flight** (counted as how far behind the other is, never as a difference) when the other has
not applied it yet, by either of two marks it read before its ends:
- its position mark for the holder's partition (``p|<holder uuid>|<topic>|<partition>``, as
  ``replication/pending.py`` reads it), when it replicates the holder directly;
- its origin mark for the message's stream of origin (``o|<origin uuid>|<topic>|<partition>``, the
  next origin offset it needs, whichever path brought the last one), when that origin still flows
  into it along agreed links (``Feeds``: the walk up its upstreams, less the flows a failover
  stopped). So in a mesh of three masters, what one side has applied of the third and the other has
  not yet is in flight; in a chain A->B->C, comparing A with C, what C has not got yet through B is.
A message that originated in a stream past the end it had when the run started is not compared
either (the other stream may have got it after that end was read).

**Retention.** Messages the source's retention removed before its replica applied them are held by
neither: they are **lost** (``Side.losses``, from the replica's loss records and a position below
the source's start), acknowledged or not (``stream replica acknowledge`` keeps an acknowledged
record).

Limits: a path of the walk through a cluster that cannot be read ends there (that upstream still
counts as feeding); a loss on an intermediate stream of a chain (B, comparing A with C in A->B->C)
is B's record, not reported here (``stream replica list`` of A shows it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, NotFound, StreamrepError
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.paths import StreamPath
from streamrep.replication.diff.result import Loss
from streamrep.replication.pending import applied_position
from streamrep.store.base import Store


@dataclass
class Feeds:
    """The agreed replica links that carry messages into a stream, walked up from it: the UUIDs of
    each stream's ``upstreams`` on the walk, and the flows a failover ``stopped`` (replica, upstream,
    topic, partition). A replicated message keeps its topic and partition along every link."""

    upstreams: dict[str, set[str]] = field(default_factory=dict)
    stopped: set[tuple[str, str, str, int]] = field(default_factory=set)

    def reaches(self, origin: str, stream: str, topic: str, partition: int) -> bool:
        """Whether messages first produced in ``origin`` (topic, partition) still flow into ``stream``."""
        seen, todo = {stream}, [stream]
        while todo:
            at = todo.pop()
            for upstream in self.upstreams.get(at, ()):
                if upstream in seen or (at, upstream, topic, partition) in self.stopped:
                    continue
                if upstream == origin:
                    return True
                seen.add(upstream)
                todo.append(upstream)
        return False


@dataclass
class Side:
    """One stream at the start of the run: its partitions' ``[start, end)``, what it had applied of
    the other stream (its position marks for it; None when it does not replicate the other), how far
    it had got in each stream of origin (its origin marks: (origin uuid, topic, origin partition) ->
    the next origin offset it needs), the links that feed it, and its losses from the other stream."""

    path: StreamPath
    uuid: str
    store: Store
    bounds: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    applied: dict[tuple[str, int], int] | None = None
    origins: dict[tuple[str, str, int], int] = field(default_factory=dict)
    feeds: Feeds = field(default_factory=Feeds)
    losses: list[Loss] = field(default_factory=list)

    def end_of(self, topic: str, partition: int) -> int | None:
        held = self.bounds.get((topic, partition))
        return None if held is None else held[1]

    def held(self) -> int:
        """How many messages it holds up to the consistent point (``-engine auto`` decides by it)."""
        return sum(end - start for start, end in self.bounds.values())


def check_diff(
    admin: StreamAdmin, source: str, destination: str
) -> tuple[StreamPath, StreamEntry, StreamPath, StreamEntry]:
    """The rights a comparison needs, as MapR's diffstreams: consumeperm or copyperm on each stream
    (no user is exempt); two streams, distinct by path and by UUID."""
    src, dst = admin.path(source), admin.path(destination)
    if src == dst:
        raise InvalidArgument(f"cannot compare stream {src} with itself")
    src_entry = admin.entry(src)
    dst_entry = admin.entry(dst)
    admin.require_any(src_entry, src, "consumeperm", "copyperm")
    admin.require_any(dst_entry, dst, "consumeperm", "copyperm")
    if src_entry.uuid == dst_entry.uuid:
        raise InvalidArgument(f"cannot compare stream {src} with itself: {dst} is the same stream {src_entry.uuid}")
    return src, src_entry, dst, dst_entry


def _replicates(source: StreamPath, source_entry: StreamEntry, replica: StreamPath, replica_entry: StreamEntry) -> bool:
    """Whether ``replica`` is the source's replica, by identity (a link bound to its UUID; paused or
    not yet agreed by the replica still counts: what it has not applied is pending)."""
    found = rules.agreement(source, source_entry, replica, replica_entry)
    return found.link is not None and not found.broken


def _bounds(store: Store, uuid: str) -> dict[tuple[str, int], tuple[int, int]]:
    """Every partition's ``[start, end)`` now, asked all at once (one round trip on a network store)."""
    parts = [
        (uuid, topic, partition) for topic, count in sorted(store.topics(uuid).items()) for partition in range(count)
    ]
    result = {}
    for (_, topic, partition), found in zip(parts, store.offsets_many(parts), strict=True):
        if isinstance(found, NotFound):  # deleted meanwhile: holds nothing
            continue
        if isinstance(found, StreamrepError):
            raise found
        result[(topic, partition)] = found
    return result


def _applied(marks: dict[str, int], other: Side) -> dict[tuple[str, int], int]:
    """A replica's positions for ``other``'s partitions (``pending.partition_pending``'s rule: no mark,
    or one below what ``other`` still holds, is its first offset held). A partition whose flow a
    failover stopped (a stop mark) has none: nothing more arrives from it, so nothing is in flight."""
    return {
        (topic, partition): applied_position(marks, other.uuid, topic, partition, start)
        for (topic, partition), (start, _) in other.bounds.items()
        if rules.stop_key(other.uuid, topic, partition) not in marks
    }


def _origins(marks: Mapping[str, int]) -> dict[tuple[str, str, int], int]:
    found = {}
    for key, needed in marks.items():
        if key.startswith("o|"):
            origin, rest = key[2:].split("|", 1)
            topic, partition = rest.rsplit("|", 1)
            found[(origin, topic, int(partition))] = needed
    return found


def _stops(uuid: str, marks: Mapping[str, int]) -> set[tuple[str, str, str, int]]:
    return {(uuid, key.split("|")[1], *rules.mark_partition(key)) for key in marks if key.startswith("s|")}


def _feeds(admin: StreamAdmin, path: StreamPath, entry: StreamEntry, marks: Mapping[str, int]) -> Feeds:
    """Walk the agreed links up from a stream (``_replicates``). An upstream whose cluster cannot be
    read counts by its link's UUID, and the walk stops there: its own upstreams are unknown."""
    feeds = Feeds(stopped=_stops(entry.uuid, marks))
    todo, seen = [(path, entry)], {entry.uuid}
    while todo:
        replica, replica_entry = todo.pop()
        ups = feeds.upstreams.setdefault(replica_entry.uuid, set())
        for link in replica_entry.upstreams:
            try:
                up = admin.path(link.path)
                up_entry = admin.entry(up)
            except StreamrepError:
                ups.update([link.uuid] if link.uuid else [])
                continue
            if not _replicates(up, up_entry, replica, replica_entry):
                continue
            ups.add(up_entry.uuid)
            if up_entry.uuid not in seen:
                seen.add(up_entry.uuid)
                todo.append((up, up_entry))
                try:
                    feeds.stopped |= _stops(up_entry.uuid, admin.store(up).marks(up_entry.uuid))
                except StreamrepError:
                    pass  # its stop marks unknown: its flows count as running
    return feeds


def _losses(marks: Mapping[str, int], source: Side, name: str) -> list[Loss]:
    """A replica's losses from ``source`` (named ``name``): its loss records, acknowledged or not
    (an acknowledged record wins: acknowledge writes it before it drops the loss mark), and the
    losses a gateway has yet to record (its position is below the source's start)."""
    found: dict[tuple[str, int, int], Loss] = {}
    for prefix, acknowledged in (("l|", False), ("a|", True)):
        for key, end in rules.recorded_losses(marks, source.uuid, prefix).items():
            # recorded_losses keeps only the keys parse_loss_key reads
            _, topic, partition, first = cast("tuple[str, str, int, int]", rules.parse_loss_key(key, prefix))
            found[(topic, partition, first)] = Loss(name, topic, partition, first, end - 1, acknowledged)
    starts = {unit: start for unit, (start, _) in source.bounds.items()}
    for topic, partition, first, end in rules.unrecorded_losses(marks, source.uuid, starts):
        found.setdefault((topic, partition, first), Loss(name, topic, partition, first, end - 1, False))
    return [found[k] for k in sorted(found)]


def snapshot(admin: StreamAdmin, source: str, destination: str) -> tuple[Side, Side]:
    """Check the rights (``check_diff``) and fix the consistent point. Each side's marks are read
    before its own ends, and the source's ends last, so whatever the destination holds from the
    source is within the source's ends, and every message a side had applied (by its position or
    origin marks) is within its own ends."""
    src, src_entry, dst, dst_entry = check_diff(admin, source, destination)
    src_side = Side(src, src_entry.uuid, admin.store(src))
    dst_side = Side(dst, dst_entry.uuid, admin.store(dst))
    dst_marks = dst_side.store.marks(dst_side.uuid)
    dst_side.bounds = _bounds(dst_side.store, dst_side.uuid)
    src_marks = src_side.store.marks(src_side.uuid)
    src_side.bounds = _bounds(src_side.store, src_side.uuid)
    for side, marks, entry, other, other_entry, other_name in (
        (dst_side, dst_marks, dst_entry, src_side, src_entry, "src"),
        (src_side, src_marks, src_entry, dst_side, dst_entry, "dst"),
    ):
        side.origins = _origins(marks)
        side.feeds = _feeds(admin, side.path, entry, marks)
        if _replicates(other.path, other_entry, side.path, entry):  # it replicates the other directly
            side.feeds.upstreams[side.uuid].add(other.uuid)
            side.applied = _applied(marks, other)
            side.losses = _losses(marks, other, other_name)
    return src_side, dst_side
