"""The Airflow layer's one presenter: the domain's typed answers as the rows that XComs, trigger
events, asset events and the UI page carry (maprcli's field names, JSON-serialisable). Nothing
below this layer builds these rows."""

from __future__ import annotations

from typing import Any

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
)
from streamrep.replication.copy import CopySummary
from streamrep.replication.samples import AlertCheck, LagSample
from streamrep.replication.service import ServiceRequest
from streamrep.replication.status import ReplicaStatus

__all__ = [
    "alert_check_row",
    "copy_summary_row",
    "cursor_row",
    "cursor_sync_row",
    "failback_row",
    "failover_row",
    "gateway_row",
    "lag_sample_row",
    "plan_fields",
    "replica_row",
    "replica_status_row",
    "replica_status_rows",
    "service_request_row",
    "stream_info_row",
    "topic_lag_row",
    "translated_cursor_row",
    "upstream_row",
]


def replica_status_rows(statuses: list[ReplicaStatus]) -> list[dict[str, Any]]:
    return [replica_status_row(status) for status in statuses]


def lag_sample_row(sample: LagSample) -> dict[str, int]:
    """A recorded lag sample as the page draws it: ``t``, ``messages``, ``bytes``, ``ms``."""
    return {"t": sample.t, "messages": sample.messages, "bytes": sample.bytes, "ms": sample.ms}


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


def service_request_row(req: ServiceRequest) -> dict[str, Any]:
    """A ``gateway start`` / ``stop`` request: ``cluster``, ``desired``, ``by``, ``at``, ``live``."""
    return {"cluster": req.cluster, "desired": req.desired.value, "by": req.by, "at": req.at, "live": list(req.live)}
