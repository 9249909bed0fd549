"""Moving messages from one source partition into replicas: the one routine that copystream,
the in-process gateway and the Spark writers all use."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from streamrep.errors import AlreadyExists, Conflict, StreamrepError
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import position_key
from streamrep.replication.apply import plan_apply
from streamrep.store.base import Store

CONFLICT_RETRIES = 20

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


def apply_batch(replica_store: Store, replica_uuid: str, unit: SourcePartition, batch: Sequence[Message],
                source_start: int = 0) -> int:
    """Apply ``batch`` (consecutive messages of ``unit``) to one replica, exactly once.

    The marks are read, the plan made, and the apply committed only if the marks did not
    move meanwhile; if another gateway moved them, the plan is made again from the new marks.
    Messages the source's retention removed before they were applied are recorded as lost
    (``plan_apply``) and logged as a WARNING; the replica's own retention runs afterwards.
    Returns how many messages were written.

    :param source_start: the oldest offset the source holds, read before ``batch`` was.
    """
    for _ in range(CONFLICT_RETRIES):
        marks = replica_store.marks(replica_uuid)
        plan = plan_apply(replica_uuid, unit.source_uuid, unit.topic, unit.partition, batch, marks, source_start)
        if plan.empty:
            return 0
        expect = {key: marks.get(key) for key in plan.marks}
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
