"""Moving messages from one source partition into replicas: the one routine that copystream,
the in-process gateway and the Spark writers all use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from streamrep.errors import AlreadyExists, Conflict
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import position_key
from streamrep.replication.apply import plan_apply
from streamrep.store.base import Store

CONFLICT_RETRIES = 20


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
    Returns how many messages were written.
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
            return len(plan.messages)
        except Conflict as conflict:
            last = conflict
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
