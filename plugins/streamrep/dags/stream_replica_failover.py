"""stream_replica_failover: promote a replica, after a person approves the plan."""

from __future__ import annotations

from streamrep.airflow.assets import REPLICAS_ALIAS
from streamrep.airflow.operators import FailoverOperator
from streamrep.airflow.params import flag_param, seconds_param, stream_path_param
from streamrep.dags.common import REPLICA, SOURCE, approved_plan, replica_dag
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

with replica_dag(
    "stream_replica_failover",
    description="Promote a replica after a person approves the plan",
    doc_md=DOC,
    retries=1,
    tags=("failover",),
    params={
        "path": stream_path_param("/mapr/sanfrancisco/activity", "Source stream", "The stream to fail over from."),
        "replica": stream_path_param(None, "Replica stream", "The replica to promote (required)."),
        "force": flag_param(False, "Force", "Promote even if the source is unreachable or does not drain in time."),
        "timeout": seconds_param(DEFAULT_TIMEOUT, "Timeout", "How long to wait for the replica to catch up."),
    },
) as dag:
    approve = approved_plan("failover", "Fail over {{ params.path }} to {{ params.replica }}?")
    promote = FailoverOperator(
        task_id="failover",
        path=SOURCE,
        replica=REPLICA,
        force="{{ params.force }}",
        timeout="{{ params.timeout }}",
        outlets=[REPLICAS_ALIAS],
    )  # the promoted replica: an asset event
    approve >> promote
