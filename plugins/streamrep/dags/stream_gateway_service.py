"""stream_gateway_service: run the gateways as a service: start, stop, and supervise them."""

from __future__ import annotations

from datetime import timedelta

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import Param

from streamrep.airflow.operators import GatewayServiceOperator
from streamrep.airflow.params import optional_cluster_param
from streamrep.airflow.supervisor import GATEWAYS_DAG_ID, ServiceAction
from streamrep.dags.common import scheduled_dag

DOC = """
### Gateways as a service

Keeps the gateways of every cluster whose gateways should run (`streamrep gateway start
-cluster C`) running, and starts or stops them on request. The desired state lives in each
destination cluster's catalog (`streamrep.replication.service`; the supervisor's decision is
`streamrep.airflow.supervisor`), so the CLI, this DAG, the REST
API and the page all act on the same state.

| action | what it does |
| --- | --- |
| `supervise` (every scheduled run) | for each cluster whose gateways should run, with no live gateway heartbeat and no launch in flight: trigger a `stream_gateways` run (conf `{cluster, once: false}`) |
| `start` | `gateway start -cluster <cluster>` (desired state running), then supervise that cluster at once |
| `stop` | `gateway stop -cluster <cluster>`: every gateway finishes its pass, withdraws its heartbeat and exits 0, so its `stream_gateways` run ends **success** |

**Stopping a continuous gateway: one way.** `action: stop` (or `streamrep gateway stop -cluster
<cluster>`, or the Stop button of the Stream replication page). Marking a gateway task or its
`stream_gateways` run success or failed is not a stop: it kills that gateway (its Spark job ends
with the task), and while the cluster's desired state is running this supervisor launches a new
run within about a minute.

**Paused on creation**: unpause this DAG once to run gateways as a service.

Trigger `start`/`stop` from the trigger form (params `action` and `cluster`), or over REST:
`POST /api/v2/dags/stream_gateway_service/dagRuns` with
`{"logical_date": null, "conf": {"action": "stop", "cluster": "newyork"}}`.

**Why a scheduled supervisor DAG.** Airflow 3 has no long-running service primitive: a task
is one attempt of a unit of work. Deferrable operators and triggers wait for events, but a
trigger must not run work (it runs in the triggerer's event loop), so a gateway that pulls data
cannot be one. Airflow 3.3's resumable tasks (`ResumableJobMixin`, the task state store) let a
retried task re-attach to an external job instead of submitting it again; a gateway needs no
re-attaching: its Spark job is tied to its task process (it never outlives it), and its
durable state, the replication positions, is already in the destination, so a new attempt
resumes exactly where the last stopped. So the pieces are: the gateways are ordinary long tasks of `stream_gateways`
(their own retries, with a doubling backoff from 10 s to 5 min, bring back a gateway process
that dies), and this DAG, scheduled every minute with `max_active_runs=1` and `catchup=False`,
is the supervisor: it keeps no state of its own (the desired state and the record of its
launches are in the cluster's catalog), so after a scheduler restart, or a lost run, the next
scheduled run finds the clusters with no live gateway and launches them again. Launches use
`TriggerDagRunOperator` (Airflow's standard provider), mapped over the clusters to launch, with a
deterministic `trigger_run_id`, so a retried supervisor finds the run it already created
(`skip_when_already_exists`) instead of starting a second one. A launch is in flight while its
run is queued or running (asked through the Task SDK, `ti.get_dagrun_state`); while launches
produce no live heartbeat the wait between them doubles from 30 s to 5 minutes. The trigger
fails when `stream_gateways` is paused (`fail_when_dag_is_paused`): a silent queue of runs that
never start would hide it.

**Params**: `action` (`supervise`, `start` or `stop`; scheduled runs supervise) and `cluster`
(required for start and stop; for supervise, only this cluster instead of every known one).
"""

with scheduled_dag(
    "stream_gateway_service",
    description="Start, stop and supervise the replication gateways of every cluster",
    doc_md=DOC,
    schedule=timedelta(minutes=1),
    dagrun_timeout=timedelta(minutes=5),
    tags=["streamrep", "gateways"],
    params={
        "action": Param(
            "supervise",
            type="string",
            enum=[action.value for action in ServiceAction],
            title="Action",
            description="supervise (what scheduled runs do), start or stop.",
        ),
        "cluster": optional_cluster_param(
            "The destination cluster whose gateways start or stop (for supervise: only this one; empty: every cluster)."
        ),
    },
) as dag:
    plan = GatewayServiceOperator(
        task_id="gateway_service",
        action="{{ params.action }}",
        cluster="{{ params.cluster }}",
        retries=2,
        retry_delay=timedelta(seconds=5),
    )
    TriggerDagRunOperator.partial(
        task_id="launch_gateways",
        trigger_dag_id=GATEWAYS_DAG_ID,
        logical_date=None,  # as a REST trigger: runs are told apart by their run id, not a date
        skip_when_already_exists=True,
        fail_when_dag_is_paused=True,
        wait_for_completion=False,
        retries=2,
        retry_delay=timedelta(seconds=5),
    ).expand_kwargs(plan.output)
