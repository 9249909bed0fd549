"""Replica status for ``stream replica list``: state, whether up to date, what is pending, lag."""

from __future__ import annotations

import time
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from functools import partial
from typing import cast

from streamrep.client.admin import StreamAdmin
from streamrep.client.results import ReplicaRow
from streamrep.errors import Conflict, RetryNow, StreamrepError
from streamrep.model.catalog import StreamEntry
from streamrep.model.paths import StreamPath
from streamrep.model.replication import (
    ReplicaState,
    acknowledged_key,
    parse_loss_key,
    position_key,
    recorded_losses,
    require_link,
    unrecorded_losses,
)
from streamrep.replication.held import HeldCheck, lost_data
from streamrep.replication.lag import NO_THRESHOLDS, lag_millis, thresholds
from streamrep.replication.pending import PRECISE_PENDING_MAX, Pending, partition_pending, pending, to_apply
from streamrep.replication.samples import Thresholds
from streamrep.replication.service import gateway_outage, live_gateways_of
from streamrep.replication.transfer import SourcePartition
from streamrep.replication.verification import Verification, verifications
from streamrep.store.base import Store

__all__ = [
    "PRECISE_PENDING_MAX",
    "Pending",
    "ReplicaStatus",
    "UP_TO_DATE_STATES",
    "AcknowledgedLoss",
    "acknowledge_loss",
    "lost_ranges",
    "partition_pending",
    "pending",
    "replica_health",
    "replica_status",
    "to_apply",
]


def _losses(
    marks: dict[str, int], source_store: Store, src_uuid: str
) -> tuple[dict[str, int], list[tuple[str, int, int, int]]]:
    """The replica's losses from one source: the loss marks a gateway recorded (key -> end),
    and ``(topic, partition, first, end)`` of those not recorded yet (the replica's position is
    below the source's first offset)."""
    starts = {
        (topic, partition): source_store.offsets(src_uuid, topic, partition)[0]
        for topic, count in source_store.topics(src_uuid).items()
        for partition in range(count)
    }
    return recorded_losses(marks, src_uuid), unrecorded_losses(marks, src_uuid, starts)


def _recorded_range(key: str, end: int) -> tuple[str, int, int, int]:
    # only loss marks are recorded as losses: parse_loss_key reads each
    _, topic, partition, first = cast("tuple[str, str, int, int]", parse_loss_key(key))
    return topic, partition, first, end - 1


def lost_ranges(
    admin: StreamAdmin, src: StreamPath, src_entry: StreamEntry, dst: StreamPath, dst_entry: StreamEntry
) -> list[tuple[str, int, int, int]]:
    """``(topic, partition, first, last)`` of every source offset range that the source's retention
    removed before it reached the replica and that no admin has acknowledged: those a gateway
    recorded, and those it will record (the replica's position is below the source's first offset)."""
    recorded, unrecorded = _losses(admin.store(dst).marks(dst_entry.uuid), admin.store(src), src_entry.uuid)
    ranges = [_recorded_range(key, end) for key, end in recorded.items()]
    return sorted(ranges + [(topic, partition, first, end - 1) for topic, partition, first, end in unrecorded])


ACKNOWLEDGE_RETRIES = 20  # a gateway recording the same loss meanwhile makes acknowledge read again


@dataclass(frozen=True)
class AcknowledgedLoss:
    """``stream replica acknowledge``: the ranges of lost messages acknowledged, each
    (topic, partition, first offset, last offset), in order."""

    replica: StreamPath
    ranges: tuple[tuple[str, int, int, int], ...]

    @property
    def acknowledged(self) -> int:
        """How many messages were acknowledged lost."""
        return sum(last - first + 1 for _, _, first, last in self.ranges)

    def describe_ranges(self) -> str:
        """The ranges in one line: ``topic/partition:first-last, ...``."""
        return ", ".join(f"{topic}/{partition}:{first}-{last}" for topic, partition, first, last in self.ranges)


def acknowledge_loss(admin: StreamAdmin, path: str, replica: str) -> AcknowledgedLoss:
    """``stream replica acknowledge``: accept that the messages the source's retention removed
    before they reached ``replica`` are gone, so the replica can read as up to date again.
    Needs adminperm on the source, as every ``stream replica`` change. Safe to retry: with
    nothing (left) to acknowledge it reports 0 messages."""
    src, dst = admin.path(path), admin.path(replica)
    src_entry = admin.entry(src)
    admin.require(src_entry, src, "adminperm")
    require_link(src_entry.replicas, dst, src, "replica")
    dst_entry = admin.entry(dst)
    source_store, store = admin.store(src), admin.store(dst)
    done: list[tuple[str, int, int, int]] = []  # (topic, partition, first, last) acknowledged
    for _ in range(ACKNOWLEDGE_RETRIES):
        recorded, unrecorded = _losses(store.marks(dst_entry.uuid), source_store, src_entry.uuid)
        try:
            # Not recorded yet: move the position past the loss, unless a gateway moved it meanwhile.
            # Either way an acknowledged record stays (``acknowledged_key``), for diffstreams.
            for topic, partition, first, end in unrecorded:
                pkey = position_key(src_entry.uuid, topic, partition)
                akey = acknowledged_key(src_entry.uuid, topic, partition, first)
                store.apply(dst_entry.uuid, topic, partition, [], {pkey: end, akey: end}, {pkey: first})
                done.append((topic, partition, first, end - 1))
            for key, end in recorded.items():
                topic, partition, first, _ = _recorded_range(key, end)
                akey = acknowledged_key(src_entry.uuid, topic, partition, first)
                store.apply(dst_entry.uuid, topic, partition, [], {akey: end}, {key: end})
        except RetryNow:
            continue  # a gateway recorded it meanwhile (or another acknowledge ran): read again
        store.drop_marks(dst_entry.uuid, recorded)
        done += [_recorded_range(key, end) for key, end in recorded.items()]
        break
    else:
        raise Conflict(f"the losses of replica {dst} kept changing while being acknowledged; run it again")
    return AcknowledgedLoss(dst, tuple(sorted(done)))


def loss_error(ranges: list[tuple[str, int, int, int]]) -> str | None:
    """The one-line ``errors`` text for unacknowledged losses, or None."""
    if not ranges:
        return None
    total = sum(last - first + 1 for _, _, first, last in ranges)
    shown = ", ".join(
        f"{topic}/{partition} offsets {first}-{last} ({last - first + 1})"
        for topic, partition, first, last in ranges[:10]
    )
    more = f" and {len(ranges) - 10} more ranges" if len(ranges) > 10 else ""
    return (
        f"{total} messages were removed by the source's retention before they were replicated: "
        f"{shown}{more}; acknowledge with 'stream replica acknowledge'"
    )


def replica_health(
    admin: StreamAdmin, src: StreamPath, src_entry: StreamEntry, dst: StreamPath, dst_entry: StreamEntry
) -> tuple[str | None, str | None]:
    """For ``StreamAdmin.list_replicas``: ``(error, no_gateway)``: unacknowledged losses, and why
    no gateway is live for the flow (None when one is)."""
    try:
        lost = loss_error(lost_ranges(admin, src, src_entry, dst, dst_entry))
        held = held_error(admin, src, src_entry, dst, dst_entry)
        return "; ".join(e for e in (held, lost) if e) or None, gateway_outage(admin, src.cluster, dst.cluster)
    except StreamrepError as err:
        return str(err), None


def held_error(
    admin: StreamAdmin, src: StreamPath, src_entry: StreamEntry, dst: StreamPath, dst_entry: StreamEntry
) -> str | None:
    """The replica's partitions that no longer hold what was applied to them from ``src``, or hold
    planted messages (``held.lost_data``), in one line; None when there are none."""
    source_store = admin.store(src)
    checks = [
        HeldCheck(SourcePartition(src_entry.uuid, topic, partition, src), dst, dst_entry.uuid)
        for topic, count in sorted(source_store.topics(src_entry.uuid).items())
        for partition in range(count)
    ]
    lines = [line for line in lost_data(admin.store(dst), checks, lambda _: source_store, lambda _: dst_entry) if line]
    if not lines:
        return None
    return lines[0] + (f" (and {len(lines) - 1} more partitions)" if len(lines) > 1 else "")


@dataclass(frozen=True)
class ReplicaStatus(ReplicaRow):
    """A ``replica list`` entry with every figure computed now.

    :param gateways: the live gateways that serve the flow (those of the replica's cluster that
        the source cluster sends to); None if unreadable.
    :param pending: what the replica lacks (None if it could not be read: ``errors`` says why).
    :param lag_millis: how long the oldest unreplicated message has waited (0 with none).
    :param thresholds: the replica's alert thresholds (``stream replica alert``).
    :param failover: the source's failover record, when it names this replica (a FENCED source
        refuses producers until the failover finishes or is aborted), in words.
    :param verification: the link's last verification (``verification.py``); None: never verified,
        or the replica's cluster cannot be read (``errors`` says so).
    """

    gateways: list[str] | None = None
    is_uptodate: bool = False
    pending: Pending | None = None
    lag_millis: int = 0
    thresholds: Thresholds = NO_THRESHOLDS
    failover: str | None = None
    verification: Verification | None = None

    @property
    def pending_messages(self) -> int | None:
        return None if self.pending is None else self.pending.messages

    @property
    def bytes_pending(self) -> int | None:
        return None if self.pending is None else self.pending.bytes


def replica_status(admin: StreamAdmin, source: str) -> list[ReplicaStatus]:
    """``stream replica list``: each replica (``StreamAdmin.list_replicas``), with what it lacks,
    its lag, the live gateways that serve it, its alert thresholds and its last verification. Every
    figure is computed now."""
    rows = admin.list_replicas(source, health=partial(replica_health, admin))
    source_entry = admin.entry(source) if rows else None
    source_uuid = source_entry.uuid if source_entry is not None else None
    record = source_entry.failover if source_entry is not None else None
    now = int(time.time() * 1000)
    serving: dict[str, list[str] | None] = {}  # by replica cluster
    verified: dict[str, dict[tuple[str, str], Verification]] = {}  # by replica cluster: one read each
    result = []
    for row in rows:
        cluster = row.path.cluster
        if cluster not in serving:
            serving[cluster] = _serving(admin, admin.path(source).cluster, cluster)
            verified[cluster] = _verified(admin, cluster)
        errors = row.errors
        info: Pending | None
        try:
            info = pending(admin, source, row.replica_path)
        except StreamrepError as err:
            info = None
            errors = errors or str(err)
        fields = {f.name: getattr(row, f.name) for f in dataclass_fields(ReplicaRow)}
        result.append(
            ReplicaStatus(
                **{**fields, "errors": errors},
                gateways=serving[cluster],
                is_uptodate=info is not None and info.messages == 0 and row.state in UP_TO_DATE_STATES,
                pending=info,
                lag_millis=lag_millis(None if info is None else info.oldest, now),
                thresholds=_thresholds(admin, source_uuid, row),
                failover=record.describe() if record is not None and record.peer == row.replica_path else None,
                verification=verified[cluster].get((source_uuid or "", row.uuid or "")),
            )
        )
    return result


def _verified(admin: StreamAdmin, cluster: str) -> dict[tuple[str, str], Verification]:
    """The verifications kept in ``cluster`` (none when it cannot be read)."""
    try:
        return verifications(admin.clusters.store(cluster))
    except StreamrepError:
        return {}


def _thresholds(admin: StreamAdmin, source_uuid: str | None, row: ReplicaRow) -> Thresholds:
    """The replica's alert thresholds (None each when unset or its cluster is unreadable)."""
    try:
        if row.uuid is not None and source_uuid is not None:
            return thresholds(admin.clusters.store(row.path.cluster), source_uuid, row.uuid)
    except StreamrepError:
        pass
    return NO_THRESHOLDS


def _serving(admin: StreamAdmin, source_cluster: str, cluster: str) -> list[str] | None:
    """The live gateways of ``cluster`` that ``source_cluster`` sends to; None if unreadable."""
    try:
        listed = admin.gateways(source_cluster).get(cluster)
        return live_gateways_of(admin.clusters.store(cluster), listed=listed)
    except StreamrepError:
        return None


# With nothing pending, a replica in one of these states holds every message of its source.
UP_TO_DATE_STATES = frozenset(
    {
        ReplicaState.REPLICATING,
        ReplicaState.WAITING_FOR_GATEWAY,
        ReplicaState.SYNC_FALLBACK,
        ReplicaState.PAUSED,
    }
)
