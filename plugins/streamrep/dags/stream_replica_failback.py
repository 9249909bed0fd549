"""stream_replica_failback: give a failed-over source its role back, after a person approves."""

from __future__ import annotations

from airflow.sdk import Param

from streamrep.airflow.assets import REPLICAS_ALIAS
from streamrep.airflow.operators import FailbackOperator
from streamrep.airflow.params import seconds_param, stream_path_param
from streamrep.dags.common import REPLICA, SOURCE, approved_plan, replica_dag
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

with replica_dag(
    "stream_replica_failback",
    description="Give a failed-over source its role back after a person approves the plan",
    doc_md=DOC,
    retries=1,
    tags=("failover",),
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
) as dag:
    approve = approved_plan("failback", "Fail back {{ params.replica }} to {{ params.path }}?")
    back = FailbackOperator(
        task_id="failback",
        path=SOURCE,
        replica=REPLICA,
        phase="{{ params.phase }}",
        timeout="{{ params.timeout }}",
        outlets=[REPLICAS_ALIAS],
    )  # the source caught up: an asset event
    approve >> back
