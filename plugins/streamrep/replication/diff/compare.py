"""The full compare (``diff_streams``): every identity either side holds up to the consistent point,
matched by identity, one topic at a time (``compare_topic``).

For each identity both streams hold, the key, value, headers (but the origin header), timestamp and
partition must be equal (one digest covers them: ``identity.canonical``); and the messages of one
origin partition must come in the same relative order in each partition of both streams (all but
one longest run in the same order are out of order). A further copy of an identity on one side is
duplicated. A message one side holds and the other lacks is a difference unless it is in flight
(``snapshot.py`` says when) or beyond the other's end, or it originated in the other below the
other's start now: *expired* there (``expired_in_src``, ``expired_in_dst``), counted, not a
difference, nothing to import (``_one_only``).

**Imported messages** are compared in order only with the other imported messages of their order
group: an import appends (a log cannot insert), so its place after what the partition already held
says nothing about the source's order, while imports append in the source's order
(``replication/importstream.py``).
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable

from streamrep.client.admin import StreamAdmin
from streamrep.replication.diff.identity import Origin, Place
from streamrep.replication.diff.result import Difference, DiffResult, Kind, PartitionPoint
from streamrep.replication.diff.scan import Group, Reader, Scanned, Scanner, Unit, units
from streamrep.replication.diff.snapshot import Side, snapshot


def _longest_increasing(ranks: list[int]) -> set[int]:
    """The indexes of one longest strictly increasing subsequence of ``ranks`` (patience sorting)."""
    tails: list[int] = []  # ranks
    tail_index: list[int] = []
    previous = [-1] * len(ranks)
    for i, rank in enumerate(ranks):
        at = bisect.bisect_left(tails, rank)
        if at == len(tails):
            tails.append(rank)
            tail_index.append(i)
        else:
            tails[at] = rank
            tail_index[at] = i
        previous[i] = tail_index[at - 1] if at else -1
    kept = set()
    i = tail_index[-1] if tail_index else -1
    while i >= 0:
        kept.add(i)
        i = previous[i]
    return kept


def _one_only(scanned: Scanned, holder: Side, other: Side, topic: str) -> str:
    """Why ``holder`` has a message ``other`` lacks: "beyond" (it originated in ``other`` after the
    end ``other`` had when the run started: not compared), "expired" (it originated in ``other``,
    whose retention has removed it since), "in flight" (``other`` has not applied it yet: by its
    position mark for ``holder``'s partition when it replicates ``holder``, or by its origin mark
    when the message's origin still flows into it along any chain of links) or "differs"."""
    origin = scanned.origin
    if origin.uuid == other.uuid:
        held = other.bounds.get((topic, origin.partition))
        if held is not None and origin.offset >= held[1]:
            return "beyond"
        if held is not None and origin.offset < held[0]:
            return "expired"
        return "differs"
    if other.applied is not None:
        position = other.applied.get((topic, scanned.place.partition))
        if position is not None and scanned.place.offset >= position:
            return "in flight"
    needed = other.origins.get((origin.uuid, topic, origin.partition), 0)
    if origin.offset >= needed and other.feeds.reaches(origin.uuid, other.uuid, topic, origin.partition):
        return "in flight"
    return "differs"


Held = dict[Origin, Scanned]  # one side's first copy of each identity
InOrder = dict[tuple[Group, bool], list[tuple[int, int, Origin]]]


def compare_topic(
    result: DiffResult,
    scanner: Scanner,
    src: Side,
    dst: Side,
    topic: str,
    keep: set[Group] | None = None,
) -> None:
    """Compare one topic of both sides (only the order groups in ``keep``, when given: only the
    partitions holding them are read)."""
    sides = {"src": src, "dst": dst}
    partitions = None if keep is None else {p for (_, p, _, _) in keep}
    held, again = _first_copies(scanner.digests(sides, units(sides, topic, partitions), keep))
    if keep is None:  # the CRC variant counted every message in its first pass
        result.compared += sum(len(held[name]) + len(again[name]) for name in sides)
    # the final sort is stable: a duplicate stays before a difference of the same identity and place
    found = _duplicates(topic, held, again)
    only_src = _only_in(src, dst, held["src"], held["dst"], topic)
    result.dst_behind += len(only_src["in flight"])
    result.expired_in_dst += len(only_src["expired"])
    changed, in_order = _matched(topic, held["src"], held["dst"])
    found += [Difference(Kind.MISSING_IN_DST, topic, s.origin, s.place, None) for s in only_src["differs"]]
    found += changed
    only_dst = _only_in(dst, src, held["dst"], held["src"], topic)
    result.src_behind += len(only_dst["in flight"])
    result.expired_in_src += len(only_dst["expired"])
    found += [Difference(Kind.EXTRA_IN_DST, topic, s.origin, None, s.place) for s in only_dst["differs"]]
    found += _out_of_order(topic, in_order)
    found.sort(key=_where)
    result.differences += found


def _first_copies(
    digests: Iterable[tuple[Unit, Iterable[Scanned]]],
) -> tuple[dict[str, Held], dict[str, list[Scanned]]]:
    """Each side's first copy of each identity (in the order the units come), and any further copies."""
    held: dict[str, Held] = {"src": {}, "dst": {}}
    again: dict[str, list[Scanned]] = {"src": [], "dst": []}
    for (name, _, _), scans in digests:
        for scanned in scans:
            if scanned.origin in held[name]:
                again[name].append(scanned)
            else:
                held[name][scanned.origin] = scanned
    return held, again


def _duplicates(topic: str, held: dict[str, Held], again: dict[str, list[Scanned]]) -> list[Difference]:
    """A ``DUPLICATED`` difference for each further copy, with where each side holds the first."""

    def first(name: str, origin: Origin) -> Place | None:
        return held[name][origin].place if origin in held[name] else None

    return [
        Difference(
            Kind.DUPLICATED, topic, copy.origin, first("src", copy.origin), first("dst", copy.origin), name, copy.place
        )
        for name in ("src", "dst")
        for copy in again[name]
    ]


def _only_in(holder: Side, other: Side, held: Held, others: Held, topic: str) -> dict[str, list[Scanned]]:
    """The messages ``holder`` holds and ``other`` lacks, by why (``_one_only``)."""
    why: dict[str, list[Scanned]] = defaultdict(list)
    for origin, scanned in held.items():
        if origin not in others:
            why[_one_only(scanned, holder, other, topic)].append(scanned)
    return why


def _matched(topic: str, src_held: Held, dst_held: Held) -> tuple[list[Difference], InOrder]:
    """The identities both sides hold: a ``CHANGED`` difference where the digests differ, else their
    offsets (dst, src) by order group and whether either copy was imported (appended), to order."""
    changed: list[Difference] = []
    in_order: InOrder = defaultdict(list)
    for origin, mine in src_held.items():
        theirs = dst_held.get(origin)
        if theirs is None:
            continue
        if theirs.digest != mine.digest:  # the digest covers the partition
            changed.append(Difference(Kind.CHANGED, topic, origin, mine.place, theirs.place))
        else:
            group = (topic, mine.place.partition, origin.uuid, origin.partition)
            in_order[(group, mine.imported or theirs.imported)].append((theirs.place.offset, mine.place.offset, origin))
    return changed, in_order


def _out_of_order(topic: str, in_order: InOrder) -> list[Difference]:
    """An ``OUT_OF_ORDER`` difference for each message outside one longest run in the same order on both sides."""
    found: list[Difference] = []
    for ((_, partition, _, _), _), common in sorted(in_order.items()):
        common.sort()  # the destination's order
        kept = _longest_increasing([src_offset for _, src_offset, _ in common])
        found += [
            Difference(Kind.OUT_OF_ORDER, topic, origin, Place(partition, src_offset), Place(partition, dst_offset))
            for i, (dst_offset, src_offset, origin) in enumerate(common)
            if i not in kept
        ]
    return found


def _where(difference: Difference) -> tuple[int, int, str, int, int]:
    place = difference.src or difference.dst or Place(-1, -1)
    return place.partition, place.offset, difference.origin.uuid, difference.origin.partition, difference.origin.offset


def topics(src: Side, dst: Side) -> list[str]:
    return sorted({t for t, _ in (*src.bounds, *dst.bounds)})


def finish(result: DiffResult, scanner: Scanner, first_exit: bool) -> DiffResult:
    result.read_messages, result.read_bytes = scanner.messages, scanner.bytes
    if first_exit and result.differences:
        result.differences = result.differences[:1]
        result.stopped_early = True
    return result


def start(
    admin: StreamAdmin, source: str, destination: str, crc: bool, scanner: Scanner | None
) -> tuple[Side, Side, DiffResult, Scanner]:
    """The consistent point (``snapshot``), an empty result for it, and the scanner (default: a
    ``Reader``, in this process): where both compares begin."""
    src, dst = snapshot(admin, source, destination)
    return src, dst, _new_result(src, dst, crc), Reader() if scanner is None else scanner


def _new_result(src: Side, dst: Side, crc: bool) -> DiffResult:
    result = DiffResult(src.path, src.uuid, dst.path, dst.uuid, crc, dst.applied is not None, src.applied is not None)
    result.losses = dst.losses + src.losses
    for topic, partition in sorted({*src.bounds, *dst.bounds}):
        result.points.append(
            PartitionPoint(
                topic,
                partition,
                src.bounds.get((topic, partition)),
                dst.bounds.get((topic, partition)),
                None if dst.applied is None else dst.applied.get((topic, partition)),
                None if src.applied is None else src.applied.get((topic, partition)),
            )
        )
    return result


def diff_streams(
    admin: StreamAdmin, source: str, destination: str, first_exit: bool = False, scanner: Scanner | None = None
) -> DiffResult:
    """``diffstreams``: compare every message of both streams up to the consistent point
    (``snapshot``), scanning with ``scanner`` (default: a ``Reader``, in this process).
    ``first_exit`` stops after the first topic with a difference and keeps only its first difference."""
    src, dst, result, scanner = start(admin, source, destination, False, scanner)
    for topic in topics(src, dst):
        compare_topic(result, scanner, src, dst, topic)
        if first_exit and result.differences:
            break
    return finish(result, scanner, first_exit)
