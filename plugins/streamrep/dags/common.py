"""What the package's DAGs share: how a DAG that acts on one replica link runs, how a scheduled
DAG runs, a person's approval of a failover or failback plan, and the setup DAGs' copy, verify
and wait. The DAGs themselves are the other modules of this package, one each."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.providers.standard.operators.hitl import ApprovalOperator
from airflow.sdk import DAG

from streamrep.airflow.assets import REPLICAS_ALIAS
from streamrep.airflow.operators import FailoverPlanOperator
from streamrep.airflow.operators.base import NETWORK_FIELDS
from streamrep.airflow.sensors import ReplicaUpToDateSensor
from streamrep.airflow.spark_operators import StreamCopyOperator, StreamDiffOperator

# the link a replica DAG acts on, as its params name it
SOURCE = "{{ params.path }}"
REPLICA = "{{ params.replica }}"


def replica_dag(
    dag_id: str, *, description: str, doc_md: str, params: dict[str, Any], retries: int, tags: tuple[str, ...] = ()
) -> DAG:
    """A DAG a person triggers on the link ``SOURCE`` -> ``REPLICA``: one run at a time (two would
    race on the same links and fences), params rendered as native values, each task retried
    ``retries`` times 10 s apart."""
    return DAG(
        dag_id=dag_id,
        description=description,
        doc_md=doc_md,
        schedule=None,
        max_active_runs=1,
        tags=["streamrep", "replication", *tags],
        render_template_as_native_obj=True,
        params=params,
        default_args={"retries": retries, "retry_delay": timedelta(seconds=10)},
    )


def scheduled_dag(dag_id: str, *, schedule: timedelta, **settings: Any) -> DAG:
    """A DAG that runs every ``schedule`` once someone unpauses it (docs/airflow.md, 'The DAGs'):
    paused on creation, one run at a time, and no catch-up of the runs missed while it was off."""
    return DAG(
        dag_id=dag_id, schedule=schedule, catchup=False, max_active_runs=1, is_paused_upon_creation=True, **settings
    )


def approved_plan(procedure: str, subject: str) -> ApprovalOperator:
    """``plan`` (the ``procedure``'s plan: nothing changes) then ``approve``, Airflow's
    human-in-the-loop approval whose body is the plan; the irreversible step follows ``approve``."""
    plan = FailoverPlanOperator(task_id="plan", procedure=procedure, path=SOURCE, replica=REPLICA)
    approve = ApprovalOperator(
        task_id="approve", subject=subject, body="{{ ti.xcom_pull(task_ids='plan')['markdown'] }}", retries=0
    )
    plan >> approve
    return approve


def network_options() -> dict[str, str]:
    """The replica's network options, each templated from the param of its name."""
    return {name: f"{{{{ params.{name} }}}}" for name in NETWORK_FIELDS}


def copy_and_verify() -> tuple[StreamCopyOperator, StreamDiffOperator]:
    """``copystream`` of ``SOURCE`` into ``REPLICA`` on Spark, then ``verify``:
    ``diffstreamswithcrc`` of the two, which fails the run if the copy differs."""
    return (
        StreamCopyOperator(task_id="copystream", source=SOURCE, destination=REPLICA),
        StreamDiffOperator(task_id="verify", source=SOURCE, destination=REPLICA, crc=True),
    )


def wait_caught_up() -> ReplicaUpToDateSensor:
    """``wait_caught_up``: until ``REPLICA`` is up to date (in the triggerer, for up to an hour),
    then the replica's asset event."""
    return ReplicaUpToDateSensor(
        task_id="wait_caught_up",
        path=SOURCE,
        replica=REPLICA,
        deferrable=True,
        poke_interval=15,
        timeout=3600,
        outlets=[REPLICAS_ALIAS],
    )
