"""What failover and failback will do, as data (``failover_plan``, ``failback_plan``): the
pair's stage, what the replica lacks per topic (``lag_by_topic``) or its last recorded lag, the
live gateways, the consumer groups whose cursors move, and the steps in words. Changes nothing."""

from __future__ import annotations

from dataclasses import dataclass, field

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.errors import StreamrepError
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import FailoverStage, FailoverState, lag_known
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState
from streamrep.replication.failover.stage import Pair, failback_stage, pair_of, stage
from streamrep.replication.failover.steps import FENCE_GRACE_SECONDS
from streamrep.replication.pending import partition_pending
from streamrep.replication.service import live_gateways_of


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
    stage: FailoverStage
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
    stage: FailoverStage
    source_reachable: bool
    source_error: str | None
    to_copy_back: int | None
    topics: list[TopicLag] | None
    gateways: list[str] | None
    groups: list[str] | None
    steps: list[str] = field(default_factory=list)


# -- what is pending ----------------------------------------------------------------------------
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


def live_gateways(admin: StreamAdmin, pair: Pair, reverse: bool = False) -> list[str] | None:
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


# -- the plans ----------------------------------------------------------------------------------
def failover_plan(admin: StreamAdmin, source: str, replica: str) -> FailoverPlan:
    """What ``failover(admin, source, replica)`` will do, as data; changes nothing."""
    pair = pair_of(admin, source, replica)
    where = stage(pair)
    src, dst = pair.src, pair.dst
    topics = None
    if pair.reachable and not where.promoted:
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
        gateways=live_gateways(admin, pair),
        groups=_groups(admin, src, pair.src_entry) if pair.reachable else _groups(admin, dst, pair.dst_entry),
        force_needed=not pair.reachable and not where.promoted,
    )
    if where.promoted:
        plan.steps = _done_steps(pair, where)
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


def _done_steps(pair: Pair, where: FailoverStage) -> list[str]:
    """A failover plan's steps once the replica is promoted: nothing, or the source's side."""
    steps = [
        f"nothing to do: {pair.dst} is already {pair.promoted.describe()}"
        + ("" if where == FailoverStage.FAILED_OVER else f" ({where.value}; finish it with failback)")
    ]
    if where == FailoverStage.FAILED_OVER and pair.reachable and pair.source_state != FailoverState.FAILED_OVER:
        steps.append(f"record on {pair.src} (reachable again) that it failed over: its producers are refused")
    return steps


def failback_plan(admin: StreamAdmin, source: str, replica: str) -> FailbackPlan:
    """What ``failback(admin, source, replica)`` will do, as data; changes nothing."""
    pair = pair_of(admin, source, replica)
    where = failback_stage(pair)
    src, dst = pair.src, pair.dst
    back = None
    if pair.reachable and where.promoted:
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
        gateways=live_gateways(admin, pair, reverse=True),
        groups=_groups(admin, dst, pair.dst_entry),
    )
    if where == FailoverStage.LINKED:
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
