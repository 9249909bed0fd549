"""A failed autosetup is completed by running the same command again (core, CLI after kill -9,
and the real autosetup DAG's tasks); a finished replica, or one made any other way, is still
refused. Real embedded clusters (and Kafka clusters for the core), real processes, real Spark for
the DAG's copy task."""

from __future__ import annotations

import copy
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from airflow_support import ctx

from streamrep.client import Producer, StreamAdmin
from streamrep.errors import AlreadyExists, PermissionDenied, Unavailable
from streamrep.replication import setup
from streamrep.replication.copy import CopySummary, copy_partition, copy_stream, plan_copy

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
STREAMREP_EXE = Path(sys.executable).parent / "streamrep"
DAGS = Path(__file__).resolve().parents[2] / "dags"
# The core's recovery on Kafka clusters too; the kill -9 of the CLI (400k messages) and the DAG
# runs stay on embedded clusters (Kafka fault tests and the Kafka DAG test live elsewhere).
ON_BOTH = pytest.mark.backends("embedded", "kafka")


def produce(admin: StreamAdmin, stream: str, n: int, tag: str = "m") -> list[str]:
    values = [f"{tag}{i}" for i in range(n)]
    with Producer(admin, batch_size=1 << 30) as producer:
        for value in values:
            producer.send(f"{stream}:clicks", value.encode())
    return values


def held(admin: StreamAdmin, stream: str) -> Counter:
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    values: Counter = Counter()
    for p in range(store.topics(entry.uuid).get("clicks", 0)):
        start, end = store.offsets(entry.uuid, "clicks", p)
        values.update(m.value.decode() for m in store.read(entry.uuid, "clicks", p, start, end - start))
    return values


def assert_complete(admin: StreamAdmin, expected: list[str], multimaster: bool = False) -> None:
    """The setup is finished: linked both ways, resumed, unmarked, every message once."""
    (link,) = admin.entry(SF).replicas
    assert link.paused is False and link.uuid == admin.entry(NY).uuid
    assert [u.uuid for u in admin.entry(NY).upstreams] == [admin.entry(SF).uuid]
    assert admin.entry(NY).autosetup_from is None
    if multimaster:
        (back,) = admin.entry(NY).replicas
        assert back.paused is False and [u.uuid for u in admin.entry(SF).upstreams] == [admin.entry(NY).uuid]
    assert held(admin, NY) == Counter(expected)


@pytest.fixture
def source(admin):
    admin.create_stream(SF, defaultpartitions=3, ttl=0)
    admin.create_topic(SF, "clicks")
    return admin


def copy_one_partition_then_fail(admin: StreamAdmin, src: str, dst: str) -> CopySummary:
    """A copy that dies after one partition (the cluster is lost mid-copy)."""
    plan = plan_copy(admin, src, dst)
    first = sorted(plan.ends)[0]
    copy_partition(admin.store(plan.source), admin.store(plan.destination), plan, first)
    raise Unavailable("cluster newyork cannot be reached")


@ON_BOTH
@pytest.mark.parametrize("multimaster", [False, True])
def test_a_rerun_completes_an_autosetup_that_failed_mid_copy(source, multimaster):
    admin = source
    sent = produce(admin, SF, 300)
    with pytest.raises(Unavailable):
        setup.autosetup(admin, SF, NY, multimaster=multimaster, copier=copy_one_partition_then_fail)
    # left behind: the marked replica, linked both ways but paused, partly copied
    assert admin.entry(NY).autosetup_from == admin.entry(SF).uuid
    assert admin.entry(SF).replicas[0].paused is True
    partial = sum(held(admin, NY).values())
    assert 0 < partial < len(sent)
    done = setup.autosetup(admin, SF, NY, multimaster=multimaster)
    assert done.copied == len(sent) - partial  # the rest, nothing twice
    assert_complete(admin, sent, multimaster)
    with pytest.raises(AlreadyExists, match=f"replica stream {NY} already exists"):
        setup.autosetup(admin, SF, NY, multimaster=multimaster)


@ON_BOTH
def test_a_rerun_completes_an_autosetup_that_stopped_after_creating_the_replica(source):
    admin = source
    sent = produce(admin, SF, 50)
    setup.begin_autosetup(admin, SF, NY)  # the process died right after this step
    assert admin.entry(SF).replicas == ()
    setup.autosetup(admin, SF, NY)
    assert_complete(admin, sent)


@ON_BOTH
def test_a_replica_made_otherwise_is_refused_and_left_alone(source):
    admin = source
    admin.create_stream(NY, copymetafrom=SF)  # by hand: not an autosetup's
    with pytest.raises(AlreadyExists, match=f"replica stream {NY} already exists"):
        setup.autosetup(admin, SF, NY)
    assert admin.entry(SF).replicas == () and admin.entry(NY).upstreams == ()


@ON_BOTH
def test_a_replica_left_by_an_autosetup_of_another_source_is_refused(source):
    admin = source
    other = "/mapr/sanfrancisco/other"
    admin.create_stream(other)
    setup.begin_autosetup(admin, other, NY)
    with pytest.raises(AlreadyExists, match=f"replica stream {NY} already exists"):
        setup.autosetup(admin, SF, NY)
    assert admin.entry(SF).replicas == ()


@ON_BOTH
def test_autosetup_checks_its_rights_before_creating_anything(source, bob):
    admin = source
    sent = produce(admin, SF, 5)
    admin.edit_stream(SF, copyperm="u:alice | u:bob")  # not adminperm
    with pytest.raises(PermissionDenied, match=f"user bob does not have adminperm on stream {SF}"):
        setup.autosetup(bob, SF, NY)
    assert [e.path for e in admin.list_streams("newyork")] == []
    # adminperm and copyperm suffice: the replica gets the source's ACEs, so bob administers it
    # and its copy step may write into it without produceperm
    admin.edit_stream(SF, adminperm="u:alice | u:bob")
    setup.autosetup(bob, SF, NY)
    assert_complete(admin, sent)


def test_the_cli_after_kill_9_mid_copy_is_completed_by_the_same_command(source, home):
    admin = source
    sent = produce(admin, SF, 400_000)
    env = {**os.environ, "STREAMREP_HOME": home.home, "STREAMREP_USER": "alice", "STREAMREP_GROUPS": "eng"}
    command = [str(STREAMREP_EXE), "stream", "replica", "autosetup", "-path", SF, "-replica", NY, "-engine", "local"]
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # kill it once the copy has started (the replica holds some messages), before it ends
        while child.poll() is None:
            try:
                if sum(held(admin, NY).values()) > 0:
                    break
            except Exception:  # noqa: BLE001 - the replica is not there yet
                pass
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    assert child.returncode == -signal.SIGKILL, "the copy ended before it could be killed: make the source larger"
    assert admin.entry(NY).autosetup_from is not None and sum(held(admin, NY).values()) < len(sent)
    rerun = subprocess.run(command, env=env, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert_complete(admin, sent)
    again = subprocess.run(command, env=env, capture_output=True, text=True)
    assert again.returncode == 1 and again.stderr.strip() == (
        f"streamrep: error: replica stream {NY} already exists; autosetup creates it (use the manual setup steps instead)"
    )


@pytest.fixture(scope="module")
def autosetup_dag():
    """The real ``stream_replica_autosetup`` DAG, loaded from the repository's dags/ folder."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    return bag.dags["stream_replica_autosetup"]


def run_dag(dag, conf: dict, before: Mapping[str, Callable[[], None]] | None = None) -> dict[str, str]:
    """One run of ``dag`` triggered with ``conf``, in process: its tasks in topological order,
    each rendered from the params and executed as a worker would, following the trigger rules
    the DAG uses. A task that fails ends in ``failed`` (standing for a task whose tries are all
    used up). ``before[task_id]`` runs just before that task, as part of it.

    :return: each task's final state, by task id.
    """
    from airflow.sdk import TriggerRule
    from airflow.sdk.exceptions import AirflowSkipException

    params = copy.deepcopy(dag.params)
    params.update(conf)
    from airflow.sdk.execution_time.context import OutletEventAccessors

    # outlet_events: the caught-up sensor adds the replica's asset event, as a worker's context allows
    context = {**ctx(), "params": params.validate(), "outlet_events": OutletEventAccessors()}
    states: dict[str, str] = {}
    for task in dag.task_group.topological_sort():
        assert task.trigger_rule in (TriggerRule.ALL_SUCCESS, TriggerRule.NONE_FAILED), task.trigger_rule
        upstream = {states[t] for t in task.upstream_task_ids}
        if upstream & {"failed", "upstream_failed"}:
            states[task.task_id] = "upstream_failed"
            continue
        if task.trigger_rule == TriggerRule.ALL_SUCCESS and "skipped" in upstream:
            states[task.task_id] = "skipped"
            continue
        ti = task.prepare_for_execution()
        ti.render_template_fields(context, jinja_env=dag.get_template_env())
        try:
            if before and task.task_id in before:
                before[task.task_id]()
            ti.execute(context)
            states[task.task_id] = "success"
        except AirflowSkipException:
            states[task.task_id] = "skipped"
        except Exception:  # noqa: BLE001 - the task failed; the run goes on as Airflow's would
            states[task.task_id] = "failed"
    return states


def failed(states: dict[str, str]) -> list[str]:
    return [task for task, state in states.items() if state == "failed"]


@pytest.fixture
def as_alice(monkeypatch):
    """Operators act as alice (group eng), like the ``admin`` fixture, with no Spark connection."""
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)


@pytest.mark.slow
def test_a_rerun_of_the_autosetup_dag_completes_a_run_that_died_at_copystream(source, as_alice, autosetup_dag):
    admin = source
    sent = produce(admin, SF, 100)
    conf = {"path": SF, "replica": NY}

    def worker_lost() -> None:
        raise Unavailable("the worker running copystream was lost")

    states = run_dag(autosetup_dag, conf, before={"copystream": worker_lost})
    assert failed(states) == ["copystream"] and states["resume_replica"] == "upstream_failed"
    assert admin.entry(NY).autosetup_from == admin.entry(SF).uuid and admin.entry(SF).replicas[0].paused
    states = run_dag(autosetup_dag, conf)  # a new run of the DAG with the same params: copies on Spark
    assert failed(states) == [] and states["resume_replica"] == "success"
    assert states["add_reverse_replica"] == "skipped"
    assert_complete(admin, sent)
    assert failed(run_dag(autosetup_dag, conf)) == ["check"]  # finished: a new autosetup is refused


@pytest.mark.parametrize("failing, stream", [("resume_reverse_replica", NY), ("resume_replica", SF)])
def test_a_rerun_of_the_multimaster_autosetup_dag_completes_a_failed_resume(
    source, bob, as_alice, autosetup_dag, failing, stream
):
    """Either resume of a multi-master autosetup fails (alice lost adminperm on the stream it
    changes); once that is fixed, triggering the DAG again completes the setup. The source is
    empty, so copystream finds nothing to copy and starts no Spark job."""
    admin = source
    conf = {"path": SF, "replica": NY, "multimaster": True}
    adminperm = admin.entry(SF).meta.adminperm

    def revoke() -> None:
        admin.edit_stream(stream, adminperm="u:bob")

    states = run_dag(autosetup_dag, conf, before={failing: revoke})
    assert failed(states) == [failing]
    assert admin.entry(NY).autosetup_from == admin.entry(SF).uuid  # not finished: a rerun is accepted
    bob.edit_stream(stream, adminperm=adminperm)
    states = run_dag(autosetup_dag, conf)
    assert failed(states) == [] and states["resume_reverse_replica"] == states["resume_replica"] == "success"
    assert_complete(admin, [], multimaster=True)
    assert failed(run_dag(autosetup_dag, conf)) == ["check"]


@ON_BOTH
def test_copy_stream_alone_does_not_finish_an_autosetup(source):
    admin = source
    produce(admin, SF, 10)
    setup.begin_autosetup(admin, SF, NY)
    copy_stream(admin, SF, NY)
    assert admin.entry(NY).autosetup_from is not None  # only the final resume finishes it
