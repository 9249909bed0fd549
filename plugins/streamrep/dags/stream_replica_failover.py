"""stream_replica_failover: promote a replica, after a person approves the plan."""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG

from streamrep.airflow.assets import REPLICAS_ALIAS
from streamrep.airflow.operators import FailoverOperator, FailoverPlanOperator
from streamrep.airflow.params import flag_param, seconds_param, stream_path_param
from streamrep.replication.failover import DEFAULT_TIMEOUT

DOC = """
### Replica failover

`stream replica failover -path <path> -replica <replica>`, with a person in the loop:

1. `plan` (`-plan true`): the lag per topic (messages, bytes, ms), the pending messages, the live
   gateways, the consumer groups whose cursors move, whether the source is reachable, and the
   steps; nothing changes.
2. `approve`: Airflow's human-in-the-loop approval (Required Actions). Its body is the plan.
   **Reject** skips the failover: nothing changes.
3. `failover`: refuses producers on the source, waits until the replica has drained, stops
   replication into it (no gateway applies to it afterwards), places the consumer groups'
   cursors, and records the replica as promoted: producers write to it. Safe to retry.

With the source's cluster unreachable the failover fails unless `force` is true: it then
promotes at once, and its result says how many messages may be missing (the last known lag).

**Params**: `path` (source stream), `replica` (the replica to promote: required), `force`
(promote even if the source is unreachable or does not drain in time), `timeout` (seconds to wait
for the replica to catch up).
"""

with DAG(
    dag_id="stream_replica_failover",
    description="Promote a replica after a person approves the plan",
    doc_md=DOC,
    schedule=None,
    max_active_runs=1,  # two runs at once would race on the same links and fences
    tags=["streamrep", "replication", "failover"],
    render_template_as_native_obj=True,
    params={
        "path": stream_path_param("/mapr/sanfrancisco/activity", "Source stream", "The stream to fail over from."),
        "replica": stream_path_param(None, "Replica stream", "The replica to promote (required)."),
        "force": flag_param(False, "Force", "Promote even if the source is unreachable or does not drain in time."),
        "timeout": seconds_param(DEFAULT_TIMEOUT, "Timeout", "How long to wait for the replica to catch up."),
    },
    default_args={"retries": 1, "retry_delay": timedelta(seconds=10)},
) as dag:
    plan = FailoverPlanOperator(task_id="plan", path="{{ params.path }}", replica="{{ params.replica }}")
    approve = ApprovalOperator(
        task_id="approve",
        subject="Fail over {{ params.path }} to {{ params.replica }}?",
        body="{{ ti.xcom_pull(task_ids='plan')['markdown'] }}",
        retries=0,
    )
    promote = FailoverOperator(
        task_id="failover",
        path="{{ params.path }}",
        replica="{{ params.replica }}",
        force="{{ params.force }}",
        timeout="{{ params.timeout }}",
        outlets=[REPLICAS_ALIAS],
    )  # the promoted replica: an asset event
    plan >> approve >> promote
