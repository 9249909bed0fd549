"""Reading source partitions by spans: the next messages of each partition from a position, up to an
end, with the span of source offsets the read covered and the oldest offset the source still holds,
all that an apply needs (``transfer.apply_reads``, ``apply.plan_apply``). Readers advance by spans,
never by ``last offset + 1``: a Kafka source's offsets may have gaps (transaction markers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, cast

from streamrep.errors import StreamrepError
from streamrep.model.message import Message
from streamrep.replication.transfer import SourcePartition
from streamrep.store.base import SpanRead, Store


class SourceRead(NamedTuple):
    """One read of a source partition: its messages, the span of source offsets it covered
    (``plan_apply``'s ``span``), and the oldest offset the source held after the read."""

    messages: list[Message]
    span: tuple[int, int]
    source_start: int


def read_until(
    source_store: Store,
    unit: SourcePartition,
    start: int,
    max_messages: int,
    end: int | None = None,
    readable: int | None = None,
) -> tuple[list[Message], int]:
    """``Store.read_span`` of ``unit``, stopping at source offset ``end`` (None: no end): the
    messages and the offset to read next, never beyond ``end``.

    :param readable: as ``Store.read_span``.
    """
    [found] = _read_until(source_store, [SourceSpan(unit, start, max_messages, end, readable)])
    if isinstance(found, StreamrepError):
        raise found
    return found


class SourceSpan(NamedTuple):
    """One partition's part of ``read_sources``: ``read_source``'s arguments (``readable``: the
    end of ``bounds``, for ``read_until``)."""

    unit: SourcePartition
    start: int
    max_messages: int
    end: int | None = None
    readable: int | None = None
    bounds: tuple[int, int] | None = None


def _read_until(source_store: Store, spans: Sequence[SourceSpan]) -> list[tuple[list[Message], int] | StreamrepError]:
    """``read_until`` of each span, in order, in one ``Store.read_spans``."""
    result: list[tuple[list[Message], int] | StreamrepError | None] = []
    wanted: list[SpanRead] = []
    for unit, start, max_messages, end, readable, _ in spans:
        if end is not None:
            max_messages = min(max_messages, end - start)  # the range holds at most this many messages
        if max_messages <= 0:
            result.append(([], start))
            continue
        result.append(None)
        wanted.append(SpanRead(unit.source_uuid, unit.topic, unit.partition, start, max_messages, readable))
    found = iter(source_store.read_spans(wanted) if wanted else [])
    for i, span in enumerate(spans):
        if result[i] is not None:
            continue
        got = next(found)
        if not isinstance(got, StreamrepError) and span.end is not None and got[1] > span.end:
            # The read went past the end (offsets holding no message were within it): every
            # message of [start, end) is still in it.
            messages = got[0]
            if messages and messages[-1].offset >= span.end:
                messages = [m for m in messages if m.offset < span.end]
            got = (messages, span.end)
        result[i] = got
    return cast("list[tuple[list[Message], int] | StreamrepError]", result)


def read_sources(source_store: Store, spans: Sequence[SourceSpan]) -> list[SourceRead | StreamrepError]:
    """``read_source`` of each span, in order, with one ``Store.read_spans`` for all (a network store
    fetches every partition at once) and one ``Store.offsets_many`` for those whose oldest offset
    must be asked again; a span that cannot be read gets its error, and the others are still read."""
    bounded = []
    for span in spans:
        end = span.end
        if span.bounds is not None:
            end = span.bounds[1] if end is None else min(end, span.bounds[1])
        bounded.append(span._replace(end=end, readable=None if span.bounds is None else span.bounds[1]))
    reads = _read_until(source_store, bounded)
    # When the batch starts at ``start``, nothing before it was removed: ``bounds``' first stands.
    ask = [
        i
        for i, (span, read) in enumerate(zip(bounded, reads, strict=True))
        if not isinstance(read, StreamrepError)
        and not (span.bounds is not None and read[0] and read[0][0].offset == span.start)
    ]
    asked = source_store.offsets_many(
        [(bounded[i].unit.source_uuid, bounded[i].unit.topic, bounded[i].unit.partition) for i in ask]
    )
    first = dict(zip(ask, asked, strict=True))
    result: list[SourceRead | StreamrepError] = []
    for i, (span, read) in enumerate(zip(bounded, reads, strict=True)):
        if isinstance(read, StreamrepError):
            result.append(read)
            continue
        held = first.get(i)
        if isinstance(held, StreamrepError):
            result.append(held)
            continue
        source_start = span.bounds[0] if held is None and span.bounds is not None else cast("tuple[int, int]", held)[0]
        result.append(SourceRead(read[0], (span.start, read[1]), source_start))
    return result


def read_source(
    source_store: Store,
    unit: SourcePartition,
    start: int,
    max_messages: int,
    end: int | None = None,
    bounds: tuple[int, int] | None = None,
) -> SourceRead:
    """``read_until``, with the oldest offset the source holds read afterwards: messages that
    retention removed before the read are then recorded as lost by the apply, not skipped.

    :param bounds: ``(first, end)`` of the partition as ``Store.offsets`` gave them a moment ago.
        The read goes no further than that ``end`` and does not ask for it again; and when the batch
        starts at ``start``, nothing before it was removed, so ``first`` stands for the oldest offset
        held (asked again otherwise).
    """
    [found] = read_sources(source_store, [SourceSpan(unit, start, max_messages, end, bounds=bounds)])
    if isinstance(found, StreamrepError):
        raise found
    return found
