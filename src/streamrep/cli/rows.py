"""The command line's one presenter: the domain's typed answers as maprcli rows (its field names,
in its order), for the table and for ``-json``. Nothing below the CLI builds these rows."""

from __future__ import annotations

import time
from typing import Any

from streamrep.client.results import (
    ClusterAceInfo,
    PartitionInfo,
    ReplicaRow,
    StreamInfo,
    TopicChange,
    TopicSummary,
    UpstreamRow,
)
from streamrep.replication.copy import CopySummary
from streamrep.replication.cursors import SYNCED, CursorRow
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.failover import FailbackPlan, FailbackResult, FailoverPlan, FailoverResult, TopicLag
from streamrep.replication.samples import AlertSetting, LagSample
from streamrep.replication.service import GatewayRow, ServiceRequest
from streamrep.replication.setup import AutosetupResult
from streamrep.replication.status import AcknowledgedLoss, ReplicaStatus
from streamrep.replication.translate import TranslatedCursor


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
        "uuid": row.uuid,
        "errors": row.errors,
    }


def replica_status_row(status: ReplicaStatus) -> dict[str, Any]:
    """``stream replica list``: MapR's fields, then the live ``gateways``, whether up to date,
    what is pending, the lag in ms and the alert thresholds."""
    pending = status.pending
    return {
        **replica_row(status),
        "gateways": status.gateways,
        "isUptodate": status.is_uptodate,
        "pendingMessages": None if pending is None else pending.messages,
        "bytesPending": None if pending is None else pending.bytes,
        "minPendingTS": None if pending is None else pending.oldest,
        "maxPendingTS": None if pending is None else pending.newest,
        "replicationLagMillis": status.lag_millis,
        "maxLagMillis": status.thresholds.max_lag_millis,
        "maxLagMessages": status.thresholds.max_lag_messages,
    }


def lag_row(sample: LagSample) -> dict[str, Any]:
    """``stream replica lag``: one recorded sample."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sample.t / 1000)),
        "lagMessages": sample.messages,
        "lagBytes": sample.bytes,
        "lagMillis": sample.ms,
    }


def cursor_sync_row(row: CursorSyncRow) -> dict[str, Any]:
    """``stream cursor sync`` (and the cursors a failover placed): one group, topic and partition."""
    return {
        "group": row.group,
        "topic": row.topic,
        "partition": row.partition,
        "sourceOffset": row.source_offset,
        "replicaOffset": row.replica_offset,
        "action": row.action,
    }


def cursor_row(row: CursorRow) -> dict[str, Any]:
    """``stream cursor list``: a committed cursor and the messages after it."""
    return {"group": row.group, "topic": row.topic, "partition": row.partition, "offset": row.offset, "lag": row.lag}


def translated_cursor_row(row: TranslatedCursor) -> dict[str, Any]:
    """``stream cursor translate``."""
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
        "stage": plan.stage,
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
    """``stream replica failover``: what was done, and how many cursors were synced."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "alreadyDone": done.already_done,
        "forced": done.forced,
        "missing": done.missing,
        "lateMessages": done.late_messages,
        "result": done.result,
        "cursorsSynced": _synced(done.cursors),
    }


def failback_row(done: FailbackResult) -> dict[str, Any]:
    """``stream replica failback``: what was done, and how many cursors were synced."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "phase": done.phase,
        "alreadyDone": done.already_done,
        "copiedBack": done.copied_back,
        "result": done.result,
        "cursorsSynced": _synced(done.cursors),
    }


def alert_row(setting: AlertSetting) -> dict[str, Any]:
    """``stream replica alert``: ``source``, ``replicaPath``, ``maxLagMillis``, ``maxLagMessages``."""
    return {
        "source": str(setting.source),
        "replicaPath": str(setting.replica),
        "maxLagMillis": setting.thresholds.max_lag_millis,
        "maxLagMessages": setting.thresholds.max_lag_messages,
    }


def acknowledged_row(done: AcknowledgedLoss) -> dict[str, Any]:
    """``stream replica acknowledge``: ``replicaPath``, ``acknowledged`` (messages), ``ranges``."""
    return {"replicaPath": str(done.replica), "acknowledged": done.acknowledged, "ranges": done.describe_ranges()}


def copy_row(summary: CopySummary) -> dict[str, Any]:
    """``copystream``: ``source``, ``destination``, ``messages`` written."""
    return {"source": str(summary.source), "destination": str(summary.destination), "messages": summary.messages}


def autosetup_row(done: AutosetupResult) -> dict[str, Any]:
    """``stream replica autosetup``: the link's options, the steps taken and the messages copied."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "multimaster": done.multimaster,
        "synchronous": done.synchronous,
        "throttle": done.throttle,
        "networkencryption": done.networkencryption,
        "networkcompression": done.networkcompression,
        "steps": list(done.steps),
        "copied": done.copied,
    }


def topic_change_row(change: TopicChange) -> dict[str, Any]:
    """``stream topic create`` and ``edit``: ``path``, ``topic``, ``partitions``."""
    return {"path": str(change.path), "topic": change.topic, "partitions": change.partitions}


def topic_row(topic: TopicSummary) -> dict[str, Any]:
    """``stream topic list``: ``topic``, ``partitions``, ``messages`` (and ``kafkaTopic`` on Kafka)."""
    row: dict[str, Any] = {"topic": topic.topic, "partitions": topic.partitions, "messages": topic.messages}
    if topic.native_topic is not None:
        row["kafkaTopic"] = topic.native_topic
    return row


def partition_row(info: PartitionInfo) -> dict[str, Any]:
    """``stream topic info``: ``topic``, ``partitionid``, ``minoffset``, ``maxoffset``,
    ``messages`` (and ``kafkaTopic`` on Kafka)."""
    row: dict[str, Any] = {
        "topic": info.topic,
        "partitionid": info.partition,
        "minoffset": info.first,
        "maxoffset": info.last,
        "messages": info.messages,
    }
    if info.native_topic is not None:
        row["kafkaTopic"] = info.native_topic
    return row


def cluster_ace_row(info: ClusterAceInfo) -> dict[str, Any]:
    """``cluster ace get`` and ``set``: ``cluster``, ``adminperm``, ``creator``."""
    return {
        "cluster": info.cluster,
        "adminperm": None if info.ace is None else info.ace.adminperm,
        "creator": None if info.ace is None else info.ace.creator,
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
        "desired": row.desired,
    }


def service_row(req: ServiceRequest, at: str | None, then: str) -> dict[str, Any]:
    """``gateway start`` / ``stop``: ``cluster``, ``desired``, ``by``, ``at`` (as shown), ``next`` (what happens now)."""
    return {"cluster": req.cluster, "desired": req.desired, "by": req.by, "at": at, "next": then}
