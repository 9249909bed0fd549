"""The replay-safe apply of replicated messages: what to write to a replica, and which marks
to store with it in the same destination transaction.

Three kinds of marks are planned here, all kept in the replica's cluster (a fourth, the failover's
stop mark ``s|<source uuid>|<topic>|<partition>`` of ``model.replication.stop_key``, is written by
``replication/failover/steps.py`` and checked by ``transfer.apply_batch``, never planned here):

- **position** ``p|<source uuid>|<topic>|<partition>``: the next source offset to apply from
  that source partition. A replayed or overlapping batch is skipped below it; a batch whose
  read span starts above it is a gap and is refused. A batch moves it to the end of its read
  span, past offsets that hold no message (Kafka's transaction markers), so it reaches the
  source's end offset. The stored position is the truth: the Spark gateway keeps no checkpoint,
  and every pass starts from the stored positions.
- **loss mark** ``l|<source uuid>|<topic>|<partition>|<first>`` = end: source offsets
  ``first`` to ``end - 1`` were removed by the source's retention before this replica got
  them. Recorded in the same transaction that moves the position past them, so no loss is
  skipped silently or counted twice; replication of later messages goes on, and the replica
  reads as not up to date until an admin acknowledges the loss (``stream replica acknowledge``).
- **origin mark** ``o|<origin uuid>|<topic>|<partition>``: the next offset, in the stream where
  a message was first produced, that this replica still needs. It drops the copies that reach
  a replica by two paths (a mesh of masters, or fan-in of a chain), so every message is applied
  exactly once everywhere.

Every replicated message carries the header ``streamrep.origin`` = ``<uuid>/<partition>/<offset>``
of its first stream; a message is never applied to its origin stream (loop prevention).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from streamrep.errors import Conflict, InvalidArgument
from streamrep.model.message import ORIGIN_HEADER, Message, OriginRun
from streamrep.model.replication import loss_key, origin_key, position_key, retention_loss

__all__ = ["ORIGIN_HEADER", "ApplyPlan", "own_messages", "plan_apply"]


@dataclass
class ApplyPlan:
    """What one apply writes: the messages (with origin headers), the marks to store, and
    the offset syncs ``(index in messages, source offset)`` for cursor translation.
    ``messages`` is an ``OriginRun`` when they are all the source's own (the common case)."""

    messages: list[Message] | OriginRun = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)
    syncs: list[tuple[int, int]] = field(default_factory=list)
    skipped: int = 0  # below the position (replayed) or already here by another path or loop
    lost: tuple[int, int] | None = None  # source offsets [first, end) removed by retention before replication

    @property
    def empty(self) -> bool:
        return not self.messages and not self.marks


_new_tuple = tuple.__new__


def plan_apply(
    replica_uuid: str,
    source_uuid: str,
    topic: str,
    partition: int,
    batch: Sequence[Message],
    marks: Mapping[str, int],
    source_start: int = 0,
    span: tuple[int, int] | None = None,
) -> ApplyPlan:
    """Plan the apply of ``batch`` (the messages of one source partition in ``span``, in offset
    order) to a replica whose stored marks are ``marks``.

    :param source_start: the oldest offset the source still holds, read after ``batch`` was. A
        stored position below it means messages were lost to the source's retention: the plan
        records the loss (``lost`` and a loss mark) and moves the position to ``source_start``,
        even with an empty batch.
    :param span: ``(read_from, read_next)``: the source offsets the read covered; every message
        of the partition in ``[read_from, read_next)`` is in ``batch`` (offsets holding none, such
        as Kafka's transaction markers, are skipped). The position moves to ``read_next``, also
        with an empty batch. None: ``(batch[0].offset, batch[-1].offset + 1)``, a gap-free read.
    """
    plan = ApplyPlan()
    if span is None:
        span = (batch[0].offset, batch[-1].offset + 1) if batch else None
    else:
        _check_span(span, batch, topic, partition)
    pkey = position_key(source_uuid, topic, partition)
    # What the batch holds is not lost, even if retention removed it at the source since the read.
    held_from = min(source_start, batch[0].offset) if batch else source_start
    stored = marks.get(pkey)
    position = held_from if stored is None else stored
    lost = retention_loss(stored, held_from)
    if lost is not None:
        plan.lost = lost
        plan.marks[loss_key(source_uuid, topic, partition, lost[0])] = lost[1]
        plan.marks[pkey] = position = held_from
    if span is None:
        return plan
    read_from, read_next = span
    if read_from > max(position, source_start):
        raise Conflict(
            f"replication gap: {topic}/{partition} of source {source_uuid} is at {position} "
            f"but the batch starts at {read_from}"
        )
    if read_next > position:
        plan.marks[pkey] = read_next
    if not batch:
        return plan  # offsets holding no message (transaction markers): only the position moves
    # Messages first produced in the source (no origin header) are the common case: their
    # origin key is the same for the whole batch, so it is computed once.
    own_key = origin_key(source_uuid, topic, partition)
    own_prefix = f"{source_uuid}/{partition}/".encode("ascii")
    if own_messages(batch):
        return _plan_unreplicated(plan, batch, topic, max(position, marks.get(own_key, 0)), own_key, own_prefix)
    return _plan_mixed(plan, batch, replica_uuid, source_uuid, topic, position, marks, own_key, own_prefix)


def _plan_mixed(
    plan: ApplyPlan,
    batch: Sequence[Message],
    replica_uuid: str,
    source_uuid: str,
    topic: str,
    position: int,
    marks: Mapping[str, int],
    own_key: str,
    own_prefix: bytes,
) -> ApplyPlan:
    """``plan_apply`` for a batch that is not all the source's own consecutive messages: per
    message, skip it below ``position``, at its origin's mark or back at the replica (a loop), else
    write it with an origin header and move its origin mark. The position mark is already planned."""
    next_needed: dict[str, int] = {}
    out: list[Message] = []  # a mixed batch: a plain list (an OriginRun holds only own messages)
    plan.messages, syncs = out, plan.syncs
    follows = -1  # the source offset a message must have to continue the current sync run
    for message in batch:
        value, key, headers, timestamp, _, offset, _ = message
        if offset < position:
            plan.skipped += 1
            continue
        raw = None
        for name, header_value in headers:
            if name == ORIGIN_HEADER:
                raw = header_value
        if raw is None:
            okey, origin_uuid, origin_offset = own_key, source_uuid, offset
            headers = headers + ((ORIGIN_HEADER, own_prefix + str(offset).encode("ascii")),)
        else:
            origin_uuid, origin_partition, origin_at = raw.decode("ascii").rsplit("/", 2)
            okey, origin_offset = origin_key(origin_uuid, topic, int(origin_partition)), int(origin_at)
        needed = next_needed.get(okey)
        if needed is None:
            needed = marks.get(okey, 0)
        if origin_uuid == replica_uuid or origin_offset < needed:
            plan.skipped += 1
            continue
        if offset != follows:  # a skipped message or a gap in the source's offsets ends a run
            syncs.append((len(out), offset))
        out.append(_new_tuple(Message, (value, key, headers, timestamp, -1, -1, topic)))
        next_needed[okey] = origin_offset + 1
        follows = offset + 1
    plan.marks.update(next_needed)
    return plan


def own_messages(batch: Sequence[Message]) -> bool:
    """Whether ``batch`` holds only messages first produced in its source, at consecutive offsets
    (no headers, so no origin from elsewhere): ``plan_apply``'s common case."""
    return bool(batch) and batch[-1].offset - batch[0].offset + 1 == len(batch) and not any(m[2] for m in batch)


def _check_span(span: tuple[int, int], batch: Sequence[Message], topic: str, partition: int) -> None:
    """A span must hold its batch: a caller's mistake here could move a position past messages."""
    read_from, read_next = span
    if batch:
        if not read_from <= batch[0].offset <= batch[-1].offset < read_next:
            raise InvalidArgument(
                f"the read span [{read_from}, {read_next}) of {topic}/{partition} does not hold "
                f"its batch (offsets {batch[0].offset}-{batch[-1].offset})"
            )
    elif read_from > read_next:
        raise InvalidArgument(f"the read span [{read_from}, {read_next}) of {topic}/{partition} is reversed")


def _plan_unreplicated(
    plan: ApplyPlan, batch: Sequence[Message], topic: str, needed: int, own_key: str, own_prefix: bytes
) -> ApplyPlan:
    """``plan_apply`` for messages with consecutive offsets and no headers, all first produced
    in the source: what to write is a suffix of the batch, one run, with no per-message decisions.
    The position mark is already planned."""
    first, last = batch[0].offset, batch[-1].offset
    skip = max(0, needed - first)
    keep = batch if skip == 0 else batch[skip:]
    plan.skipped = len(batch) - len(keep)
    if keep:
        plan.syncs.append((0, keep[0].offset))
        # The origin headers are made only if a store needs them one by one (OriginRun).
        plan.messages = OriginRun(keep, own_prefix, topic)
        plan.marks[own_key] = last + 1
    return plan
