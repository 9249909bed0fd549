"""stream_gateways: start and supervise the gateways of a cluster."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import DAG

from streamrep.airflow.operators import GatewayPlanOperator
from streamrep.airflow.params import cluster_param, flag_param, gateways_param
from streamrep.airflow.spark_operators import StreamGatewayOperator

DOC = """
### Gateways of a cluster

Starts the gateways that replicate into the replicas on `cluster`, one task per gateway, each a
Spark application (`spark_apps/gateway.py`) that runs a loop of batch passes: its driver
plans each pass (the gateway's share of the source partitions, from the stored positions) and runs
it as one Spark job whose tasks read the sources and apply into the replicas. It is not a
Structured Streaming query and keeps no checkpoint.

1. `plan_gateways` — the gateways the source clusters list for `cluster`
   (`streamrep cluster gateway set -dstcluster <cluster> -gateways "gw1 gw2"`), or one gateway
   named after this host when none is listed. Param `gateways` overrides the lists.
2. `gateway` — one mapped task per gateway. Partitions of the source streams are dealt to the
   live gateways round-robin; a gateway whose heartbeat stops has its share taken over by the
   others, from the stored positions.

**Supervision.** A gateway task that dies is retried, many times, with a backoff that doubles
from 10 s up to at most 5 minutes, so while all gateways are down the DAG keeps bringing them
back without hammering a cluster that is down. Nothing is lost meanwhile: messages wait at the
source, and each replica stores its replication positions in the same transaction as the
messages, so a restarted gateway resumes exactly where the last one stopped. A user error (an
unknown cluster, a missing permission: the app exits with status 65) fails the task at once,
with streamrep's one-line message, and is not retried. Each mapped task is labelled with its
gateway's name.

**Stopping.** `streamrep gateway stop -cluster <cluster>` (or the `stream_gateway_service` DAG
with `action: stop`, or the page's Stop button) stops every gateway after its current pass: each
task succeeds and the run ends as success. This is the one way to stop a continuous gateway.
A run on a cluster whose gateways are stopped starts no Spark: each gateway task is skipped at
once, its log saying who stopped them and how to start them again (`once: true`, a drain, runs
anyway). Marking a gateway task or this run success or failed kills the gateway instead (its Spark job
ends with the task); while the cluster's gateways are started, the supervisor launches a new run
within about a minute. Runs with `once: false` are also what the `stream_gateway_service`
supervisor triggers for a cluster whose gateways should run and have no live heartbeat.

**Params**: `cluster` (the destination cluster), `once` (replicate what is there now and finish,
instead of running until `gateway stop`), `gateways` (optional names).
"""

with DAG(
    dag_id="stream_gateways",
    description="Start and supervise the replication gateways of a cluster",
    doc_md=DOC,
    schedule=None,
    tags=["streamrep", "gateways"],
    render_template_as_native_obj=True,
    params={
        "cluster": cluster_param("newyork", "The destination cluster whose replicas the gateways feed."),
        "once": flag_param(False, "Once", "Replicate what the sources hold now, then finish."),
        "gateways": gateways_param(),
    },
) as dag:
    plan = GatewayPlanOperator(
        task_id="plan_gateways",
        cluster="{{ params.cluster }}",
        gateways="{{ params.gateways }}",
        retries=3,
        retry_delay=timedelta(seconds=10),
    )
    StreamGatewayOperator.partial(
        task_id="gateway",
        cluster="{{ params.cluster }}",
        once="{{ params.once }}",
        map_index_template="{{ task.gateway_id }}",
        retries=10_000,
        retry_delay=timedelta(seconds=10),
        retry_exponential_backoff=2.0,
        max_retry_delay=timedelta(minutes=5),
    ).expand(gateway_id=plan.output)
