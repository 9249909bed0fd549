"""Moving messages from one source partition into replicas: the one routine that copystream,
the in-process gateway and the Spark writers all use. Here: the unit of work (``SourcePartition``),
giving a replica the source's topics, and the exactly-once apply of read batches (``apply_reads``);
reading them is ``reads.py``, checking what replicas still hold is ``held.py``."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from streamrep.errors import AlreadyExists, Conflict, RetryNow, StreamrepError, Unavailable
from streamrep.model.lanes import apply_lane
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import origin_key, position_key, stop_key
from streamrep.replication.apply import ApplyPlan, own_messages, plan_apply
from streamrep.store.base import ApplyResult, PartitionApplies, ReplicaApply, Store

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

    def lane_group(self) -> tuple[str, int]:
        """Its source stream and apply lane (``model.lanes``): the partitions one gateway, or one
        Spark task, applies together, so that no two processes write one lane at once."""
        return self.source_uuid, apply_lane(self.topic, self.partition)


def by_source_cluster(units: Iterable[SourcePartition]) -> dict[str, list[SourcePartition]]:
    """``units`` grouped by their source's cluster, each group in the order given: what one store
    call per cluster (``offsets_many``, ``read_spans``) asks at once."""
    groups: dict[str, list[SourcePartition]] = defaultdict(list)
    for unit in units:
        groups[unit.source.cluster].append(unit)
    return groups


def ensure_topics(
    source_store: Store,
    source_uuid: str,
    replica_store: Store,
    replica_uuid: str,
    only: Iterable[str] | None = None,
    exclude: Iterable[str] = (),
) -> dict[str, int]:
    """Give the replica every topic of the source (of ``only``, but not ``exclude``), with at
    least as many partitions (the partition of a message is kept). Returns the source's topics."""
    source_topics = source_store.topics(source_uuid)
    replica_topics = replica_store.topics(replica_uuid)
    wanted = (set(only) if only is not None else set(source_topics)) - set(exclude)
    marks: dict[str, int] | None = None
    for topic, count in source_topics.items():
        if topic not in wanted:
            continue
        have = replica_topics.get(topic)
        if have is None:
            marks = replica_store.marks(replica_uuid) if marks is None else marks
            if any(position_key(source_uuid, topic, p) in marks for p in range(count)):
                continue  # applied to once, then deleted: not re-created empty (``lost_data`` reports it)
            try:
                replica_store.create_topic(replica_uuid, topic, count)
            except AlreadyExists:
                pass  # a concurrent gateway created it
        elif have < count:
            replica_store.add_partitions(replica_uuid, topic, count)
    return source_topics


def apply_batch(
    replica_store: Store,
    replica_uuid: str,
    unit: SourcePartition,
    batch: Sequence[Message],
    source_start: int = 0,
    span: tuple[int, int] | None = None,
) -> int:
    """Apply ``batch`` (the messages of ``unit`` in ``span``) to one replica, exactly once
    (``apply_to_replicas``). Returns how many messages were written; raises what failed,
    ``FlowStopped`` once a failover has stopped the flow.

    :param source_start: the oldest offset the source holds, read after ``batch`` was.
    :param span: ``(read_from, read_next)``, the source offsets the read covered (``plan_apply``);
        None for a gap-free read of exactly ``batch``.
    """
    written, errors = apply_to_replicas(replica_store, [replica_uuid], unit, batch, source_start, span)
    if errors:
        raise errors[replica_uuid]
    return written[replica_uuid]


def apply_to_replicas(
    replica_store: Store,
    replica_uuids: Sequence[str],
    unit: SourcePartition,
    batch: Sequence[Message],
    source_start: int = 0,
    span: tuple[int, int] | None = None,
    compression: Mapping[str, str] | None = None,
    known_marks: dict[str, dict[str, int]] | None = None,
) -> tuple[dict[str, int], dict[str, StreamrepError]]:
    """Apply ``batch`` (the messages of ``unit`` in ``span``) to replicas of one cluster, each
    exactly once: read once, written many times (``Store.apply_many``, one transaction where
    the backend allows).

    Each replica's marks are read, its plan made, and its apply committed only if its marks did
    not move meanwhile; if another gateway moved them, its plan is made again from the new marks.
    Replicas whose marks agree share one plan. Messages the source's retention removed before
    they were applied are recorded as lost (``plan_apply``) and logged as a WARNING; the
    replica's own retention runs afterwards. A replica whose flow a failover stopped
    (``stop_key``) gets ``FlowStopped`` and nothing written.

    :param source_start: the oldest offset the source holds, read after ``batch`` was.
    :param span: as ``apply_batch``.
    :param compression: the Kafka codec to write each replica with, by UUID (``Store.apply``);
        a replica not in it gets the store's default.
    :param known_marks: replicas' marks the caller read earlier (a gateway's pass), by UUID: the
        first plan uses them instead of a read (on Kafka a round trip; each apply checks its marks
        in its own transaction, so marks that moved meanwhile only cost a retry from a fresh read).
        Updated in place with what each apply wrote; a replica that failed or lost a race is
        dropped from it (its next plan reads the store).
    :return: messages written, and the errors, by replica UUID (each replica in one of them).
    """
    read = UnitApply(unit, replica_uuids, batch, source_start, span, compression)
    return apply_reads(replica_store, [read], known_marks)[0]


class UnitApply(NamedTuple):
    """One source partition's batch for ``apply_reads``: ``apply_to_replicas``' arguments."""

    unit: SourcePartition
    replica_uuids: Sequence[str]
    batch: Sequence[Message]
    source_start: int = 0
    span: tuple[int, int] | None = None
    compression: Mapping[str, str] | None = None  # by replica UUID; None: each replica the store's default


class _UnitState:
    """Where one ``UnitApply`` stands in ``apply_reads``: its replicas still to write, and the results."""

    def __init__(self, read: UnitApply):
        self.read = read
        self.stop = stop_key(read.unit.source_uuid, read.unit.topic, read.unit.partition)
        # The plan of a batch of the source's own messages depends only on two marks.
        self.shareable = own_messages(read.batch)
        self.pending = list(read.replica_uuids)
        self.written: dict[str, int] = {}
        self.errors: dict[str, StreamrepError] = {}
        self.conflicts: dict[str, RetryNow] = {}  # the last lost race of each replica still pending
        self.used: dict[str, dict[str, int]] = {}  # the marks each replica's plan was made from
        self.plans: dict[str, ApplyPlan] = {}

    def applies(self, replica_store: Store, known: dict[str, dict[str, int]], first: bool) -> list[ReplicaApply]:
        """The pending replicas' applies, planned from their marks (``known`` on the first attempt)."""
        unit, (_, _, batch, source_start, span, compression) = self.read.unit, self.read
        own_key = origin_key(unit.source_uuid, unit.topic, unit.partition)
        applies: list[ReplicaApply] = []
        shared: dict[tuple[int | None, int | None], ApplyPlan] = {}  # (position, origin mark) -> plan
        self.plans = {}
        for replica_uuid in self.pending:
            marks = known.get(replica_uuid) if first else None
            if marks is None or self.stop in marks:  # a stop is confirmed by a read of the store
                try:
                    marks = replica_store.marks(replica_uuid)
                except Unavailable:
                    raise
                except StreamrepError as err:  # this replica only (removed meanwhile, say): the others go on
                    self.errors[replica_uuid] = err
                    continue
            self.used[replica_uuid] = marks
            if self.stop in marks:  # a failover stopped this flow: an error, so no caller loops on the same read
                self.errors[replica_uuid] = FlowStopped(
                    f"replication of {unit.source} {unit.topic}/{unit.partition} into stream uuid {replica_uuid} "
                    "was stopped by a failover"
                )
                continue
            share = (marks.get(unit.key), marks.get(own_key)) if self.shareable else None
            plan = shared.get(share) if share is not None else None
            if plan is None:
                try:
                    plan = plan_apply(
                        replica_uuid, unit.source_uuid, unit.topic, unit.partition, batch, marks, source_start, span
                    )
                except StreamrepError as err:
                    self.errors[replica_uuid] = err
                    continue
                if share is not None:
                    shared[share] = plan
            if plan.empty:
                self.written[replica_uuid] = 0
                known[replica_uuid] = marks
                continue
            expect = {key: marks.get(key) for key in plan.marks}
            expect[self.stop] = None  # a failover that stops the flow meanwhile refuses this commit
            self.plans[replica_uuid] = plan
            applies.append(
                ReplicaApply(
                    replica_uuid,
                    plan.messages,
                    plan.marks,
                    expect,
                    plan.syncs,
                    None if compression is None else compression.get(replica_uuid),
                )
            )
        self.pending = []
        return applies

    def applied(
        self,
        replica_store: Store,
        applies: Sequence[ReplicaApply],
        results: Sequence[ApplyResult],
        known: dict[str, dict[str, int]],
        dropped: set[str],
    ) -> None:
        """Take the results of ``applies``: a lost race stays pending, to be planned again. ``known``
        gets what each apply wrote, merged with what the others of its round wrote (every plan of a
        round was made from one state); a replica in ``dropped`` is left out of it."""
        for apply, result in zip(applies, results, strict=False):
            if isinstance(result, RetryNow):
                self.pending.append(apply.stream)
                self.conflicts[apply.stream] = result
                continue
            if isinstance(result, StreamrepError):
                self.errors[apply.stream] = result
                continue
            plan = self.plans[apply.stream]
            self.written[apply.stream] = len(plan.messages)
            if apply.stream not in dropped:
                known[apply.stream] = {**known.get(apply.stream, self.used[apply.stream]), **plan.marks}
            _after_apply(replica_store, apply.stream, self.read.unit, plan)


def apply_reads(
    replica_store: Store, reads: Sequence[UnitApply], known_marks: dict[str, dict[str, int]] | None = None
) -> list[tuple[dict[str, int], dict[str, StreamrepError]]]:
    """``apply_to_replicas`` for the batches of several source partitions at once (a gateway's pass):
    each attempt writes every replica still pending through one ``Store.apply_partitions``, so a
    backend can overlap their transactions. The results are in the order of ``reads``."""
    known = known_marks if known_marks is not None else {}
    dropped: set[str] = set()
    states = [_UnitState(read) for read in reads]
    for attempt in range(CONFLICT_RETRIES):
        batches = [(state, state.applies(replica_store, known, attempt == 0)) for state in states if state.pending]
        batches = [(state, applies) for state, applies in batches if applies]
        if batches:
            try:
                results: list[list[ApplyResult]] = replica_store.apply_partitions(
                    [PartitionApplies(s.read.unit.topic, s.read.unit.partition, s.read.unit.key, a) for s, a in batches]
                )
            except (StreamrepError, RetryNow) as err:  # the whole write failed: nothing of it was committed
                results = [[err] * len(applies) for _, applies in batches]
            for (state, applies), unit_results in zip(batches, results, strict=True):
                state.applied(replica_store, applies, unit_results, known, dropped)
        # A replica that failed or lost a race here: its marks are read again, never guessed.
        for state in states:
            dropped.update(state.errors, state.pending)
        for replica_uuid in dropped:
            known.pop(replica_uuid, None)
        if not any(state.pending for state in states):
            break
    for state in states:  # the retries ran out: the lost race is reported as the user-facing Conflict
        state.errors.update((uuid, Conflict(str(state.conflicts[uuid]))) for uuid in state.pending)
    return [(state.written, state.errors) for state in states]


def _after_apply(replica_store: Store, replica_uuid: str, unit: SourcePartition, plan: ApplyPlan) -> None:
    """What follows a committed apply: the warning for a loss, and the replica's retention."""
    if plan.lost is not None:
        first, end = plan.lost
        log.warning(
            "stream %s (uuid %s) topic %s partition %d: %d messages (offsets %d-%d) were removed by "
            "the source's retention before they were replicated to stream uuid %s",
            unit.source,
            unit.source_uuid,
            unit.topic,
            unit.partition,
            end - first,
            first,
            end - 1,
            replica_uuid,
        )
    try:
        replica_store.retain(replica_uuid, unit.topic)
    except StreamrepError as err:  # the batch is committed: retention runs again on the next one
        log.warning("stream uuid %s topic %s: retention failed: %s", replica_uuid, unit.topic, err)


def next_position(
    replica_store: Store,
    replica_uuid: str,
    unit: SourcePartition,
    source_start: int,
    marks: Mapping[str, int] | None = None,
) -> int:
    """Where replication of ``unit`` into a replica resumes: its stored position (the truth),
    or the oldest message the source holds if it has none.

    :param marks: the replica's marks if the caller has just read them (saves a query).
    """
    if marks is None:
        marks = replica_store.marks(replica_uuid)
    return max(marks.get(unit.key, source_start), source_start)
