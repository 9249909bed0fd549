"""Moving messages from one source partition into replicas: the one routine that copystream,
the in-process gateway and the Spark writers all use."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

from streamrep.errors import AlreadyExists, Conflict, NotFound, RetryNow, StreamrepError, Unavailable
from streamrep.model.acls import one_way_replica
from streamrep.model.catalog import StreamEntry
from streamrep.model.lanes import apply_lane
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import (
    applied_offsets,
    lost_data_line,
    missing_applied,
    origin_key,
    planted_line,
    position_key,
    source_offset_of,
    stop_key,
)
from streamrep.replication.apply import ApplyPlan, own_messages, plan_apply
from streamrep.store.base import ApplyResult, PartitionApplies, ReplicaApply, SpanRead, Store

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


class HeldCheck(NamedTuple):
    """One replica of one source partition, for ``lost_data``."""

    unit: SourcePartition
    replica: StreamPath
    replica_uuid: str


def lost_data(
    replica_store: Store,
    checks: Sequence[HeldCheck],
    source_store: Callable[[SourcePartition], Store],
    replica_entry: Callable[[StreamPath], StreamEntry],
) -> list[str | None]:
    """For each check, the one-line error of a replica partition that no longer holds what its
    offset syncs say was applied to it (its topic deleted, records deleted, or re-created), or of
    a one-way replica's partition that held messages before its first apply (a planted topic);
    None when it holds what it should, or cannot be read now.

    Cheap enough for every pass: one ``offset_syncs_many`` and one ``offsets_many`` on the
    replica's store for all checks. Only a partition whose start is above its oldest applied
    message costs more: the source's first offset (batched per source), since messages the source's
    retention removed may be gone from the replica too; and, if the replica's own ttl may explain
    the rest, one source read for the newest missing message's timestamp. Only a one-way replica's
    partition holding messages before its first apply is read (one message)."""
    if not checks:
        return []
    syncs = replica_store.offset_syncs_many([(c.replica_uuid, c.unit.key) for c in checks])
    asked = replica_store.offsets_many([(c.replica_uuid, c.unit.topic, c.unit.partition) for c in checks])
    result: list[str | None] = [None] * len(checks)
    moved: dict[int, tuple[list[tuple[int, int, int, int]], tuple[int, int]]] = {}  # start above applied
    short: dict[int, int] = {}  # a partition said to lack applied messages -> the applied end
    for i, (check, found, bounds) in enumerate(zip(checks, syncs, asked, strict=True)):
        if isinstance(bounds, StreamrepError) and not isinstance(bounds, NotFound):
            continue  # cannot tell now: the next pass asks again
        held = None if isinstance(bounds, StreamrepError) else bounds
        found = [sync for sync in found if sync[1] == check.unit.partition]
        applied = applied_offsets(found)
        if applied is None:
            result[i] = _planted(replica_store, check, held, replica_entry)
        elif held is not None and held[1] >= applied[1] and held[0] > applied[0]:
            moved[i] = found, held  # retention, or records deleted: decided below, with the source's start
        else:
            missing = missing_applied(found, held, 0)
            if missing is not None:
                result[i] = lost_data_line(check.replica, check.unit.topic, check.unit.partition, missing, held, found)
                short[i] = applied[1]
    _drop_unmarked_commits(replica_store, checks, short, result)
    starts = _source_starts([checks[i].unit for i in moved], source_store)
    for i, (found, held) in moved.items():
        check = checks[i]
        start = starts.get(check.unit)
        if start is None:
            continue
        missing = missing_applied(found, held, start)
        if missing is not None and not _expired(check, missing, found, source_store, replica_entry):
            result[i] = lost_data_line(check.replica, check.unit.topic, check.unit.partition, missing, held, found)
    return result


def _drop_unmarked_commits(
    replica_store: Store, checks: Sequence[HeldCheck], ends: Mapping[int, int], result: list[str | None]
) -> None:
    """Clear the errors of partitions whose log already holds every applied message (``ends``: by
    check, the applied end): an apply's offset syncs can be readable before its commit marker reaches
    the data partition (Kafka writes the markers one partition at a time), and until then the
    partition's readable end is below what the syncs say was applied. Nothing was lost there."""
    if not ends:
        return
    order = sorted(ends)
    written = replica_store.written_ends(
        [(checks[i].replica_uuid, checks[i].unit.topic, checks[i].unit.partition) for i in order]
    )
    for i, end in zip(order, written, strict=True):
        if not isinstance(end, StreamrepError) and end >= ends[i]:
            result[i] = None


def _planted(
    replica_store: Store,
    check: HeldCheck,
    held: tuple[int, int] | None,
    replica_entry: Callable[[StreamPath], StreamEntry],
) -> str | None:
    """``lost_data``'s error for a partition nothing was applied to yet that holds a message, on a
    replica that only its one upstream writes (a multi-master replica's own producers write it)."""
    if held is None or held[1] <= held[0]:
        return None
    entry = replica_entry(check.replica)
    if not one_way_replica(entry) or len(entry.upstreams) != 1:
        return None
    topic_marks = check.unit.key.rsplit("|", 1)[0] + "|"  # any partition of the same source topic
    if any(key.startswith(topic_marks) for key in replica_store.marks(check.replica_uuid)):
        return None  # its topic was applied to (then promoted and failed back): the stream's own writes
    messages, _ = replica_store.read_span(
        check.replica_uuid, check.unit.topic, check.unit.partition, held[0], 1, held[1]
    )
    if not messages:
        return None  # offsets holding no message (Kafka: an aborted transaction's)
    return planted_line(check.replica, check.unit.topic, check.unit.partition, held, str(check.unit.source))


def _source_starts(units: Sequence[SourcePartition], source_store: Callable[[SourcePartition], Store]) -> dict:
    """Each unit's first offset at its source, asked once per source cluster; a unit whose source
    cannot be read now is left out."""
    by_cluster: dict[str, list[SourcePartition]] = defaultdict(list)
    for unit in units:
        by_cluster[unit.source.cluster].append(unit)
    starts: dict[SourcePartition, int] = {}
    for group in by_cluster.values():
        try:
            asked = source_store(group[0]).offsets_many([(u.source_uuid, u.topic, u.partition) for u in group])
        except StreamrepError:
            continue
        starts.update((u, bounds[0]) for u, bounds in zip(group, asked, strict=True) if isinstance(bounds, tuple))
    return starts


def _expired(
    check: HeldCheck,
    missing: tuple[int, int],
    syncs: Sequence[tuple[int, int, int, int]],
    source_store: Callable[[SourcePartition], Store],
    replica_entry: Callable[[StreamPath], StreamEntry],
) -> bool:
    """Whether the replica's own retention explains the ``missing`` replica offsets: it has a ttl,
    and the newest of them is older than it (its timestamp read at the source, which still holds
    it), or its source offset is no longer known exactly (pruned syncs: not accused)."""
    ttl = replica_entry(check.replica).meta.ttl
    if not ttl or ttl <= 0:
        return False
    newest = source_offset_of(syncs, missing[1] - 1)
    if newest is None:
        return True
    unit = check.unit
    try:
        found = source_store(unit).read(unit.source_uuid, unit.topic, unit.partition, newest, 1)
    except StreamrepError:
        return True  # cannot tell now: not accused
    if not found or found[0].offset != newest:
        return True  # gone at the source too
    return found[0].timestamp < time.time() * 1000 - ttl * 1000


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
        shared: dict[tuple, ApplyPlan] = {}
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
