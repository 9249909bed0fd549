"""A failed autosetup is completed by running the same command again (core, CLI after kill -9,
and the autosetup DAG's operators); a finished replica, or one made any other way, is still
refused. Real embedded clusters, real processes, real Spark for the DAG's copy task."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from streamrep.client import Producer, StreamAdmin
from streamrep.errors import AlreadyExists, PermissionDenied, Unavailable
from streamrep.replication import setup
from streamrep.replication.copy import copy_partition, copy_stream, plan_copy

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
STREAMREP_EXE = Path(sys.executable).parent / "streamrep"


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


def copy_one_partition_then_fail(admin: StreamAdmin, src: str, dst: str) -> dict:
    """A copy that dies after one partition (the cluster is lost mid-copy)."""
    plan = plan_copy(admin, src, dst)
    first = sorted(plan.ends)[0]
    copy_partition(admin.store(plan.source), admin.store(plan.destination), plan, first)
    raise Unavailable("cluster newyork cannot be reached")


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
    assert done["copied"] == len(sent) - partial  # the rest, nothing twice
    assert_complete(admin, sent, multimaster)
    with pytest.raises(AlreadyExists, match=f"replica stream {NY} already exists"):
        setup.autosetup(admin, SF, NY, multimaster=multimaster)


def test_a_rerun_completes_an_autosetup_that_stopped_after_creating_the_replica(source):
    admin = source
    sent = produce(admin, SF, 50)
    setup.begin_autosetup(admin, SF, NY)  # the process died right after this step
    assert admin.entry(SF).replicas == ()
    setup.autosetup(admin, SF, NY)
    assert_complete(admin, sent)


def test_a_replica_made_otherwise_is_refused_and_left_alone(source):
    admin = source
    admin.create_stream(NY, copymetafrom=SF)  # by hand: not an autosetup's
    with pytest.raises(AlreadyExists, match=f"replica stream {NY} already exists"):
        setup.autosetup(admin, SF, NY)
    assert admin.entry(SF).replicas == () and admin.entry(NY).upstreams == ()


def test_a_replica_left_by_an_autosetup_of_another_source_is_refused(source):
    admin = source
    other = "/mapr/sanfrancisco/other"
    admin.create_stream(other)
    setup.begin_autosetup(admin, other, NY)
    with pytest.raises(AlreadyExists, match=f"replica stream {NY} already exists"):
        setup.autosetup(admin, SF, NY)
    assert admin.entry(SF).replicas == ()


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


@pytest.mark.slow
def test_the_autosetup_dag_operators_rerun_completes_a_failed_run(source, monkeypatch):
    from airflow_support import ctx
    from streamrep.airflow.operators import (
        AutosetupCheckOperator,
        ReplicaAddOperator,
        ReplicaResumeOperator,
        StreamCreateOperator,
        UpstreamAddOperator,
    )
    from streamrep.airflow.spark_operators import StreamCopyOperator

    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    admin = source
    sent = produce(admin, SF, 100)

    def run_tasks(upto: int | None = None) -> None:
        """The DAG's tasks (primary-secondary), in order; a run that died stops after ``upto``."""
        tasks = [
            AutosetupCheckOperator(task_id="check", path=SF, replica=NY),
            StreamCreateOperator(task_id="create_replica", path=NY, copymetafrom=SF),
            ReplicaAddOperator(task_id="add_replica_paused", path=SF, replica=NY, paused=True, synchronous=False),
            UpstreamAddOperator(task_id="add_upstream", path=NY, upstream=SF),
            StreamCopyOperator(task_id="copystream", source=SF, destination=NY),
            ReplicaResumeOperator(task_id="resume_replica", path=SF, replica=NY),
        ]
        for task in tasks[:upto]:
            task.execute(ctx())

    run_tasks(upto=4)  # the run failed at its copystream task
    assert admin.entry(NY).autosetup_from == admin.entry(SF).uuid and admin.entry(SF).replicas[0].paused
    run_tasks()  # a new run of the DAG with the same params
    assert_complete(admin, sent)
    with pytest.raises(Exception, match=f"replica stream {NY} already exists"):
        AutosetupCheckOperator(task_id="check", path=SF, replica=NY).execute(ctx())


def test_copy_stream_alone_does_not_finish_an_autosetup(source):
    admin = source
    produce(admin, SF, 10)
    setup.begin_autosetup(admin, SF, NY)
    copy_stream(admin, SF, NY)
    assert admin.entry(NY).autosetup_from is not None  # only the final resume finishes it
