"""stream_replica_manual_setup: the seven steps of "Setting Up Primary-Secondary Stream
Replication Manually", one task each, in the seeds' order."""

from __future__ import annotations

from airflow.sdk import chain

from streamrep.airflow.operators import (
    ReplicaAddOperator,
    ReplicaResumeOperator,
    ReplicaVerifyOperator,
    StreamCreateOperator,
    UpstreamAddOperator,
    UpstreamVerifyOperator,
)
from streamrep.airflow.params import network_params, stream_path_param
from streamrep.dags.common import REPLICA, SOURCE, copy_and_verify, network_options, replica_dag, wait_caught_up

DOC = """
### Primary-secondary replication, set up manually

The seven steps of *Setting Up Primary-Secondary Stream Replication Manually*, one task each:

| # | task | maprcli |
| --- | --- | --- |
| 1 | `create_replica` | `stream create -path <replica> -copymetafrom <path>` |
| 2 | `add_replica_paused` | `stream replica add -path <path> -replica <replica> -paused true` |
| 3 | `verify_replica` | `stream replica list -path <path>` (the replica must be listed) |
| 4 | `add_upstream` | `stream upstream add -path <replica> -upstream <path>` |
| 5 | `verify_upstream` | `stream upstream list -path <replica>` (the source must be listed) |
| 6 | `copystream` | `mapr copystream -src <path> -dst <replica>`, as a Spark job |
| | `verify` | `mapr diffstreamswithcrc -src <path> -dst <replica>`: the run fails if the copy differs |
| 7 | `resume_replica` | `stream replica resume -path <path> -replica <replica>` |
| then | `wait_caught_up` | waits until `stream replica list` says the replica is up to date |

`verify` compares the replica with its source (`StreamDiffOperator`, the CRC variant, which finds
what the full compare finds in flat memory; engine `auto`: in the task for streams up to a million
messages, else on Spark) and fails the run, before replication starts,
if the copy differs: a message missing, extra, changed or out of order (messages the source took
since the copy are in flight, not a difference). Its result is the link's first verification
(`replica list`, the Stream replication page); the ops directories it wrote are named in its log.

`wait_caught_up` then emits an asset event for the replica (Asset `streamrep://<cluster>/<stream>`,
through the alias `streamrep-replicas`), so DAGs scheduled on the replica's Asset run. It ends at
once if the source took no messages since the copy; otherwise it waits (in the triggerer) for
the gateways to replicate them, for up to an hour.

**Params**: `path`, the source stream, and `replica`, the replica stream to create, both as
`/mapr/<cluster>/<stream>`; `throttle`, `networkencryption`, `networkcompression` and
`maxbytespersec`, the replica's network options as `stream replica add` takes them (step 2). Data then flows once
gateways run on the replica's cluster (DAG `stream_gateways`).

Every task is safe to retry: it finds the state it wanted (stream created with the same
metadata, replica registered with the same settings, upstream registered, nothing left to copy)
and succeeds, or fails with streamrep's one-line message.
"""

with replica_dag(
    "stream_replica_manual_setup",
    description="Primary-secondary stream replication, the seven manual steps",
    doc_md=DOC,
    retries=2,
    params={
        "path": stream_path_param("/mapr/sanfrancisco/activity", "Source stream", "The stream to replicate."),
        "replica": stream_path_param(
            "/mapr/newyork/activity", "Replica stream", "The replica to create, usually on another cluster."
        ),
        **network_params(),
    },
) as dag:
    chain(
        StreamCreateOperator(task_id="create_replica", path=REPLICA, copymetafrom=SOURCE),
        ReplicaAddOperator(
            task_id="add_replica_paused", path=SOURCE, replica=REPLICA, paused=True, **network_options()
        ),
        ReplicaVerifyOperator(task_id="verify_replica", path=SOURCE, replica=REPLICA),
        UpstreamAddOperator(task_id="add_upstream", path=REPLICA, upstream=SOURCE),
        UpstreamVerifyOperator(task_id="verify_upstream", path=REPLICA, upstream=SOURCE),
        *copy_and_verify(),
        ReplicaResumeOperator(task_id="resume_replica", path=SOURCE, replica=REPLICA),
        wait_caught_up(),
    )
