"""Moving messages from one source partition into replicas: the one routine that copystream,
the in-process gateway and the Spark writers all use."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, NamedTuple, Sequence

from streamrep.errors import AlreadyExists, Conflict, StreamrepError
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import position_key, stop_key
from streamrep.replication.apply import plan_apply
from streamrep.store.base import Store

CONFLICT_RETRIES = 20


class FlowStopped(Conflict):
    """The flow from a source partition into a replica was stopped by a failover."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class SourcePartition:
    """One partition of one topic of a source stream: the unit gateways share."""

    source_uuid: str
    topic: str
    partition: int
    source: StreamPath

    @property
    def key(self) -> str:
        return position_key(self.source_uuid, self.topic, self.partition)


def ensure_topics(source_store: Store, source_uuid: str, replica_store: Store, replica_uuid: str,
                  only: Iterable[str] | None = None) -> dict[str, int]:
    """Give the replica every topic of the source, with at least as many partitions (the
    partition of a message is kept). Returns the source's topics."""
    source_topics = source_store.topics(source_uuid)
    replica_topics = replica_store.topics(replica_uuid)
    wanted = set(only) if only is not None else set(source_topics)
    for topic, count in source_topics.items():
        if topic not in wanted:
            continue
        have = replica_topics.get(topic)
        if have is None:
            try:
                replica_store.create_topic(replica_uuid, topic, count)
            except AlreadyExists:
                pass  # a concurrent gateway created it
        elif have < count:
            replica_store.add_partitions(replica_uuid, topic, count)
    return source_topics


class SourceRead(NamedTuple):
    """One read of a source partition: its messages, the span of source offsets it covered
    (``plan_apply``'s ``span``), and the oldest offset the source held after the read."""

    messages: list[Message]
    span: tuple[int, int]
    source_start: int


def read_until(source_store: Store, unit: SourcePartition, start: int, max_messages: int,
               end: int | None = None) -> tuple[list[Message], int]:
    """``Store.read_span`` of ``unit``, stopping at source offset ``end`` (None: no end): the
    messages and the offset to read next, never beyond ``end``."""
    if end is not None:
        max_messages = min(max_messages, end - start)  # the range holds at most this many messages
    if max_messages <= 0:
        return [], start
    messages, read_next = source_store.read_span(unit.source_uuid, unit.topic, unit.partition, start, max_messages)
    if end is not None and read_next > end:
        # The read went past the end (offsets holding no message were within it): every
        # message of [start, end) is still in it.
        if messages and messages[-1].offset >= end:
            messages = [m for m in messages if m.offset < end]
        read_next = end
    return messages, read_next


def read_source(source_store: Store, unit: SourcePartition, start: int, max_messages: int,
                end: int | None = None) -> SourceRead:
    """``read_until``, with the oldest offset the source holds read afterwards: messages that
    retention removed before the read are then recorded as lost by the apply, not skipped."""
    messages, read_next = read_until(source_store, unit, start, max_messages, end)
    source_start = source_store.offsets(unit.source_uuid, unit.topic, unit.partition)[0]
    return SourceRead(messages, (start, read_next), source_start)


def apply_batch(replica_store: Store, replica_uuid: str, unit: SourcePartition, batch: Sequence[Message],
                source_start: int = 0, span: tuple[int, int] | None = None) -> int:
    """Apply ``batch`` (the messages of ``unit`` in ``span``) to one replica, exactly once.

    The marks are read, the plan made, and the apply committed only if the marks did not
    move meanwhile; if another gateway moved them, the plan is made again from the new marks.
    Messages the source's retention removed before they were applied are recorded as lost
    (``plan_apply``) and logged as a WARNING; the replica's own retention runs afterwards.
    Returns how many messages were written. Once a failover has stopped the flow (``stop_key``)
    it raises ``FlowStopped`` and writes nothing.

    :param source_start: the oldest offset the source holds, read after ``batch`` was.
    :param span: ``(read_from, read_next)``, the source offsets the read covered (``plan_apply``);
        None for a gap-free read of exactly ``batch``.
    """
    stop = stop_key(unit.source_uuid, unit.topic, unit.partition)
    for _ in range(CONFLICT_RETRIES):
        marks = replica_store.marks(replica_uuid)
        if stop in marks:  # a failover stopped this flow: an error, so no caller loops on the same read
            raise FlowStopped(f"replication of {unit.source} {unit.topic}/{unit.partition} into stream uuid "
                              f"{replica_uuid} was stopped by a failover")
        plan = plan_apply(replica_uuid, unit.source_uuid, unit.topic, unit.partition, batch, marks, source_start,
                          span)
        if plan.empty:
            return 0
        expect = {key: marks.get(key) for key in plan.marks}
        expect[stop] = None  # a failover that stops the flow meanwhile refuses this commit
        try:
            replica_store.apply(replica_uuid, unit.topic, unit.partition, plan.messages, plan.marks, expect,
                                source=unit.key, syncs=plan.syncs)
        except Conflict as conflict:
            last = conflict
            continue
        if plan.lost is not None:
            first, end = plan.lost
            log.warning("stream %s (uuid %s) topic %s partition %d: %d messages (offsets %d-%d) were removed by "
                        "the source's retention before they were replicated to stream uuid %s",
                        unit.source, unit.source_uuid, unit.topic, unit.partition, end - first, first, end - 1,
                        replica_uuid)
        try:
            replica_store.retain(replica_uuid, unit.topic)
        except StreamrepError as err:  # the batch is committed: retention runs again on the next one
            log.warning("stream uuid %s topic %s: retention failed: %s", replica_uuid, unit.topic, err)
        return len(plan.messages)
    raise last


def next_position(replica_store: Store, replica_uuid: str, unit: SourcePartition, source_start: int,
                  marks: Mapping[str, int] | None = None) -> int:
    """Where replication of ``unit`` into a replica resumes: its stored position (the truth),
    or the oldest message the source holds if it has none.

    :param marks: the replica's marks if the caller has just read them (saves a query).
    """
    if marks is None:
        marks = replica_store.marks(replica_uuid)
    return max(marks.get(unit.key, source_start), source_start)
