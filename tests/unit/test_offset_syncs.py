"""The offset syncs' invariant (``model/offsetsyncs.py``), by property: batches applied one after
another, pruned as the stores prune them, translate every cursor as the unpruned syncs do where
they must (exact in the recent window), never after them, and within the stated repeat bound."""

from __future__ import annotations

import math
from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from streamrep.model.offsetsyncs import KEEP_RECENT, PRUNE_EVERY, SPACING, merged, prune, translate_offset

# One applied batch: (source offsets skipped before it, its runs as (length, source gap after), replica gap before).
batch = st.tuples(
    st.integers(0, 3),
    st.lists(st.tuples(st.integers(1, 40), st.integers(0, 2)), min_size=1, max_size=3),
    st.integers(0, 2),
)


def simulate(batches, prune_every):
    """Apply ``batches``; return every run (unpruned) and the pruned entries, pruned as a store does."""
    full: list[tuple[int, int, int, int]] = []
    kept: list[tuple[int, int, int, int]] = []
    source = replica = written = 0
    for skip, runs, replica_gap in batches:
        source += skip
        replica += replica_gap
        for length, gap in runs:
            run = (source, 0, replica, length)
            full.append(run)
            kept.append(run)
            source += length + gap
            replica += length
            written += 1
        if written >= prune_every:
            kept, written = prune(kept), 0
    return full, kept


def check(full, kept, step=1):
    head = full[-1][0] + full[-1][3]
    end = full[-1][2] + full[-1][3] + 1
    window = full[-KEEP_RECENT][0] if len(full) >= KEEP_RECENT else 0
    # Every applied message's (source offset, replica offset): both ascend (applies are in order).
    sources = [s + i for s, _, _, n in full for i in range(n)]
    replicas = [r + i for _, _, r, n in full for i in range(n)]
    for cursor in range(0, head + 2, step):
        exact = translate_offset(full, cursor, end)
        got = translate_offset(kept, cursor, end)
        assert got <= exact, f"cursor {cursor}: {got} skips past {exact}"
        if cursor >= window:
            assert got == exact, f"cursor {cursor} in the recent window: {got} != {exact}"
        # The source's messages before the cursor that a consumer starting at ``got`` reads again.
        repeated = max(0, bisect_left(sources, cursor) - bisect_left(replicas, got))
        assert repeated * SPACING <= max(0, head - cursor), f"cursor {cursor}: {repeated} repeated, head {head}"
    bound = KEEP_RECENT + PRUNE_EVERY + 4 * math.ceil(math.log(head + 2) / math.log(1 + 1 / SPACING)) + 4
    assert len(kept) <= bound


@settings(max_examples=60, deadline=None)
@given(st.lists(batch, min_size=1, max_size=400), st.sampled_from([1, 7, PRUNE_EVERY]))
def test_pruned_syncs_translate_exactly_recently_never_skip_and_repeat_little(batches, prune_every):
    full, kept = simulate(batches, prune_every)
    check(full, kept)


def test_contiguous_runs_merge_into_one_and_stay_exact():
    full = [(i * 10, 0, i * 10, 10) for i in range(1000)]  # a one-way embedded replica: batch after batch
    kept = []
    for run in full:
        kept = prune([*kept, run])
    assert kept == [(0, 0, 0, 10_000)]
    assert all(translate_offset(kept, c, 10_000) == c for c in range(0, 10_001, 7))


def test_many_batches_keep_a_bounded_set():
    full, kept = simulate([(0, [(5, 1)], 1)] * 20_000, PRUNE_EVERY)
    assert len(full) == 20_000
    assert len(kept) < 250, len(kept)
    check(full, kept, step=37)


def test_a_blur_mark_stands_for_what_it_dropped():
    assert merged([(10, 0, 20, 5), (0, 0, 0, 10)]) == [(0, 0, 0, 10), (10, 0, 20, 5)]
    syncs = [(0, 0, 0, 3), (3, 0, 7, 0), (50, 0, 60, 5)]
    assert translate_offset(syncs, 1, 99) == 1  # in a run: exact
    assert translate_offset(syncs, 3, 99) == 7  # blurred: the mark's offset
    assert translate_offset(syncs, 49, 99) == 7
    assert translate_offset(syncs, 52, 99) == 62
    assert translate_offset(syncs, 55, 99) == 99
