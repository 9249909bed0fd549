"""Whether each replica partition still holds what was applied to it (``lost_data``): a topic deleted,
records deleted or the topic re-created at the replica, or messages planted in a one-way replica
before its first apply. The gateway checks it every pass and leaves such partitions out, so nothing
is applied over the hole; ``replica list`` shows the same errors (``status.py``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import NamedTuple

from streamrep.errors import NotFound, StreamrepError
from streamrep.model.acls import one_way_replica
from streamrep.model.applied import (
    applied_offsets,
    into_partition,
    lost_data_line,
    missing_applied,
    planted_line,
    source_offset_of,
)
from streamrep.model.catalog import StreamEntry
from streamrep.model.paths import StreamPath
from streamrep.model.replication import own_writes_key
from streamrep.replication.transfer import SourcePartition, by_source_cluster
from streamrep.store.base import Store


class HeldCheck(NamedTuple):
    """One replica of one source partition, for ``lost_data``."""

    unit: SourcePartition
    replica: StreamPath
    replica_uuid: str


def lost_data(
    replica_store: Store,
    checks: Sequence[HeldCheck],
    source_store: Callable[[SourcePartition], Store],
    replica_entry: Callable[[StreamPath], StreamEntry],
) -> list[str | None]:
    """For each check, the one-line error of a replica partition that no longer holds what its
    offset syncs say was applied to it (its topic deleted, records deleted, or re-created), or of
    a one-way replica's partition that held messages before its first apply (a planted topic);
    None when it holds what it should, or cannot be read now.

    Cheap enough for every pass: one ``offset_syncs_many`` and one ``offsets_many`` on the
    replica's store for all checks. Only a partition whose start is above its oldest applied
    message costs more: the source's first offset (batched per source), since messages the source's
    retention removed may be gone from the replica too; and, if the replica's own ttl may explain
    the rest, one source read for the newest missing message's timestamp. Only a one-way replica's
    partition holding messages before its first apply is read (one message)."""
    if not checks:
        return []
    syncs = replica_store.offset_syncs_many([(c.replica_uuid, c.unit.key) for c in checks])
    asked = replica_store.offsets_many([(c.replica_uuid, c.unit.topic, c.unit.partition) for c in checks])
    result: list[str | None] = [None] * len(checks)
    moved: dict[int, tuple[list[tuple[int, int, int, int]], tuple[int, int]]] = {}  # start above applied
    short: dict[int, int] = {}  # a partition said to lack applied messages -> the applied end
    marks = cache(replica_store.marks)  # by replica stream, read only for a partition never applied to
    for i, (check, found, bounds) in enumerate(zip(checks, syncs, asked, strict=True)):
        if isinstance(bounds, StreamrepError) and not isinstance(bounds, NotFound):
            continue  # cannot tell now: the next pass asks again
        held = None if isinstance(bounds, StreamrepError) else bounds
        found = into_partition(found, check.unit.partition)
        applied = applied_offsets(found)
        if applied is None:
            result[i] = _planted(replica_store, check, held, replica_entry, marks)
        elif held is not None and held[1] >= applied[1] and held[0] > applied[0]:
            moved[i] = found, held  # retention, or records deleted: decided below, with the source's start
        else:
            missing = missing_applied(found, held, 0)
            if missing is not None:
                result[i] = lost_data_line(check.replica, check.unit.topic, check.unit.partition, missing, held, found)
                short[i] = applied[1]
    _drop_unmarked_commits(replica_store, checks, short, result)
    starts = _source_starts([checks[i].unit for i in moved], source_store)
    for i, (found, held) in moved.items():
        check = checks[i]
        start = starts.get(check.unit)
        if start is None:
            continue
        missing = missing_applied(found, held, start)
        if missing is not None and not _expired(check, missing, found, source_store, replica_entry):
            result[i] = lost_data_line(check.replica, check.unit.topic, check.unit.partition, missing, held, found)
    return result


def _drop_unmarked_commits(
    replica_store: Store, checks: Sequence[HeldCheck], ends: Mapping[int, int], result: list[str | None]
) -> None:
    """Clear the errors of partitions whose log already holds every applied message (``ends``: by
    check, the applied end): an apply's offset syncs can be readable before its commit marker reaches
    the data partition (Kafka writes the markers one partition at a time), and until then the
    partition's readable end is below what the syncs say was applied. Nothing was lost there."""
    if not ends:
        return
    order = sorted(ends)
    written = replica_store.written_ends(
        [(checks[i].replica_uuid, checks[i].unit.topic, checks[i].unit.partition) for i in order]
    )
    for i, end in zip(order, written, strict=True):
        if not isinstance(end, StreamrepError) and end >= ends[i]:
            result[i] = None


def _planted(
    replica_store: Store,
    check: HeldCheck,
    held: tuple[int, int] | None,
    replica_entry: Callable[[StreamPath], StreamEntry],
    marks: Callable[[str], Mapping[str, int]],
) -> str | None:
    """``lost_data``'s error for a partition nothing was applied to yet that holds a message, on a
    replica that only its one upstream writes (a multi-master replica's own producers write it).
    The replica's own writes from a promoted period are no plant: a failback marked where they end
    (``own_writes_key``), and only what comes after that mark is read."""
    if held is None or held[1] <= held[0]:
        return None
    entry = replica_entry(check.replica)
    if not one_way_replica(entry) or len(entry.upstreams) != 1:
        return None
    unit = check.unit
    own_end = marks(check.replica_uuid).get(own_writes_key(unit.source_uuid, unit.topic, unit.partition), 0)
    first = max(held[0], own_end)
    if first >= held[1]:
        return None
    messages, _ = replica_store.read_span(check.replica_uuid, unit.topic, unit.partition, first, 1, held[1])
    if not messages:
        return None  # offsets holding no message (Kafka: an aborted transaction's)
    return planted_line(check.replica, unit.topic, unit.partition, (first, held[1]), str(unit.source))


def _source_starts(
    units: Sequence[SourcePartition], source_store: Callable[[SourcePartition], Store]
) -> dict[SourcePartition, int]:
    """Each unit's first offset at its source, asked once per source cluster; a unit whose source
    cannot be read now is left out."""
    starts: dict[SourcePartition, int] = {}
    for group in by_source_cluster(units).values():
        try:
            asked = source_store(group[0]).offsets_many([(u.source_uuid, u.topic, u.partition) for u in group])
        except StreamrepError:
            continue
        starts.update((u, bounds[0]) for u, bounds in zip(group, asked, strict=True) if isinstance(bounds, tuple))
    return starts


def _expired(
    check: HeldCheck,
    missing: tuple[int, int],
    syncs: Sequence[tuple[int, int, int, int]],
    source_store: Callable[[SourcePartition], Store],
    replica_entry: Callable[[StreamPath], StreamEntry],
) -> bool:
    """Whether the replica's own retention explains the ``missing`` replica offsets: it has a ttl,
    and the newest of them is older than it (its timestamp read at the source, which still holds
    it), or its source offset is no longer known exactly (pruned syncs: not accused)."""
    ttl = replica_entry(check.replica).meta.ttl
    if not ttl or ttl <= 0:
        return False
    newest = source_offset_of(syncs, missing[1] - 1)
    if newest is None:
        return True
    unit = check.unit
    try:
        found = source_store(unit).read(unit.source_uuid, unit.topic, unit.partition, newest, 1)
    except StreamrepError:
        return True  # cannot tell now: not accused
    if not found or found[0].offset != newest:
        return True  # gone at the source too
    return found[0].timestamp < time.time() * 1000 - ttl * 1000
