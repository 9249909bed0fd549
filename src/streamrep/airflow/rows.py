"""The Airflow layer's one presenter: the domain's typed answers as the rows that XComs, trigger
events, asset events and the UI page carry (maprcli's field names, JSON-serialisable). Nothing
below this layer builds these rows."""

from __future__ import annotations

from typing import Any

from streamrep.client.results import ReplicaRow, StreamInfo, UpstreamRow
from streamrep.replication.copy import CopySummary
from streamrep.replication.cursors import CursorRow
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.failover import FailbackPlan, FailbackResult, FailoverPlan, FailoverResult, TopicLag
from streamrep.replication.samples import AlertCheck, LagSample
from streamrep.replication.service import GatewayRow, ServiceRequest
from streamrep.replication.status import ReplicaStatus
from streamrep.replication.translate import TranslatedCursor


def stream_info_row(info: StreamInfo) -> dict[str, Any]:
    """``stream info``, as the CLI shows it."""
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
    """An ``upstream list`` row: ``cluster``, ``stream``, ``upstreamPath``, ``idx``, ``uuid``."""
    return {
        "cluster": row.path.cluster,
        "stream": row.path.path,
        "upstreamPath": row.upstream_path,
        "idx": row.idx,
        "uuid": row.uuid,
    }


def replica_row(row: ReplicaRow) -> dict[str, Any]:
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
    """A ``replica list`` row with every figure (``pendingMessages``, ``isUptodate``, ...)."""
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


def replica_status_rows(statuses: list[ReplicaStatus]) -> list[dict[str, Any]]:
    return [replica_status_row(status) for status in statuses]


def lag_sample_row(sample: LagSample) -> dict[str, int]:
    """A recorded lag sample as the page draws it: ``t``, ``messages``, ``bytes``, ``ms``."""
    return {"t": sample.t, "messages": sample.messages, "bytes": sample.bytes, "ms": sample.ms}


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


def failover_row(done: FailoverResult) -> dict[str, Any]:
    """The failover operator's XCom: ``path``, ``replica``, ``alreadyDone``, ``forced``,
    ``missing``, ``lateMessages``, ``cursors`` (``cursor_sync_row``s), ``result``."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "alreadyDone": done.already_done,
        "forced": done.forced,
        "missing": done.missing,
        "lateMessages": done.late_messages,
        "cursors": [cursor_sync_row(row) for row in done.cursors],
        "result": done.result,
    }


def failback_row(done: FailbackResult) -> dict[str, Any]:
    """The failback operator's XCom: ``path``, ``replica``, ``phase``, ``alreadyDone``,
    ``copiedBack``, ``cursors`` (``cursor_sync_row``s), ``result``."""
    return {
        "path": str(done.path),
        "replica": str(done.replica),
        "phase": done.phase,
        "alreadyDone": done.already_done,
        "copiedBack": done.copied_back,
        "cursors": [cursor_sync_row(row) for row in done.cursors],
        "result": done.result,
    }


def alert_check_row(check: AlertCheck) -> dict[str, Any]:
    """The lag monitor's XCom row: ``source``, ``replicaPath``, ``cluster``, ``paused``, with the
    figures when measured (``maxLagMillis``, ``maxLagMessages``, ``lagMessages``, ``lagBytes``,
    ``lagMillis``), then ``problems``."""
    row: dict[str, Any] = {
        "source": None if check.source is None else str(check.source),
        "replicaPath": None if check.replica is None else str(check.replica),
        "cluster": check.cluster,
        "paused": check.paused,
    }
    if check.sample is not None and check.thresholds is not None:
        row.update(
            maxLagMillis=check.thresholds.max_lag_millis,
            maxLagMessages=check.thresholds.max_lag_messages,
            lagMessages=check.sample.messages,
            lagBytes=check.sample.bytes,
            lagMillis=check.sample.ms,
        )
    row["problems"] = list(check.problems)
    return row


def copy_summary_row(summary: CopySummary) -> dict[str, Any]:
    """The copystream operator's XCom: ``source``, ``destination``, ``messages`` written and the
    source ``positions`` reached, by ``topic:partition``."""
    return summary.to_dict()


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


def service_request_row(req: ServiceRequest) -> dict[str, Any]:
    """A ``gateway start`` / ``stop`` request: ``cluster``, ``desired``, ``by``, ``at``, ``live``."""
    return {"cluster": req.cluster, "desired": req.desired, "by": req.by, "at": req.at, "live": list(req.live)}
