"""stream_replica_monitor: fail, naming the replica, when a replica's lag passes its threshold
or no gateway serves it."""

from __future__ import annotations

from datetime import timedelta

from streamrep.airflow.operators import ReplicaLagMonitorOperator
from streamrep.airflow.params import optional_cluster_param
from streamrep.dags.common import scheduled_dag

DOC = """
### Replica lag monitor

Every 5 minutes, checks every replica on every cluster the streamrep connections know (or only
those on `cluster`), and **fails** with one line naming each replica that

- lags more than its thresholds: `streamrep stream replica alert -path SRC -replica DST
  -maxlagms N -maxlagmsgs N` (the lag in ms is how long the oldest unreplicated message has
  waited; 0 removes a threshold; `stream replica list` shows them), or
- is not paused and has no live gateway serving it (MapR's ErrAllGatewaysUnreachable).

A paused replica needs no gateway, but its thresholds still apply. The lag is measured when the
task runs, as `stream replica list` does; the history the gateways record is on the
"Stream replication" page and in `streamrep stream replica lag`.

Route the failure where your team looks: the task's `on_failure_callback`, an Airflow
notifier, or email on failure. The task does not retry (a retry would only repeat the alert),
and `catchup=False` with `max_active_runs=1` keeps a stopped scheduler from replaying old checks.

**Params**: `cluster` (only the replicas on this cluster; empty: every known cluster).
"""

with scheduled_dag(
    "stream_replica_monitor",
    description="Fail when a replica's lag passes its threshold or no gateway serves it",
    doc_md=DOC,
    schedule=timedelta(minutes=5),
    dagrun_timeout=timedelta(minutes=5),
    tags=["streamrep", "monitoring"],
    params={
        "cluster": optional_cluster_param("Check only the replicas on this cluster (empty: every cluster)."),
    },
) as dag:
    ReplicaLagMonitorOperator(task_id="check_replica_lag", cluster="{{ params.cluster }}", retries=0)
