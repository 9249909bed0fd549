"""stream_replica_failback: give a failed-over source its role back, after a person approves."""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG, Param

from streamrep.airflow.assets import REPLICAS_ALIAS
from streamrep.airflow.operators import FailbackOperator, FailoverPlanOperator
from streamrep.airflow.params import seconds_param, stream_path_param
from streamrep.replication.failover import DEFAULT_TIMEOUT, FailbackPhase

DOC = """
### Replica failback

`stream replica failback -path <path> -replica <replica>`, with a person in the loop, after
`stream_replica_failover` promoted `replica`:

1. `plan` (`-plan true`): the messages the source lacks (only those produced on the promoted
   stream: nothing is copied twice), the live gateways of the source's cluster, the consumer
   groups whose cursors move back, and the steps; nothing changes.
2. `approve`: Airflow's human-in-the-loop approval; its body is the plan. **Reject** skips the
   failback: nothing changes.
3. `failback`: with `phase` `all`, adds the reverse link (producers keep writing to the promoted
   stream while it copies), then returns: producers are sent back to the source, the reverse
   flow drains, cursors are placed back, the original link is restored and the reverse one
   removed. `reverse` does only the first part and `return` only the second. Safe to retry.

**Params**: `path` (the original source stream), `replica` (the promoted replica: required),
`phase` (`all`, `reverse` or `return`), `timeout` (seconds each wait lasts at most).
"""

with DAG(
    dag_id="stream_replica_failback",
    description="Give a failed-over source its role back after a person approves the plan",
    doc_md=DOC,
    schedule=None,
    max_active_runs=1,  # two runs at once would race on the same links and fences
    tags=["streamrep", "replication", "failover"],
    render_template_as_native_obj=True,
    params={
        "path": stream_path_param(
            "/mapr/sanfrancisco/activity", "Source stream", "The original source, failed over from."
        ),
        "replica": stream_path_param(None, "Promoted replica", "The replica that was promoted (required)."),
        "phase": Param(
            FailbackPhase.ALL.value,
            type="string",
            enum=[p.value for p in FailbackPhase],
            title="Phase",
            description="all: copy back and return; reverse: only add the reverse link; "
            "return: only switch back (after reverse).",
        ),
        "timeout": seconds_param(DEFAULT_TIMEOUT, "Timeout", "How long each wait lasts at most."),
    },
    default_args={"retries": 1, "retry_delay": timedelta(seconds=10)},
) as dag:
    plan = FailoverPlanOperator(
        task_id="plan", procedure="failback", path="{{ params.path }}", replica="{{ params.replica }}"
    )
    approve = ApprovalOperator(
        task_id="approve",
        subject="Fail back {{ params.replica }} to {{ params.path }}?",
        body="{{ ti.xcom_pull(task_ids='plan')['markdown'] }}",
        retries=0,
    )
    back = FailbackOperator(
        task_id="failback",
        path="{{ params.path }}",
        replica="{{ params.replica }}",
        phase="{{ params.phase }}",
        timeout="{{ params.timeout }}",
        outlets=[REPLICAS_ALIAS],
    )  # the source caught up: an asset event
    plan >> approve >> back
