"""stream_replica_verify: compare every replica of a cluster's streams with its source, on Spark,
on a schedule; record each link's result and emit the replica's asset event."""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import Param

from streamrep.airflow.assets import REPLICAS_ALIAS
from streamrep.airflow.operators import ReplicaLinksOperator
from streamrep.airflow.params import flag_param, optional_cluster_param
from streamrep.airflow.spark_operators import DIFF_ENGINES, StreamDiffOperator
from streamrep.dags.common import scheduled_dag

DOC = """
### Replica verification

An independent check of each replica's content, as MapR's `diffstreams`: not the marks
`replica list` computes lag from, but the messages themselves (key, value, headers, timestamp,
partition and order, by identity: docs/user-guide.md, "Comparing and repairing streams").

1. `list_links` — every replica link of the streams **on `cluster`** (the source side: each
   stream there and each replica its `replica list` names, on any cluster); every cluster the
   streamrep connections know when `cluster` is empty. A failed-over link is left out (its
   replica was promoted and takes writes of its own).
2. `verify` — one mapped task per link, labelled with the replica's path: `diffstreamswithcrc`
   (or `diffstreams` with `crc` off) of the source and the replica, as a Spark application
   (`spark_apps/diffstreams.py`). The ops directories go to a fresh folder in the worker's
   temporary space, named in the task's log and result. Each result is recorded as the link's
   last verification, which `stream replica list` and the Stream replication page show. A
   replica that **differs** (a message missing, extra, changed, out of order or duplicated) fails
   its task with the one-line summary, so the run fails; messages in flight (`dstBehind`) are not
   a difference. A replica that is the same gets an **asset event** (its Asset
   `streamrep://<cluster>/<stream>`, through the alias `streamrep-replicas`) whose extra holds the
   result under `verification`.

**Schedule**: daily, without catchup, one run at a time; **paused on creation** (unpause it to
verify on schedule, or trigger it). **Params**: `cluster` (the source cluster; empty: every
cluster), `crc` (the CRC variant, which reads the differing runs only once their CRCs differ:
cheaper when replicas are nearly always the same), `engine` (`spark`; `auto` and `local` compare
small streams in the task).
"""

with scheduled_dag(
    "stream_replica_verify",
    description="Compare every replica of a cluster's streams with its source, on Spark",
    doc_md=DOC,
    schedule=timedelta(days=1),
    tags=["streamrep", "monitoring"],
    render_template_as_native_obj=True,
    params={
        "cluster": optional_cluster_param("Verify the replicas of the streams on this cluster (empty: every cluster)."),
        "crc": flag_param(True, "CRC variant", "diffstreamswithcrc: compare CRCs of runs of messages first."),
        "engine": Param(
            "spark",
            type="string",
            enum=list(DIFF_ENGINES),
            title="Engine",
            description="spark: each compare is a Spark application; auto: in the task for small streams.",
        ),
    },
    default_args={"retries": 2, "retry_delay": timedelta(seconds=30)},
) as dag:
    links = ReplicaLinksOperator(task_id="list_links", cluster="{{ params.cluster }}")
    StreamDiffOperator.partial(
        task_id="verify",
        crc="{{ params.crc }}",
        engine="{{ params.engine }}",
        outlets=[REPLICAS_ALIAS],
        map_index_template="{{ task.destination }}",
    ).expand_kwargs(links.output)
