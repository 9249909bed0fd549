"""The replay-safe apply of replicated messages: what to write to a replica, and which marks
to store with it in the same destination transaction.

Two kinds of marks, both kept in the replica's cluster:

- **position** ``p|<source uuid>|<topic>|<partition>``: the next source offset to apply from
  that source partition. A replayed or overlapping batch is skipped below it; a batch that
  starts above it is a gap and is refused. The stored position is the truth: a Spark
  checkpoint is only a cache of it.
- **origin mark** ``o|<origin uuid>|<topic>|<partition>``: the next offset, in the stream where
  a message was first produced, that this replica still needs. It drops the copies that reach
  a replica by two paths (a mesh of masters, or fan-in of a chain), so every message is applied
  exactly once everywhere.

Every replicated message carries the header ``streamrep.origin`` = ``<uuid>/<partition>/<offset>``
of its first stream; a message is never applied to its origin stream (loop prevention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from streamrep.errors import Conflict
from streamrep.model.message import Message
from streamrep.model.replication import origin_key, position_key

ORIGIN_HEADER = "streamrep.origin"


@dataclass(frozen=True)
class Origin:
    """Where a message was first produced."""

    uuid: str
    partition: int
    offset: int

    def encode(self) -> bytes:
        return f"{self.uuid}/{self.partition}/{self.offset}".encode("ascii")

    @classmethod
    def of(cls, message: Message, stream_uuid: str) -> "Origin":
        """The origin a message carries, or ``stream_uuid`` (where it was read) if it has none."""
        raw = message.header(ORIGIN_HEADER)
        if raw is None:
            return cls(stream_uuid, message.partition, message.offset)
        uuid, partition, offset = raw.decode("ascii").rsplit("/", 2)
        return cls(uuid, int(partition), int(offset))


@dataclass
class ApplyPlan:
    """What one apply writes: the messages (with origin headers), the marks to store, and
    the offset syncs ``(index in messages, source offset)`` for cursor translation."""

    messages: list[Message] = field(default_factory=list)
    marks: dict[str, int] = field(default_factory=dict)
    syncs: list[tuple[int, int]] = field(default_factory=list)
    skipped: int = 0  # below the position (replayed) or already here by another path or loop

    @property
    def empty(self) -> bool:
        return not self.messages and not self.marks


def with_origin(message: Message, origin: Origin) -> Message:
    headers = tuple(h for h in message.headers if h[0] != ORIGIN_HEADER) + ((ORIGIN_HEADER, origin.encode()),)
    return message._replace(headers=headers, offset=-1)


def plan_apply(
    replica_uuid: str,
    source_uuid: str,
    topic: str,
    partition: int,
    batch: Sequence[Message],
    marks: Mapping[str, int],
    source_start: int = 0,
) -> ApplyPlan:
    """Plan the apply of ``batch`` (consecutive messages of one source partition, in offset
    order) to a replica whose stored marks are ``marks``.

    :param source_start: the oldest offset the source still holds; a position below it was
        lost to the source's retention, which is not a gap in replication.
    """
    plan = ApplyPlan()
    if not batch:
        return plan
    pkey = position_key(source_uuid, topic, partition)
    position = marks.get(pkey, source_start)
    first = batch[0].offset
    if first > max(position, source_start):
        raise Conflict(
            f"replication gap: {topic}/{partition} of source {source_uuid} is at {position} "
            f"but the batch starts at {first}"
        )
    origin_next: dict[str, int] = {}
    previous_source_offset = None
    for message in batch:
        if message.offset < position:
            plan.skipped += 1
            continue
        origin = Origin.of(message, source_uuid)
        okey = origin_key(origin.uuid, topic, origin.partition)
        next_needed = origin_next.get(okey, marks.get(okey, 0))
        if origin.uuid == replica_uuid or origin.offset < next_needed:
            plan.skipped += 1
        else:
            if previous_source_offset is None or message.offset != previous_source_offset + 1:
                plan.syncs.append((len(plan.messages), message.offset))
            plan.messages.append(with_origin(message, origin))
            origin_next[okey] = origin.offset + 1
            previous_source_offset = message.offset
            continue
        previous_source_offset = None
    last = batch[-1].offset
    if last + 1 > position:
        plan.marks[pkey] = last + 1
    plan.marks.update(origin_next)
    return plan
