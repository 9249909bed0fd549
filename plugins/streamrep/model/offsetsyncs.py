"""Offset syncs: the bounded map from one source partition's offsets to a replica's, and the
cursor translation over it (pure, no I/O; both stores keep what ``prune`` returns).

A sync is ``(source offset s, replica partition, replica offset r, run length n)``:

- ``n > 0``, a **run**: source offsets ``s .. s+n-1`` were applied, in order, at replica offsets
  ``r .. r+n-1``. Source offsets between two runs were not applied (skipped by loop prevention or
  already present, or no message there: Kafka's transaction markers).
- ``n == 0``, a **blur mark**, left where ``prune`` dropped syncs: every message of the source at
  offset ``s`` or later is at replica offset ``r`` or later, and every one before ``s`` is before
  ``r``; between ``s`` and the next sync nothing else is known.

The invariant (``tests/unit/test_offset_syncs.py`` checks it by property, against the unpruned
syncs, across repeated prunes):

1. **Exact where it matters.** The newest ``KEEP_RECENT`` entries are never dropped, and runs that
   continue each other on both sides are merged with no loss (a one-way embedded replica keeps one
   run for ever). A cursor at or after the oldest of the newest ``KEEP_RECENT`` runs translates
   exactly as with every sync kept.
2. **Never skips.** Elsewhere the translation is at or before the exact one.
3. **Repeats little.** A cursor ``D`` source offsets behind the newest applied source offset is
   translated to a replica offset from which fewer than ``D / SPACING`` of the source's messages
   before the cursor are read again.
4. **Bounded.** Older entries are kept exponentially spaced: after a prune, the distance from the
   head grows by at least ``1 + 1/SPACING`` every four older entries, so a partition keeps about
   ``KEEP_RECENT + 4 log(offsets) / log(1 + 1/SPACING)`` rows at most (in practice far fewer), and
   the stores prune at least every ``PRUNE_EVERY`` new runs.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence

Sync = tuple[int, int, int, int]

KEEP_RECENT = 64  # the newest entries, never dropped: translation is exact from the oldest of them on
SPACING = 4  # a blurred span is at most 1/SPACING of its end's distance from the head
PRUNE_EVERY = 64  # a store prunes a partition's syncs once this many new runs were written since


def translate_offset(syncs: Sequence[Sync], cursor: int, replica_end: int) -> int:
    """The replica offset of the first replicated message at or after source offset ``cursor``:
    exact where ``syncs`` are (see the module), never after it where a blur mark stands in.

    :param syncs: entries in source order (``Store.offset_syncs``).
    :param replica_end: where the next message will land if ``cursor`` is not replicated yet.
    """
    i = bisect_right([s[0] for s in syncs], cursor) - 1
    if i >= 0:
        source_offset, _, replica_offset, count = syncs[i]
        if count == 0:
            return replica_offset  # blurred: the earliest replica offset the cursor's messages may be at
        if cursor < source_offset + count:
            return replica_offset + (cursor - source_offset)
    if i + 1 < len(syncs):
        return syncs[i + 1][2]
    return replica_end


def merged(syncs: Iterable[Sync]) -> list[Sync]:
    """``syncs`` in source order, with runs that continue each other on both sides joined (lossless)."""
    out: list[Sync] = []
    for sync in sorted(syncs):
        if out:
            s, p, r, n = out[-1]
            if n and sync[3] and sync[0] == s + n and sync[1] == p and sync[2] == r + n:
                out[-1] = (s, p, r, n + sync[3])
                continue
        out.append(sync)
    return out


def prune(syncs: Iterable[Sync]) -> list[Sync]:
    """The entries to keep of one source partition's ``syncs``: merged, the newest ``KEEP_RECENT``
    kept, older ones dropped while the span a drop blurs stays within ``1/SPACING`` of its end's
    distance from the head (the module's invariant). Dropped entries are replaced by a blur mark
    where the blurred span starts. Pure."""
    entries = merged(syncs)
    if len(entries) <= KEEP_RECENT:
        return entries
    head = max(s + n for s, _, _, n in entries)
    protected = len(entries) - KEEP_RECENT
    kept: list[Sync] = []
    for i, entry in enumerate(entries[:protected]):
        following = entries[i + 1][0]
        if kept:
            s, p, r, n = kept[-1]
            start = (s + n, p, r + n, 0)  # a run's end, or a blur mark itself (n == 0)
        else:
            start = (entry[0], entry[1], entry[2], 0)
        if (following - start[0]) * SPACING > head - following:
            kept.append(entry)  # dropping it would blur too long a span
        elif not kept or kept[-1][3]:
            kept.append(start)  # dropped: a blur mark where the blurred span begins
        # else: dropped, and the blur mark before it now reaches the next entry
    return kept + entries[protected:]
