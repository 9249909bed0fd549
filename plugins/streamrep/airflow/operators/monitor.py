"""The operator that raises the replicas' lag alerts (the ``stream_replica_monitor`` DAG)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrep.airflow import rows as presented
from streamrep.airflow.operators.base import StreamrepOperator, known_clusters, log_rows
from streamrep.client.admin import StreamAdmin
from streamrep.replication import lag

if TYPE_CHECKING:
    from airflow.sdk import Context


class ReplicaLagMonitorOperator(StreamrepOperator):
    """The replicas' alerts (``streamrep.replication.lag.check_alerts``): fails with one line
    naming each replica whose lag passed its threshold (``stream replica alert``), or that no
    live gateway serves. A failure is the alert, not a fault to retry.

    :param cluster: check only the replicas on this cluster (default: on every cluster the hook
        knows). (templated)
    :return: (XCom) one row per replica checked: its lag, thresholds and problems.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "cluster")
    ui_color = "#fee2e2"

    def __init__(self, *, cluster: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cluster = cluster

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        names = [self.cluster] if self.cluster else known_clusters(admin)
        checks = lag.check_alerts(admin, names)
        rows = [presented.alert_check_row(check) for check in checks]
        log_rows(
            self.log,
            f"replica lag on {', '.join(names) or 'no cluster'}",
            rows,
            (
                "source",
                "replicaPath",
                "paused",
                "lagMessages",
                "lagMillis",
                "maxLagMessages",
                "maxLagMillis",
                "problems",
            ),
        )
        lag.raise_alerts(checks)
        return rows
