"""stream_replica_uptodate_example: a DAG scheduled on "replica up to date", the Asset of a
replica, which gets an event each time the replica catches up after a copy (the setup DAGs'
``wait_caught_up``) or a failover."""

from __future__ import annotations

import os

from airflow.sdk import DAG, task

from streamrep.airflow.assets import replica_asset

# The replica: the demo's, unless the deployment names another (read when the DAG is parsed).
REPLICA = os.environ.get("STREAMREP_EXAMPLE_REPLICA", "/mapr/newyork/activity")

DOC = f"""
### Runs when a replica is up to date

Scheduled on the Asset of the replica `{REPLICA}` (`streamrep://<cluster>/<stream>`). The setup
DAGs (`stream_replica_manual_setup`, `stream_replica_autosetup`) end with `wait_caught_up`, which
emits an event for the replica through the alias `streamrep-replicas` once it is up to date;
each event makes a run of this DAG. The task `report` logs the source and the lag the event
recorded.

**Params**: none. The replica is set by `STREAMREP_EXAMPLE_REPLICA` where the DAG is parsed
(default `/mapr/newyork/activity`).
"""

replica = replica_asset(REPLICA)

with DAG(
    dag_id="stream_replica_uptodate_example",
    description="Runs when a streamrep replica has caught up (replica Asset)",
    doc_md=DOC,
    schedule=[replica],
    tags=["streamrep", "assets", "example"],
    max_active_runs=1,
) as dag:

    @task(inlets=[replica])
    def report(**context) -> list[dict]:
        """Log what each triggering event says: the replica, its source and the lag then."""
        extras = [dict(event.extra or {}) for event in context["triggering_asset_events"][replica]]
        for extra in extras:
            print(
                f"{extra.get('replica')} caught up with {extra.get('source')}: "
                f"{extra.get('pendingMessages')} messages pending, lag {extra.get('replicationLagMillis')} ms"
            )
        return extras

    report()
