"""maprcli's field names for the domain's typed answers, where the CLI and Airflow show the same
row: ``stream info``, ``replica list``, ``upstream list``, gateways, cursors, failover plans and
the failover and failback results.
Both front ends' presenters (``cli/rows.py``, ``airflow/rows.py``) take these from here and add
what only they show; nothing below this layer builds maprcli rows."""

from __future__ import annotations

import time
from typing import Any

from streamrep.client.results import (
    ReplicaRow,
    StreamInfo,
    UpstreamRow,
)
from streamrep.replication.cursors import SYNCED, CursorRow
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.failover import FailbackPlan, FailbackResult, FailoverPlan, FailoverResult, TopicLag
from streamrep.replication.service import GatewayRow
from streamrep.replication.status import ReplicaStatus
from streamrep.replication.translate import TranslatedCursor
from streamrep.replication.verification import NEVER, Verification


def stream_info_row(info: StreamInfo) -> dict[str, Any]:
    """``stream info``."""
    return {
        "path": str(info.path),
        "cluster": info.path.cluster,
        "uuid": info.uuid,
        "creator": info.creator,
        "created": info.created,
        **info.meta.to_dict(),
        "topics": info.topics,
        "partitions": info.partitions,
        "replicas": info.replicas,
        "upstreams": info.upstreams,
        "failoverState": None if info.failover is None else info.failover.state.value,
        "failover": None if info.failover is None else info.failover.describe(),
    }


def replica_row(row: ReplicaRow) -> dict[str, Any]:
    """One replica in MapR's field names."""
    return {
        "cluster": row.path.cluster,
        "stream": row.path.path,
        "replicaPath": row.replica_path,
        "replicaState": row.state.value,
        "paused": row.paused,
        "throttle": row.throttle,
        "idx": row.idx,
        "networkencryption": row.networkencryption,
        "synchronous": row.synchronous,
        "networkcompression": row.networkcompression,
        "maxbytespersec": row.maxbytespersec,  # streamrep's (0: no limit)
        "uuid": row.uuid,
        "errors": row.errors,
    }


def upstream_row(row: UpstreamRow) -> dict[str, Any]:
    """``stream upstream list``: MapR's ``cluster``, ``stream`` (the path in that cluster),
    ``idx`` and ``uuid``, with ``upstreamPath`` (the full path) as ``replica list`` has ``replicaPath``."""
    return {
        "cluster": row.path.cluster,
        "stream": row.path.path,
        "upstreamPath": row.upstream_path,
        "idx": row.idx,
        "uuid": row.uuid,
    }


def replica_status_row(status: ReplicaStatus) -> dict[str, Any]:
    """``stream replica list``: MapR's fields, then the live ``gateways``, whether up to date,
    what is pending, the lag in ms, the alert thresholds, the source's failover (a fence) and the
    link's last verification."""
    pending = status.pending
    return {
        **replica_row(status),
        "gateways": status.gateways,
        "isUptodate": status.is_uptodate,
        "pendingMessages": None if pending is None else pending.messages,
        "bytesPending": None if pending is None else pending.bytes,
        "minPendingTS": None if pending is None else pending.oldest,
        "maxPendingTS": None if pending is None else pending.newest,
        "pendingIsEstimate": None if pending is None else pending.estimate,
        "replicationLagMillis": status.lag_millis,
        "maxLagMillis": status.thresholds.max_lag_millis,
        "maxLagMessages": status.thresholds.max_lag_messages,
        "failover": status.failover,
        **verification_fields(status.verification),
    }


def utc_time(ms: int) -> str:
    """A time (ms since the epoch) as ``replica lag`` and ``replica list`` show it: UTC, to the second."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def verification_fields(done: Verification | None) -> dict[str, Any]:
    """A link's last verification in ``replica list``: ``verification`` (``same``, ``differs`` or
    ``never``), ``lastVerified`` (UTC) and ``verificationSummary`` (the compare's line)."""
    return {
        "verification": NEVER if done is None else done.result,
        "lastVerified": None if done is None else utc_time(done.at),
        "verificationSummary": None if done is None else done.summary,
    }


def gateway_row(row: GatewayRow) -> dict[str, Any]:
    """``gateway list``: ``id``, ``status``, ``host``, ``pid``, ``engine``, ``master``, ``appId``,
    ``airflow``, ``heartbeatAgeSeconds``, ``partitions``, ``share``, ``listedBy``, ``desired``."""
    return {
        "id": row.id,
        "status": row.status.value,
        "host": row.host,
        "pid": row.pid,
        "engine": row.engine,
        "master": row.master,
        "appId": row.app_id,
        "airflow": row.airflow,
        "heartbeatAgeSeconds": row.heartbeat_age,
        "partitions": row.partitions,
        "share": list(row.share),
        "listedBy": list(row.listed_by),
        "desired": None if row.desired is None else row.desired.value,
    }


def cursor_row(row: CursorRow) -> dict[str, Any]:
    """``stream cursor list``: a committed cursor and the messages after it."""
    return {"group": row.group, "topic": row.topic, "partition": row.partition, "offset": row.offset, "lag": row.lag}


def cursor_sync_row(row: CursorSyncRow) -> dict[str, Any]:
    """``stream cursor sync`` (and the cursors a failover placed): one group, topic and partition."""
    return {"group": row.group, **translated_cursor_row(row), "action": row.action}


def translated_cursor_row(row: TranslatedCursor | CursorSyncRow) -> dict[str, Any]:
    """``stream cursor translate``: a partition's cursor on the source and where it lands on the replica."""
    return {
        "topic": row.topic,
        "partition": row.partition,
        "sourceOffset": row.source_offset,
        "replicaOffset": row.replica_offset,
    }


def topic_lag_row(topic: TopicLag) -> dict[str, Any]:
    return {
        "topic": topic.topic,
        "pendingMessages": topic.pending_messages,
        "bytesPending": topic.bytes_pending,
        "replicationLagMillis": topic.lag_millis,
    }


def plan_fields(plan: FailoverPlan | FailbackPlan) -> dict[str, Any]:
    """A failover or failback plan in its field names: ``path``, ``replica``, ``stage``,
    ``sourceReachable``, ``sourceError``, then the figures (failover: ``pendingMessages``,
    ``bytesPending``, ``replicationLagMillis``, ``lastKnownLag``; failback: ``toCopyBack``),
    ``topics``, ``gateways``, ``groups`` (failover: ``forceNeeded``) and ``steps``."""
    fields: dict[str, Any] = {
        "path": str(plan.path),
        "replica": str(plan.replica),
        "stage": plan.stage.value,
        "sourceReachable": plan.source_reachable,
        "sourceError": plan.source_error,
    }
    if isinstance(plan, FailoverPlan):
        fields.update(
            pendingMessages=plan.pending_messages,
            bytesPending=plan.bytes_pending,
            replicationLagMillis=plan.lag_millis,
            lastKnownLag=plan.last_known_lag,
        )
    else:
        fields.update(toCopyBack=plan.to_copy_back)
    fields.update(
        topics=None if plan.topics is None else [topic_lag_row(t) for t in plan.topics],
        gateways=plan.gateways,
        groups=plan.groups,
    )
    if isinstance(plan, FailoverPlan):
        fields.update(forceNeeded=plan.force_needed)
    fields.update(steps=list(plan.steps))
    return fields


def _synced(placed: tuple[CursorSyncRow, ...]) -> int:
    return sum(1 for row in placed if row.action == SYNCED)


def failover_row(done: FailoverResult) -> dict[str, Any]:
    """``stream replica failover`` and the failover operator's XCom: what was done (``aborted``
    for ``-abort``), and how many cursors were synced."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "alreadyDone": done.already_done,
        "aborted": done.aborted,
        "forced": done.forced,
        "missing": done.missing,
        "lateMessages": done.late_messages,
        "result": done.result,
        "cursorsSynced": _synced(done.cursors),
    }


def failback_row(done: FailbackResult) -> dict[str, Any]:
    """``stream replica failback`` and the failback operator's XCom: what was done, and how many
    cursors were synced."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "phase": done.phase.value,
        "alreadyDone": done.already_done,
        "copiedBack": done.copied_back,
        "lacked": done.lacked,
        "result": done.result,
        "cursorsSynced": _synced(done.cursors),
    }
