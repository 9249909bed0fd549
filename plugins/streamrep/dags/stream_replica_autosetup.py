"""stream_replica_autosetup: ``maprcli stream replica autosetup`` as a DAG, one task a step."""

from __future__ import annotations

from airflow.sdk import TriggerRule, chain

from streamrep.airflow.operators import (
    AutosetupCheckOperator,
    ReplicaAddOperator,
    ReplicaResumeOperator,
    StreamCreateOperator,
    UpstreamAddOperator,
)
from streamrep.airflow.params import flag_param, network_params, stream_path_param
from streamrep.dags.common import REPLICA, SOURCE, copy_and_verify, network_options, replica_dag, wait_caught_up

DOC = """
### Replica autosetup

`maprcli stream replica autosetup -path <path> -replica <replica> [-multimaster] [-synchronous]`
as a DAG, one task a step:

1. `check` — the source exists and you may administer and copy it; **the replica stream must
   not exist** (the run fails clearly if it does; use `stream_replica_manual_setup` for an
   existing replica), unless an unfinished autosetup of this source made it. It then creates
   the replica, marked as this autosetup's until `resume_replica`.
2. `create_replica` — `stream create -copymetafrom` the source (found done by `check`).
3. `add_replica_paused` — `stream replica add -paused true [-synchronous true]`.
4. `add_upstream` — `stream upstream add` (the replica's side of the two-way agreement).
5. `copystream` — copy what the source holds, as a Spark job; then `verify` —
   `diffstreamswithcrc` of the source and the replica (in the task for streams up to a million
   messages, else on Spark; the CRC variant finds what the full compare finds, in flat memory):
   the run fails, before replication starts, if the copy differs
   (messages the source took since are in flight, not a difference). Its result is the link's
   first verification (`replica list`, the Stream replication page).
6. `add_reverse_replica`, `add_reverse_upstream` — only with `multimaster`: the replica
   replicates back to the source (skipped otherwise).
7. `resume_reverse_replica` (only with `multimaster`), then `resume_replica` — replication
   starts. `resume_replica` comes last because it finishes the autosetup (the replica is no
   longer marked as this autosetup's), as in `stream replica autosetup`.
8. `wait_caught_up` — waits until the replica is up to date (at once if the source took no
   messages since the copy; otherwise, in the triggerer, for the gateways, up to an hour), then
   emits an asset event for the replica (Asset `streamrep://<cluster>/<stream>`, through the
   alias `streamrep-replicas`), so DAGs scheduled on the replica's Asset run.

**Params**: `path` (source stream), `replica` (replica stream to create), `multimaster`,
`synchronous`, and the replica's network options `throttle`, `networkencryption`,
`networkcompression`, `maxbytespersec` (checked by `check` before anything is created; both links of
multi-master get them). **A failed run is completed by triggering the DAG again with the same params.**
Data flows once gateways run (DAG `stream_gateways`, on the replica's cluster,
and on the source's cluster too for multi-master).
"""

with replica_dag(
    "stream_replica_autosetup",
    description="Create, register, copy and start a replica in one run",
    doc_md=DOC,
    retries=2,
    params={
        "path": stream_path_param("/mapr/sanfrancisco/activity", "Source stream", "The stream to replicate."),
        "replica": stream_path_param(
            "/mapr/newyork/activity", "Replica stream", "The replica to create; it must not exist yet."
        ),
        "multimaster": flag_param(
            False, "Multi-master", "Also replicate from the replica back to the source (the reverse link)."
        ),
        "synchronous": flag_param(
            False, "Synchronous", "Acknowledge producers only once the replica has the messages."
        ),
        **network_params(),
    },
) as dag:
    multimaster, synchronous = "{{ params.multimaster }}", "{{ params.synchronous }}"
    network = network_options()  # for both links of multi-master (as stream replica autosetup)
    chain(
        AutosetupCheckOperator(task_id="check", path=SOURCE, replica=REPLICA, **network),
        StreamCreateOperator(task_id="create_replica", path=REPLICA, copymetafrom=SOURCE),
        ReplicaAddOperator(
            task_id="add_replica_paused", path=SOURCE, replica=REPLICA, paused=True, synchronous=synchronous, **network
        ),
        UpstreamAddOperator(task_id="add_upstream", path=REPLICA, upstream=SOURCE),
        *copy_and_verify(),
        ReplicaAddOperator(
            task_id="add_reverse_replica",
            path=REPLICA,
            replica=SOURCE,
            paused=True,
            synchronous=synchronous,
            only_if=multimaster,
            **network,
        ),
        UpstreamAddOperator(task_id="add_reverse_upstream", path=SOURCE, upstream=REPLICA, only_if=multimaster),
        ReplicaResumeOperator(
            task_id="resume_reverse_replica",
            path=REPLICA,
            replica=SOURCE,
            only_if=multimaster,
            trigger_rule=TriggerRule.NONE_FAILED,
        ),
        # last: it finishes the autosetup, so a rerun after any earlier failure is still accepted
        ReplicaResumeOperator(
            task_id="resume_replica", path=SOURCE, replica=REPLICA, trigger_rule=TriggerRule.NONE_FAILED
        ),
        wait_caught_up(),
    )
