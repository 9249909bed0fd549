"""Failover and failback, as procedures: ``stream replica failover`` and ``stream replica failback``.

**Failover** promotes a replica to take its source's place:

1. producers are refused on the source (its record says FENCED, ``model/failover.py``) and,
   after ``FENCE_GRACE_SECONDS`` (longer than a producer's view of the record may be stale),
2. the gateways drain what the replica lacks (bounded by ``timeout``);
3. the flow is stopped in the replica's own transactions: a stop mark per source partition
   (``model.replication.stop_key``) that every apply expects absent, so a gateway's batch in
   flight either committed before the stop or is refused, and none applies afterwards; then the
   replica withdraws its upstream agreement and the source's link shows REPLICA_STATE_FAILED_OVER;
4. the consumer groups' committed cursors are placed on the replica (``cursors.sync_cursors``);
5. the replica is recorded PROMOTED and the source FAILED_OVER: producers are sent to the replica.

With the source unreachable (its cluster lost), ``force`` promotes at once: steps 1, 2 and the
source's side of 3 and 5 are skipped, and the replica's record says how many messages it may lack
(the last known lag, when the gateways recorded one). A later failover run that finds the source
reachable again completes its side (refuses its producers), and failback brings over whatever
the source held that the replica lacked.

**Failback** gives the role back, without rebuilding anything. Two phases, run by one command
(``phase="all"``) or separately (``reverse``, then ``return``):

- ``reverse``: the promoted stream becomes the source of a reverse link into the old source
  (producers keep writing to the promoted stream). The apply never writes a message to its
  stream of origin, so the reverse flow copies only what was produced on the promoted stream:
  everything else in it came from the old source. The old source's end offsets are recorded.
- ``return``: producers are sent back to the source (RETURNING), which refuses them for the
  moment (TAKING_BACK); after the grace the reverse flow drains; it is stopped as in failover; the cursors are placed back on the old
  source; the original flow (source to replica) is restored from the replica's stored positions
  (so what the source held that the replica lacked now flows), the reverse link is removed and
  both records are cleared. ``copiedBack`` counts what the source received: exactly what was
  produced on the promoted stream.

Choice: the return is triggered by the same command. ``phase="all"`` adds the reverse link,
waits (bounded) until the reverse copy has nearly caught up while producers still write, then
returns; ``reverse`` and ``return`` let an operator run the long copy first and choose the moment
of the short write pause.

Every step finds its work done or does it, so each command is safe to retry.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.client.producer import FAILOVER_CHECK_SECONDS
from streamrep.errors import (
    Conflict,
    CorruptStore,
    Interrupted,
    InvalidArgument,
    NotFound,
    RetryNow,
    StreamrepError,
    Unavailable,
)
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import FailoverRecord, FailoverState, lag_known
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState, stop_key, stop_prefix
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.cursors import adopt_cursors, sync_partitions
from streamrep.replication.pending import partition_pending, pending
from streamrep.replication.service import live_gateways_of
from streamrep.replication.setup import ensure_replica, ensure_upstream
from streamrep.replication.transfer import CONFLICT_RETRIES, ensure_topics

# Longer than a producer's view of a failover record may be stale, plus an append in flight.
FENCE_GRACE_SECONDS = 2 * FAILOVER_CHECK_SECONDS + 0.5
DEFAULT_TIMEOUT = 300.0  # seconds a failover waits for the replica to catch up
MAX_WAIT_SECONDS = 86_400.0  # a day: a longer timeout is a typo (the DAGs' param schema says the same)
POLL_SECONDS = 0.1
# phase "all": the reverse copy is near enough to return (pause writes) at this many pending messages.
RETURN_BACKLOG = 1000
PHASES = ("all", "reverse", "return")

# Where a pair of streams stands.
LINKED = "linked"  # source -> replica flows (or may): a failover can start
FAILING_OVER = "failing over"  # an earlier failover stopped part-way (the source is FENCED)
FAILED_OVER = "failed over"  # the replica is PROMOTED
FAILING_BACK = "failing back"  # the reverse link is in place
RETURNING = "returning"  # the return step stopped part-way (the replica is RETURNING)


@dataclass
class Pair:
    """The two streams of a failover, as found now.

    :param unreachable: why the source cannot be read (None when it can).
    """

    src: StreamPath
    dst: StreamPath
    dst_entry: StreamEntry
    src_entry: StreamEntry | None
    unreachable: str | None

    @property
    def reachable(self) -> bool:
        return self.src_entry is not None

    @property
    def source(self) -> StreamEntry:
        """The source's entry, for a step that needs the source (Unavailable if it cannot be read)."""
        if self.src_entry is None:
            raise Unavailable(f"source {self.src} is unreachable ({self.unreachable})")
        return self.src_entry

    @property
    def promoted(self) -> FailoverRecord:
        """The replica's failover record, in a stage that has one (Conflict if it has none)."""
        if self.dst_entry.failover is None:
            raise Conflict(f"{self.dst} has no failover record")
        return self.dst_entry.failover

    @property
    def source_uuid(self) -> str | None:
        if self.src_entry is not None:
            return self.src_entry.uuid
        link = rules.find_link(self.dst_entry.upstreams, self.src)
        if link is not None and link.uuid is not None:
            return link.uuid
        record = self.dst_entry.failover
        return record.peer_uuid if record is not None and record.peer == str(self.src) else None


def _pair(admin: StreamAdmin, source: str, replica: str) -> Pair:
    """Both streams, with the caller's adminperm checked on each one that can be read."""
    src, dst = admin.path(source), admin.path(replica)
    if src == dst:
        raise InvalidArgument(f"stream {src} cannot fail over to itself")
    dst_entry = admin.entry(dst)
    admin.require(dst_entry, dst, "adminperm")
    try:
        src_entry = admin.entry(src)
    except (Unavailable, CorruptStore) as err:  # unreachable or unreadable: as lost, for -force to decide
        return Pair(src, dst, dst_entry, None, str(err))
    except NotFound as err:
        record = dst_entry.failover
        if rules.find_link(dst_entry.upstreams, src) is None and (record is None or record.peer != str(src)):
            raise
        return Pair(src, dst, dst_entry, None, str(err))  # a linked source that is gone is as lost
    admin.require(src_entry, src, "adminperm")
    return Pair(src, dst, dst_entry, src_entry, None)


def _state(entry: StreamEntry | None) -> FailoverState | None:
    return None if entry is None or entry.failover is None else entry.failover.state


def stage(pair: Pair) -> str:
    """Where the pair stands (LINKED ... RETURNING); NotFound or Conflict when no failover or
    failback applies to it."""
    src, dst, record = pair.src, pair.dst, pair.dst_entry.failover
    if record is not None and record.state in (
        FailoverState.FAILED_OVER,
        FailoverState.FAILING_BACK,
        FailoverState.TAKING_BACK,
    ):
        raise Conflict(
            f"stream {dst} {record.describe()}: it is not a replica now; to give it its role back "
            f"use 'stream replica failback -path {dst} -replica {record.peer}'"
        )
    if record is not None and record.peer == str(src):
        if record.state == FailoverState.RETURNING:
            return RETURNING
        if record.state == FailoverState.PROMOTED:
            reverse = rules.find_link(pair.dst_entry.replicas, src) is not None
            failing_back = _state(pair.src_entry) in (FailoverState.FAILING_BACK, FailoverState.TAKING_BACK)
            return FAILING_BACK if reverse and failing_back else FAILED_OVER
    if record is not None and record.state == FailoverState.PROMOTED:
        raise Conflict(f"stream {dst} was promoted to replace {record.peer}, not {src}")
    src_record = pair.src_entry.failover if pair.src_entry is not None else None
    if src_record is not None and src_record.peer != str(dst):
        raise Conflict(f"stream {src} is {src_record.describe()}; it cannot fail over to {dst} too")
    if src_record is not None and src_record.state == FailoverState.FENCED:
        return FAILING_OVER  # an earlier try may have withdrawn the agreement already
    if rules.find_link(pair.dst_entry.upstreams, src) is None:
        raise NotFound(f"{dst} is not a replica of {src}: it does not list {src} as an upstream")
    if pair.src_entry is not None:
        found = rules.agreement(src, pair.src_entry, dst, pair.dst_entry)
        if not found.agreed:
            raise Conflict(f"{dst} is not a replica of {src}: {found.reason}")
    return LINKED


# -- what is pending ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TopicLag:
    """What a replica lacks of one topic: messages, value bytes, and how long the oldest has waited."""

    topic: str
    pending_messages: int
    bytes_pending: int
    lag_millis: int


@dataclass
class FailoverPlan:
    """What ``failover`` will do (``failover_plan``).

    :param stage: where the pair stands (``stage``).
    :param source_error: why the source is unreachable (None while it is reachable).
    :param pending_messages: what the replica lacks, in total and per topic (``topics``; None
        each when the source is unreachable or nothing is to drain).
    :param last_known_lag: the replica's last recorded lag in messages (None if none was recorded).
    :param gateways: the live gateways serving the flow (None if unreadable).
    :param groups: the consumer groups whose cursors move (None if unreadable).
    :param steps: what will happen, in words.
    """

    path: StreamPath
    replica: StreamPath
    stage: str
    source_reachable: bool
    source_error: str | None
    pending_messages: int | None
    bytes_pending: int | None
    lag_millis: int | None
    last_known_lag: int | None
    topics: list[TopicLag] | None
    gateways: list[str] | None
    groups: list[str] | None
    force_needed: bool
    steps: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FailoverResult:
    """What ``failover`` did.

    :param result: one line saying it.
    :param already_done: the replica had been promoted already (a retry).
    :param forced: promoted without the replica having every message of the source.
    :param missing: messages the replica may lack (None: unknown).
    :param late_messages: written to the source after it drained (they reach the replica when
        failback restores the link).
    :param cursors: the consumer cursors placed on the replica.
    :param aborted: ``-abort`` (``result`` says what it undid).
    """

    path: StreamPath
    replica: StreamPath
    result: str
    already_done: bool = False
    aborted: bool = False
    forced: bool = False
    missing: int | None = 0
    late_messages: int = 0
    cursors: tuple[CursorSyncRow, ...] = ()


@dataclass(frozen=True)
class FailbackResult:
    """What ``failback`` did.

    :param phase: ``all``, ``reverse`` or ``return``.
    :param result: one line saying it.
    :param already_done: nothing (left) to do for this phase.
    :param copied_back: messages the source received (only those produced on the promoted
        stream); None when not counted.
    :param lacked: the source's messages that the replica lacked, counted exactly once the
        source could be read (what a forced failover could only estimate); they reach the
        replica when the return restores the flow. None when not counted.
    :param cursors: the consumer cursors placed back on the source.
    """

    path: StreamPath
    replica: StreamPath
    phase: str
    result: str
    already_done: bool = False
    copied_back: int | None = None
    lacked: int | None = None
    cursors: tuple[CursorSyncRow, ...] = ()


@dataclass
class FailbackPlan:
    """What ``failback`` will do (``failback_plan``).

    :param to_copy_back: messages of the promoted stream that the source lacks (only those produced
        on it), and per topic ``topics``; None when unknown.
    :param gateways: the live gateways of the source's cluster (None if unreadable).
    :param groups: the consumer groups whose cursors move back (None if unreadable).
    """

    path: StreamPath
    replica: StreamPath
    stage: str
    source_reachable: bool
    source_error: str | None
    to_copy_back: int | None
    topics: list[TopicLag] | None
    gateways: list[str] | None
    groups: list[str] | None
    steps: list[str] = field(default_factory=list)


def lag_by_topic(
    admin: StreamAdmin, src: StreamPath, src_entry: StreamEntry, dst: StreamPath, dst_entry: StreamEntry
) -> list[TopicLag]:
    """Per topic of the source: the messages and bytes ``dst`` has not applied yet and how long
    the oldest of them has waited (ms), counted as ``status.pending`` counts them."""
    source_store, marks = admin.store(src), admin.store(dst).marks(dst_entry.uuid)
    now = now_ms()
    rows: list[TopicLag] = []
    for topic, count in sorted(source_store.topics(src_entry.uuid).items()):
        messages = size = 0
        oldest: int | None = None
        for partition in range(count):
            n, b, lo, _, _ = partition_pending(source_store, src_entry.uuid, dst_entry.uuid, marks, topic, partition)
            messages, size = messages + n, size + b
            if lo is not None:
                oldest = lo if oldest is None else min(oldest, lo)
        rows.append(TopicLag(topic, messages, size, 0 if oldest is None else max(0, now - oldest)))
    return rows


def last_lag_sample(admin: StreamAdmin, pair: Pair) -> tuple[int, int] | None:
    """The replica's last recorded lag behind the source: ``(messages, when in ms)`` from the
    gateways' lag history, kept in the replica's cluster; None if none was recorded."""
    source_uuid = pair.source_uuid
    if source_uuid is None:
        return None
    try:
        from streamrep.replication import lag  # the lag history (issue 10 section 3)

        doc = admin.store(pair.dst).catalog_get(lag.LAG_KIND, lag.flow_key(source_uuid, pair.dst_entry.uuid))
        samples = lag.samples_of(doc)
    except (ImportError, AttributeError, StreamrepError):
        return None
    return (samples[-1].messages, samples[-1].t) if samples else None


def last_known_lag(admin: StreamAdmin, pair: Pair) -> int | None:
    """The replica's last recorded lag behind the source in messages, or None if none was recorded."""
    sample = last_lag_sample(admin, pair)
    return None if sample is None else sample[0]


def _gateways(admin: StreamAdmin, pair: Pair, reverse: bool = False) -> list[str] | None:
    """The live gateways that serve the flow (the reverse flow with ``reverse``); None if unreadable."""
    src, dst = (pair.dst, pair.src) if reverse else (pair.src, pair.dst)
    try:
        listed = admin.gateways(src.cluster).get(dst.cluster) if pair.reachable else None
        return live_gateways_of(admin.clusters.store(dst.cluster), listed=listed)
    except StreamrepError:
        return None


def _groups(admin: StreamAdmin, path: StreamPath, entry: StreamEntry | None) -> list[str] | None:
    """The consumer groups with committed cursors on the stream (None if unreadable)."""
    if entry is None:
        return None
    try:
        return sorted(admin.store(path).groups(entry.uuid))
    except (StreamrepError, AttributeError, NotImplementedError):
        return None


def _ends(admin: StreamAdmin, path: StreamPath, uuid: str) -> dict[str, int]:
    """Every partition's end offset, by ``topic/partition``."""
    store = admin.store(path)
    return {
        f"{topic}/{p}": store.offsets(uuid, topic, p)[1]
        for topic, count in store.topics(uuid).items()
        for p in range(count)
    }


def _written_since(admin: StreamAdmin, path: StreamPath, uuid: str, ends: dict[str, int]) -> int:
    """Messages written to the stream after the end offsets ``ends`` (offsets are not a count:
    Kafka's transaction markers take some)."""
    store = admin.store(path)
    return sum(
        store.range_stats(uuid, topic, p, ends.get(f"{topic}/{p}", 0))[0]
        for topic, count in store.topics(uuid).items()
        for p in range(count)
    )


# -- the plan -----------------------------------------------------------------------------------
def failover_plan(admin: StreamAdmin, source: str, replica: str) -> FailoverPlan:
    """What ``failover(admin, source, replica)`` will do, as data; changes nothing."""
    pair = _pair(admin, source, replica)
    where = stage(pair)
    src, dst = pair.src, pair.dst
    topics = None
    if pair.reachable and where in (LINKED, FAILING_OVER):
        topics = lag_by_topic(admin, src, pair.source, dst, pair.dst_entry)
    total = None if topics is None else sum(t.pending_messages for t in topics)
    plan = FailoverPlan(
        path=src,
        replica=dst,
        stage=where,
        source_reachable=pair.reachable,
        source_error=pair.unreachable,
        pending_messages=total,
        bytes_pending=None if topics is None else sum(t.bytes_pending for t in topics),
        lag_millis=None if topics is None else max((t.lag_millis for t in topics), default=0),
        last_known_lag=last_known_lag(admin, pair),
        topics=topics,
        gateways=_gateways(admin, pair),
        groups=_groups(admin, src, pair.src_entry) if pair.reachable else _groups(admin, dst, pair.dst_entry),
        force_needed=not pair.reachable and where in (LINKED, FAILING_OVER),
    )
    if where in (FAILED_OVER, FAILING_BACK, RETURNING):
        assert pair.dst_entry.failover is not None  # the stage says it has a record
        plan.steps = [
            f"nothing to do: {dst} is already {pair.dst_entry.failover.describe()}"
            + ("" if where == FAILED_OVER else f" ({where}; finish it with failback)")
        ]
        if where == FAILED_OVER and pair.reachable and _state(pair.src_entry) != FailoverState.FAILED_OVER:
            plan.steps.append(f"record on {src} (reachable again) that it failed over: its producers are refused")
    elif pair.reachable:
        plan.steps = [
            f"refuse producers on {src} (they are told to retry, then sent to {dst})",
            f"wait {FENCE_GRACE_SECONDS:g} s, then until {dst} has applied the {total} pending messages "
            f"(gateways live: {', '.join(plan.gateways or []) or 'none'})",
            f"stop replication into {dst}: a stop mark per source partition, remove the upstream {src}, "
            f"mark the replica link {ReplicaState.FAILED_OVER.value}",
            f"place the committed cursors of {len(plan.groups or [])} consumer group(s) on {dst}",
            f"record {dst} as PROMOTED and {src} as FAILED_OVER: producers write to {dst}",
        ]
    else:
        sample = last_lag_sample(admin, pair)
        known = lag_known(str(src), *(sample or (None, None)))
        plan.steps = [
            f"{src} is unreachable ({pair.unreachable}): only -force true promotes {dst}",
            f"with -force: stop replication into {dst} (stop marks, remove the upstream {src})",
            f"record {dst} as PROMOTED; {known}",
            f"when {src} is back, run failover again (it refuses its producers) and failback",
        ]
    return plan


# -- the steps ----------------------------------------------------------------------------------
def _wait(what: Callable[[], int], until: Callable[[int], bool], timeout: float) -> tuple[bool, int]:
    """Poll ``what()`` until ``until(value)`` or ``timeout`` seconds: ``(reached, last value)``."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if until(value):
            return True, value
        if time.monotonic() >= deadline:
            return False, value
        time.sleep(POLL_SECONDS)


def _grace(record: FailoverRecord | None, grace: float) -> None:
    """Sleep until ``grace`` seconds have passed since writes were refused (``record.since``)."""
    if record is not None:
        left = record.since / 1000 + grace - time.time()
        if left > 0:
            time.sleep(left)


def stop_flow(
    admin: StreamAdmin, src: StreamPath, source_uuid: str, src_store_readable: bool, dst: StreamPath, dst_uuid: str
) -> int:
    """Write a stop mark (``stop_key``) for every partition of ``source_uuid`` into the replica
    ``dst``: from then on no apply from it commits. Returns how many partitions were stopped."""
    store = admin.store(dst)
    if src_store_readable:  # every source partition needs its replica partition to hold the mark
        ensure_topics(admin.store(src), source_uuid, store, dst_uuid)
    stopped = 0
    marks = store.marks(dst_uuid)
    for topic, count in store.topics(dst_uuid).items():
        for partition in range(count):
            key = stop_key(source_uuid, topic, partition)
            if key not in marks:
                marks = _write_stop(store, dst, dst_uuid, topic, partition, key)
            stopped += 1
    return stopped


def _write_stop(store: Any, dst: StreamPath, dst_uuid: str, topic: str, partition: int, key: str) -> dict[str, int]:
    """Commit the stop mark ``key`` into one replica partition; returns the replica's marks after.

    The apply shares its transactional id with the running gateway's writer of that partition, so
    each may fence the other (a gateway's next apply fences the producer this process cached): a
    stop's plan never changes, so a refused one is tried again, after a short random wait that
    lets the gateway's apply finish, until the mark is there."""
    refused: RetryNow | None = None
    for attempt in range(CONFLICT_RETRIES):
        try:
            store.apply(dst_uuid, topic, partition, [], {key: now_ms()}, {key: None})
        except RetryNow as retry:
            refused = retry
        marks = store.marks(dst_uuid)
        if key in marks:
            return marks
        time.sleep(random.uniform(0, 0.05 * (attempt + 1)))
    raise Conflict(
        f"the failover's stop mark on {dst} {topic}/{partition} was refused {CONFLICT_RETRIES} times "
        f"({refused}); run the same command again to finish it"
    )


def clear_stops(admin: StreamAdmin, dst: StreamPath, dst_uuid: str, source_uuid: str) -> int:
    """Remove the stop marks of ``source_uuid`` from ``dst``, before that flow is restored."""
    store = admin.store(dst)
    prefix = stop_prefix(source_uuid)
    stops = {key: value for key, value in store.marks(dst_uuid).items() if key.startswith(prefix)}
    return store.drop_marks(dst_uuid, stops) if stops else 0


def place_cursors(
    admin: StreamAdmin, src: StreamPath, src_uuid: str, dst: StreamPath, dst_uuid: str
) -> list[CursorSyncRow]:
    """``cursors.sync_cursors`` for every partition of the source, with the authority of the
    procedure (the caller administers both streams; consumeperm is not needed, as for a gateway)."""
    source_store = admin.store(src)
    partitions = [(t, p) for t, n in source_store.topics(src_uuid).items() for p in range(n)]
    return sync_partitions(source_store, src_uuid, admin.store(dst), dst_uuid, partitions)


def _mark_link_failed_over(admin: StreamAdmin, src: StreamPath, dst: StreamPath) -> None:
    """The source's replica link: paused, and REPLICA_STATE_FAILED_OVER (kept, so ``replica
    list`` shows the failover and failback can restore it)."""
    if rules.find_link(admin.entry(src).replicas, dst) is None:
        return
    admin.pause_replica(str(src), str(dst))
    admin.set_replica_state(src, dst, ReplicaState.FAILED_OVER)


def failover(
    admin: StreamAdmin,
    source: str,
    replica: str,
    force: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    grace: float = FENCE_GRACE_SECONDS,
    abort: bool = False,
) -> FailoverResult:
    """``stream replica failover``: promote ``replica`` to take the place of ``source`` (see the
    module's docstring). Needs adminperm on both streams (on the replica only, when the source
    is unreachable) and what the link commands need.

    :param force: promote even if the source is unreachable, or the replica has not caught up
        within ``timeout``; the result says how many messages it may lack.
    :param timeout: seconds to wait for the replica to catch up.
    :param grace: seconds between refusing producers on the source and draining.
    :param abort: undo a failover that stopped before promoting (``abort_failover``).
    :return: what was done (``FailoverResult``).

    Interrupted (KeyboardInterrupt: Ctrl-C, or SIGTERM as the CLI maps it) while producers are
    refused and it has not promoted yet, it lifts the fence and raises ``Interrupted``; a kill -9
    leaves the source FENCED, and a rerun finishes the failover or ``abort`` undoes it.
    """
    timeout = _seconds(timeout, "timeout")
    pair = _pair(admin, source, replica)
    where = stage(pair)
    if abort:
        return abort_failover(admin, pair, where)
    started = time.monotonic()
    try:
        return _failover(admin, pair, where, force, timeout, grace)
    except KeyboardInterrupt:
        after = f"{time.monotonic() - started:.1f} s"
        src, dst = pair.src, pair.dst
        now = _pair(admin, str(src), str(dst))
        if stage(now) == FAILING_OVER and now.dst_entry.failover is None:
            undone = abort_failover(admin, now, FAILING_OVER)
            raise Interrupted(f"failover of {src} to {dst} interrupted after {after}: {undone.result}") from None
        raise Interrupted(
            f"failover of {src} to {dst} interrupted after {after}, after {dst} was promoted: "
            f"run the same failover again to finish it"
        ) from None


def abort_failover(admin: StreamAdmin, pair: Pair, where: str) -> FailoverResult:
    """``failover -abort``: undo a failover that stopped (killed, interrupted) before it promoted
    the replica: remove its stop marks from the replica, restore the replica's upstream agreement
    if it was withdrawn, and lift the fence on the source. The result says what it undid."""
    src, dst = pair.src, pair.dst
    if where in (FAILED_OVER, FAILING_BACK, RETURNING):
        raise Conflict(
            f"{dst} is already {pair.promoted.describe()}: -abort undoes only a failover that has not "
            f"promoted the replica; give the role back with 'stream replica failback -path {src} -replica {dst}'"
        )
    source = pair.source  # the fence is on the source: it must be readable to lift it
    if where == LINKED and (source.failover is None or source.failover.state != FailoverState.FENCED):
        return FailoverResult(
            src, dst, f"nothing to abort: no failover of {src} to {dst} is under way", already_done=True, aborted=True
        )
    undone = []
    stops = clear_stops(admin, dst, pair.dst_entry.uuid, source.uuid)
    if stops:
        undone.append(f"removed {stops} stop marks from {dst}")
    if rules.find_link(pair.dst_entry.upstreams, src) is None:
        ensure_upstream(admin, dst, src)
        undone.append(f"restored {dst}'s upstream {src}")
    _unfence(admin, src)
    undone.append(f"lifted the fence on {src} (producers write there again)")
    return FailoverResult(
        src, dst, f"failover aborted: {'; '.join(undone)}; {dst} is a replica of {src} again", aborted=True
    )


def _failover(admin: StreamAdmin, pair: Pair, where: str, force: bool, timeout: float, grace: float) -> FailoverResult:
    src, dst = pair.src, pair.dst
    if where in (FAILING_BACK, RETURNING):
        raise Conflict(
            f"{dst} is already {pair.promoted.describe()} and a failback is under way "
            f"({where}): finish it with 'stream replica failback -path {src} -replica {dst}'"
        )
    if where == FAILED_OVER:
        record = pair.promoted
        _withdraw(admin, pair)  # an earlier try may have stopped after promoting
        if pair.reachable and _state(pair.src_entry) != FailoverState.FAILED_OVER:
            _demote_source(admin, pair, record.since)  # a forced failover's source is back: refuse its producers
        return FailoverResult(
            src,
            dst,
            f"already failed over: {dst} is {record.describe()}",
            already_done=True,
            forced=record.forced,
            missing=record.missing,
        )
    sample = None if pair.reachable else last_lag_sample(admin, pair)
    if not pair.reachable and not force:
        raise Unavailable(
            f"source {src} is unreachable ({pair.unreachable}); use -force true to promote {dst} "
            f"anyway ({lag_known(str(src), *(sample or (None, None)))})"
        )
    missing: int | None = 0
    cursors: list[CursorSyncRow] = []
    late = 0
    if pair.reachable:
        fence = pair.source.failover
        if fence is None:
            fence = FailoverRecord(FailoverState.FENCED, str(dst), pair.dst_entry.uuid, now_ms())
            admin.set_failover(src, fence)
        _grace(fence, grace)
        link = rules.find_link(pair.source.replicas, dst)
        count = lambda: pending(admin, str(src), str(dst)).messages  # noqa: E731
        if link is not None and link.paused and count() and not force:
            _unfence(admin, src)
            raise Conflict(
                f"replica {dst} is paused with {count()} messages pending: resume it "
                f"('stream replica resume -path {src} -replica {dst}') or use -force true"
            )
        drained, missing = _wait(count, lambda n: n == 0, timeout)
        if not drained and not force:
            _unfence(admin, src)
            gateways = _gateways(admin, pair)
            raise Unavailable(
                f"replica {dst} still lacks {missing} messages of {src} after {timeout:g} s "
                f"(live gateways: {', '.join(gateways or []) or 'none'}); nothing was changed and "
                f"producers write to {src} again: start the gateways of cluster {dst.cluster} "
                f"or use -force true"
            )
        stop_flow(admin, src, pair.source.uuid, True, dst, pair.dst_entry.uuid)
        cursors = place_cursors(admin, src, pair.source.uuid, dst, pair.dst_entry.uuid)
        late = count()
    else:
        missing = None if sample is None else sample[0]
        if pair.source_uuid is not None:
            stop_flow(admin, src, pair.source_uuid, False, dst, pair.dst_entry.uuid)
    forced = not pair.reachable or bool(missing)
    promoted = FailoverRecord(
        FailoverState.PROMOTED,
        str(src),
        pair.source_uuid,
        now_ms(),
        forced,
        missing if forced else 0,
        missing_since=_sampled(sample) if not pair.reachable else (now_ms() if forced else None),
    )
    admin.set_failover(dst, promoted)  # first: a retry from here on finds it failed over and completes it
    _withdraw(admin, pair)
    if pair.reachable:
        _demote_source(admin, pair, promoted.since)
    return FailoverResult(
        src,
        dst,
        f"{dst} is {promoted.describe()}",
        forced=forced,
        missing=missing,
        late_messages=late,
        cursors=tuple(cursors),
    )


def _sampled(sample: tuple[int, int] | None) -> int | None:
    return None if sample is None else sample[1]


def _withdraw(admin: StreamAdmin, pair: Pair) -> None:
    """The replica withdraws its agreement to receive from the source."""
    if rules.find_link(admin.entry(pair.dst).upstreams, pair.src) is not None:
        try:
            admin.remove_upstream(str(pair.dst), str(pair.src))
        except NotFound:
            pass  # removed meanwhile


def _unfence(admin: StreamAdmin, src: StreamPath) -> None:
    """Undo a failover's first step: producers may write to the source again."""
    admin.set_failover(src, None, only_state=FailoverState.FENCED)


def _demote_source(admin: StreamAdmin, pair: Pair, since: int) -> None:
    """The source's side of a failover (later, for one forced while it was unreachable)."""
    _mark_link_failed_over(admin, pair.src, pair.dst)
    # its consumers' cursors become the sync's to move forward at failback
    adopt_cursors(admin.store(pair.src), admin.entry(pair.src).uuid, pair.dst_entry.uuid)
    admin.set_failover(pair.src, FailoverRecord(FailoverState.FAILED_OVER, str(pair.dst), pair.dst_entry.uuid, since))


def _seconds(value: Any, what: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_SECONDS or isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a number of seconds from 0 to {MAX_WAIT_SECONDS:g}, not {value!r}")
    return seconds


# -- failback -----------------------------------------------------------------------------------
def failback_plan(admin: StreamAdmin, source: str, replica: str) -> FailbackPlan:
    """What ``failback(admin, source, replica)`` will do, as data; changes nothing."""
    pair = _pair(admin, source, replica)
    where = _failback_stage(pair)
    src, dst = pair.src, pair.dst
    back = None
    if pair.reachable and where in (FAILED_OVER, FAILING_BACK, RETURNING):
        back = lag_by_topic(admin, dst, pair.dst_entry, src, pair.source)
    to_copy = None if back is None else sum(t.pending_messages for t in back)
    plan = FailbackPlan(
        path=src,
        replica=dst,
        stage=where,
        source_reachable=pair.reachable,
        source_error=pair.unreachable,
        to_copy_back=to_copy,
        topics=back,
        gateways=_gateways(admin, pair, reverse=True),
        groups=_groups(admin, dst, pair.dst_entry),
    )
    if where == LINKED:
        plan.steps = [f"nothing to do: {src} replicates to {dst} (not failed over)"]
    else:
        plan.steps = [
            f"add the reverse link {dst} -> {src}: it copies only the {to_copy} messages produced on {dst} "
            f"(the apply skips messages whose origin is {src}); producers keep writing to {dst}",
            f"return: send producers back to {src} (they wait there), wait until {src} has every message of {dst}",
            f"stop the reverse flow, place the cursors of {len(plan.groups or [])} group(s) back on {src}",
            f"restore {src} -> {dst} from the replica's stored positions, remove the reverse link, "
            f"clear the records: producers write to {src}",
        ]
    return plan


def _failback_stage(pair: Pair) -> str:
    """``stage`` for failback: LINKED is 'nothing to fail back' (or done); the source must be reachable."""
    if not pair.reachable:
        raise Unavailable(f"source {pair.src} is unreachable ({pair.unreachable}): failback needs it back")
    try:
        where = stage(pair)
    except NotFound:
        raise NotFound(f"{pair.dst} was not failed over from {pair.src}: there is nothing to fail back") from None
    if where == FAILING_OVER:
        raise Conflict(f"the failover of {pair.src} to {pair.dst} did not finish: run failover again first")
    return where


def failback(
    admin: StreamAdmin,
    source: str,
    replica: str,
    phase: str = "all",
    timeout: float = DEFAULT_TIMEOUT,
    grace: float = FENCE_GRACE_SECONDS,
) -> FailbackResult:
    """``stream replica failback``: give ``source`` its role back from the promoted ``replica``
    (see the module's docstring). Needs adminperm on both streams, and copyperm on the promoted
    stream (it becomes the source of the reverse link).

    :param phase: ``all``, ``reverse`` (add the reverse link only) or ``return`` (the switch back).
    :param timeout: seconds to wait for the reverse copy to catch up (each wait).
    :param grace: seconds between refusing producers on the promoted stream and draining.
    :return: what was done (``FailbackResult``).
    """
    if phase not in PHASES:
        raise InvalidArgument(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    timeout = _seconds(timeout, "timeout")
    pair = _pair(admin, source, replica)
    where = _failback_stage(pair)
    src, dst = pair.src, pair.dst
    if where == LINKED:
        return FailbackResult(src, dst, phase, f"nothing to fail back: {src} replicates to {dst}", already_done=True)
    already_done = False
    if phase in ("all", "reverse") and where == FAILED_OVER:
        admin.require(pair.dst_entry, dst, "copyperm")  # the promoted stream becomes a source
        _reverse(admin, pair)
        pair = _pair(admin, source, replica)
    elif phase == "reverse":
        already_done = True
    if phase == "reverse":
        if where == RETURNING:
            raise Conflict(f"the return of {dst} to {src} is under way: finish it with phase return")
        record = admin.entry(src).failover
        lacked = record.missing if record is not None else None
        return FailbackResult(
            src,
            dst,
            phase,
            f"reverse link {dst} -> {src} in place: {pending(admin, str(dst), str(src)).messages} messages to copy back"
            + ("" if lacked is None else f"; {dst} lacks {lacked} messages of {src} (they flow at the return)"),
            already_done=already_done,
            lacked=lacked,
        )
    where = _failback_stage(pair)
    if where == FAILED_OVER:
        raise Conflict(f"no reverse link {dst} -> {src} yet: run failback with phase reverse (or all) first")
    if phase == "all" and where == FAILING_BACK:
        _wait(lambda: pending(admin, str(dst), str(src)).messages, lambda n: n <= RETURN_BACKLOG, timeout)
    copied, lacked, cursors = _return(admin, pair, timeout, grace)
    return FailbackResult(
        src,
        dst,
        phase,
        f"failed back: producers write to {src}, which replicates to {dst} again"
        + ("" if not lacked else f"; it sends {dst} the {lacked} messages {dst} lacked at the failover"),
        copied_back=copied,
        lacked=lacked,
        cursors=tuple(cursors),
    )


def _undo_return(admin: StreamAdmin, pair: Pair, record: FailoverRecord, src_record: FailoverRecord | None) -> None:
    """The switch back did not finish: the promoted stream takes producers again, and the source
    waits for the next failback (FAILING_BACK) instead of holding producers back (TAKING_BACK)."""
    admin.set_failover(pair.dst, record.with_changes(state=FailoverState.PROMOTED), only_state=FailoverState.RETURNING)
    if src_record is not None:
        admin.set_failover(
            pair.src, src_record.with_changes(state=FailoverState.FAILING_BACK), only_state=FailoverState.TAKING_BACK
        )


def _reverse(admin: StreamAdmin, pair: Pair) -> None:
    """Failback's first phase: the promoted stream replicates back into the old source."""
    src, dst = pair.src, pair.dst
    source = pair.source
    if source.failover is None or source.failover.state != FailoverState.FAILED_OVER:
        _demote_source(admin, pair, pair.promoted.since)  # forced: the source was never told
    clear_stops(admin, src, source.uuid, pair.dst_entry.uuid)  # left by an earlier failback
    baseline = _ends(admin, src, source.uuid)
    # The source is readable: what it holds that the replica lacks is exact now (a forced
    # failover knew only the last lag sample). The restored flow brings these at the return.
    lacked = sum(t.pending_messages for t in lag_by_topic(admin, src, source, dst, pair.dst_entry))
    admin.set_failover(
        src,
        FailoverRecord(
            FailoverState.FAILING_BACK, str(dst), pair.dst_entry.uuid, now_ms(), missing=lacked, baseline=baseline
        ),
        only_state=FailoverState.FAILED_OVER,
    )
    ensure_replica(admin, dst, src, paused=False)
    ensure_upstream(admin, src, dst)


def _return(
    admin: StreamAdmin, pair: Pair, timeout: float, grace: float
) -> tuple[int | None, int | None, list[CursorSyncRow]]:
    """Failback's second phase: the switch back to the source. Returns the messages the source
    received (None when not counted), the source's messages the replica lacked (``_reverse``
    counted them) and the cursors placed back on it."""
    src, dst = pair.src, pair.dst
    src_record = pair.source.failover
    if src_record is not None and src_record.state != FailoverState.TAKING_BACK:
        # first: the producers that RETURNING sends back wait there
        src_record = src_record.with_changes(state=FailoverState.TAKING_BACK, since=now_ms())
        admin.set_failover(src, src_record, only_state=FailoverState.FAILING_BACK)
    record = pair.promoted
    if record.state != FailoverState.RETURNING:
        record = record.with_changes(state=FailoverState.RETURNING, since=now_ms())
        admin.set_failover(dst, record, only_state=FailoverState.PROMOTED)
    started = time.monotonic()
    try:
        _grace(record, grace)
        count = lambda: pending(admin, str(dst), str(src)).messages  # noqa: E731
        drained, left = _wait(count, lambda n: n == 0, timeout)
    except BaseException as stopped:
        # Producers are refused on both streams while the source catches up: never left so, whether
        # a signal, Airflow's termination of the task or an unreachable cluster ended the wait.
        _undo_return(admin, pair, record, src_record)
        if isinstance(stopped, KeyboardInterrupt):
            raise Interrupted(
                f"failback of {dst} to {src} interrupted after {time.monotonic() - started:.1f} s, while {src} "
                f"caught up: producers write to {dst} again; run the same failback again to finish it"
            ) from None
        raise
    if not drained:
        _undo_return(admin, pair, record, src_record)
        raise Unavailable(
            f"{src} still lacks {left} messages of {dst} after {timeout:g} s (live gateways of "
            f"cluster {src.cluster}: {', '.join(_gateways(admin, pair, True) or []) or 'none'}); "
            f"producers write to {dst} again; run failback again once the gateways run"
        )
    src_entry = admin.entry(src)
    baseline = src_entry.failover.baseline if src_entry.failover is not None else None
    copied = None if baseline is None else _written_since(admin, src, src_entry.uuid, baseline)
    lacked = src_entry.failover.missing if src_entry.failover is not None else None
    if rules.find_link(pair.dst_entry.replicas, src) is not None:
        stop_flow(admin, dst, pair.dst_entry.uuid, True, src, src_entry.uuid)
        cursors = place_cursors(admin, dst, pair.dst_entry.uuid, src, src_entry.uuid)
        # Its consumers' cursors become the sync's to move forward at the next failover, as the
        # source's do at a failover (``_demote_source``): else they count as commits of a group
        # active there, and a second failover would leave the group where it read last time.
        adopt_cursors(admin.store(dst), pair.dst_entry.uuid, src_entry.uuid)
        admin.remove_replica(str(dst), str(src))
    else:
        cursors = []  # an earlier try got past this
    try:
        admin.remove_upstream(str(src), str(dst))
    except NotFound:
        pass
    # The original flow again, from the replica's stored positions.
    clear_stops(admin, dst, pair.dst_entry.uuid, src_entry.uuid)
    ensure_upstream(admin, dst, src)
    if rules.find_link(src_entry.replicas, dst) is None:
        ensure_replica(admin, src, dst, paused=False)
    else:
        admin.set_replica_state(src, dst, ReplicaState.WAITING_FOR_GATEWAY, only_from=ReplicaState.FAILED_OVER)
        admin.resume_replica(str(src), str(dst))
    admin.set_failover(src, None)  # first: producers sent to the source write there at once
    admin.set_failover(dst, None)
    return copied, lacked, cursors
