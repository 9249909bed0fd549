"""What a replica partition must still hold of what was applied to it, by the offset syncs of one
source partition (``model/offsetsyncs.py``): the replica offsets applied, the source offset of one,
the applied messages it no longer holds (``missing_applied``), and the one-line errors of a replica
partition that lost applied messages or holds messages never replicated into it (a planted topic).
"""

from __future__ import annotations

from collections.abc import Sequence

from streamrep.model.offsetsyncs import translate_offset
from streamrep.model.paths import StreamPath


def into_partition(syncs: Sequence[tuple[int, int, int, int]], partition: int) -> list[tuple[int, int, int, int]]:
    """The offset syncs of one source partition whose runs landed in replica partition ``partition``
    (the one of the same number, which the checks of this module are about)."""
    return [sync for sync in syncs if sync[1] == partition]


def applied_offsets(syncs: Sequence[tuple[int, int, int, int]]) -> tuple[int, int] | None:
    """``[first, end)``: the replica offsets that the offset syncs of one source partition say
    were applied (``model.offsetsyncs``); None when nothing was."""
    if not syncs:
        return None
    return min(r for _, _, r, _ in syncs), max(r + n for _, _, r, n in syncs)


def source_offset_of(syncs: Sequence[tuple[int, int, int, int]], replica_offset: int) -> int | None:
    """The source offset of the message applied at ``replica_offset``; None where the syncs do not
    say exactly (between runs, or blurred by a prune)."""
    for s, _, r, n in syncs:
        if r <= replica_offset < r + n:
            return s + replica_offset - r
    return None


def missing_applied(
    syncs: Sequence[tuple[int, int, int, int]], bounds: tuple[int, int] | None, hold_from: int
) -> tuple[int, int] | None:
    """``[first, end)``: replica offsets applied from one source partition (its ``syncs``) that the
    replica partition no longer holds, or None when it holds them.

    :param bounds: the replica partition's ``(start, end)``; None: it is gone (topic deleted).
    :param hold_from: the oldest source offset whose message the replica must still hold: the
        source's own first offset (what its retention removed, the replica's may have too).

    A partition whose end is below what was applied is not the one applied to (Kafka starts a
    re-created topic at 0 again): all of it is missing. One whose start is above the replica offset
    of ``hold_from``'s message lost the applied messages in between (records deleted, or a topic
    re-created on the embedded store, which continues its offsets); the caller decides whether the
    replica's own retention explains that."""
    applied = applied_offsets(syncs)
    if applied is None:
        return None
    first, end = applied
    if bounds is None or bounds[1] < end:
        return first, end
    required = max(first, translate_offset(syncs, hold_from, end))
    if bounds[0] > required:
        return required, min(bounds[0], end)
    return None


def lost_data_line(
    replica: StreamPath | str,
    topic: str,
    partition: int,
    missing: tuple[int, int],
    bounds: tuple[int, int] | None,
    syncs: Sequence[tuple[int, int, int, int]],
) -> str:
    """The one-line error of a replica partition that lost applied messages (``missing_applied``)."""
    first, end = missing
    sources = [source_offset_of(syncs, first), source_offset_of(syncs, end - 1)]
    of_source = f" (source offsets {sources[0]}-{sources[1]})" if None not in sources else ""
    if bounds is None:
        now = "the topic is gone"
    elif bounds[0] == bounds[1]:
        now = f"it holds no message (next offset {bounds[1]})"
    else:
        now = f"it holds offsets {bounds[0]}-{bounds[1] - 1}"
    return (
        f"replica {replica} topic {topic} partition {partition} lost applied messages: offsets {first}-{end - 1}"
        f"{of_source} are missing, {now} (deleted, truncated or re-created); remove the replica and set it up again"
    )


def planted_line(replica: StreamPath | str, topic: str, partition: int, bounds: tuple[int, int], source: str) -> str:
    """The one-line error of a one-way replica partition that held messages before anything was
    applied to it from ``source``: not replicated, so not the source's."""
    return (
        f"replica {replica} topic {topic} partition {partition} holds messages that were not replicated from "
        f"{source} (offsets {bounds[0]}-{bounds[1] - 1}, before its first apply): a topic planted in the replica; "
        f"remove the replica and set it up again"
    )
