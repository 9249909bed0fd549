"""The command line's one presenter: the domain's typed answers as maprcli rows (its field names,
in its order), for the table and for ``-json``. Nothing below the CLI builds these rows."""

from __future__ import annotations

from typing import Any

from streamrep.client.results import (
    ClusterAceInfo,
    PartitionInfo,
    TopicChange,
    TopicSummary,
)
from streamrep.maprcli import (
    cursor_row,
    cursor_sync_row,
    failback_row,
    failover_row,
    gateway_row,
    plan_fields,
    replica_row,
    replica_status_row,
    stream_info_row,
    topic_lag_row,
    translated_cursor_row,
    upstream_row,
    utc_time,
)
from streamrep.replication.copy import CopySummary
from streamrep.replication.samples import AlertSetting, LagSample
from streamrep.replication.service import ServiceRequest
from streamrep.replication.setup import AutosetupResult
from streamrep.replication.status import AcknowledgedLoss

__all__ = [
    "acknowledged_row",
    "alert_row",
    "autosetup_row",
    "cluster_ace_row",
    "copy_row",
    "cursor_row",
    "cursor_sync_row",
    "failback_row",
    "failover_row",
    "gateway_row",
    "lag_row",
    "partition_row",
    "plan_fields",
    "replica_row",
    "replica_status_row",
    "service_row",
    "stream_info_row",
    "topic_change_row",
    "topic_lag_row",
    "topic_row",
    "translated_cursor_row",
    "upstream_row",
]


def lag_row(sample: LagSample) -> dict[str, Any]:
    """``stream replica lag``: one recorded sample."""
    return {
        "time": utc_time(sample.t),
        "lagMessages": sample.messages,
        "lagBytes": sample.bytes,
        "lagMillis": sample.ms,
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
        "maxbytespersec": done.maxbytespersec,
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


def service_row(req: ServiceRequest, at: str | None, then: str) -> dict[str, Any]:
    """``gateway start`` / ``stop``: ``cluster``, ``desired``, ``by``, ``at`` (as shown), ``next`` (what happens now)."""
    return {"cluster": req.cluster, "desired": req.desired.value, "by": req.by, "at": at, "next": then}
