"""Gateways as a service (``replication/service.py``): desired state, ``gateway start/stop/list``,
the shares live gateways report, clean stops of the in-process gateway, and the supervisor's
decision. Real embedded (and Kafka) clusters, the real CLI entry point and the in-process gateway."""

from __future__ import annotations

import io
import json
import threading
import time
from datetime import timedelta

import pytest

from streamrep.airflow import supervisor
from streamrep.cli.main import run
from streamrep.client.producer import Producer
from streamrep.errors import NotFound, PermissionDenied
from streamrep.model.gateways import DesiredState
from streamrep.replication import service
from streamrep.replication.gateway import HEARTBEAT_KIND, Gateway
from streamrep.replication.status import replica_status

ON_BOTH = pytest.mark.backends("embedded", "kafka")
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"


@pytest.fixture
def linked(admin):
    """SF (topics t with 3 partitions and u with 2) and its replica NY, agreed both ways."""
    admin.create_stream(SF)
    admin.create_topic(SF, "t", 3)
    admin.create_topic(SF, "u", 2)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run(list(argv), out, err, io.StringIO())
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def as_alice(monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


def produce(admin, n: int) -> None:
    with Producer(admin) as producer:
        for i in range(n):
            producer.send(SF + ":t", f"m{i}", key=f"k{i}")


def replica_values(admin) -> list[str]:
    sp = admin.path(NY)
    entry, store = admin.entry(sp), admin.store(sp)
    result = []
    for topic, count in store.topics(entry.uuid).items():
        for p in range(count):
            start, end = store.offsets(entry.uuid, topic, p)
            result += [m.value.decode() for m in store.read(entry.uuid, topic, p, start, end - start)]
    return result


# -- desired state and permissions -----------------------------------------------------------
@ON_BOTH
def test_start_and_stop_record_the_desired_state_with_who_and_when(linked):
    assert service.desired_state(linked.clusters.store("newyork")) is None  # not managed yet
    row = service.request(linked, "newyork", DesiredState.STOPPED)
    assert row.desired == "stopped" and row.by == "alice" and row.live == ()
    assert service.desired_state(linked.clusters.store("newyork")) == "stopped"
    assert service.request(linked, "newyork", DesiredState.RUNNING).desired == "running"
    assert service.desired_state(linked.clusters.store("newyork")) == "running"


def test_only_a_cluster_admin_may_start_or_stop_its_gateways(linked, bob, as_alice):
    linked.set_cluster_ace("u:alice", "newyork")
    with pytest.raises(PermissionDenied, match="adminperm on cluster newyork"):
        service.request(bob, "newyork", DesiredState.STOPPED)
    assert service.desired_state(linked.clusters.store("newyork")) is None  # nothing written
    status, out, err = cli("gateway", "stop", "-cluster", "newyork")  # alice: allowed
    assert status == 0, err
    bob_env = {"STREAMREP_USER": "bob", "STREAMREP_GROUPS": "sales"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in bob_env.items():
            mp.setenv(k, v)
        status, out, err = cli("gateway", "start", "-cluster", "newyork")
    assert status == 1 and err.count("\n") == 1 and "does not have adminperm on cluster newyork" in err
    assert service.desired_state(linked.clusters.store("newyork")) == "stopped"


def test_unknown_cluster_and_bad_options_are_one_line_errors(linked, as_alice):
    with pytest.raises(NotFound):
        service.request(linked, "boston", DesiredState.RUNNING)
    for argv, status in (
        (("gateway", "start", "-cluster", "boston"), 1),
        (("gateway", "list", "-cluster", "boston"), 1),
        (("gateway", "stop", "-cluster", "newyork", "-timeout", "abc"), 2),
        (("gateway", "stop"), 2),
    ):
        code, out, err = cli(*argv)
        assert code == status and err.startswith("streamrep: error: ") and err.count("\n") == 1, (argv, err)
    code, out, _ = cli("gateway", "start", "-cluster", "boston", "-json")
    assert code == 1 and json.loads(out)["status"] == "ERROR"


def test_start_says_who_starts_the_gateways(linked, as_alice):
    code, out, err = cli("gateway", "start", "-cluster", "newyork", "-json")
    assert code == 0, err
    [row] = json.loads(out)["data"]
    assert row["desired"] == "running" and row["by"] == "alice"
    assert "stream_gateway_service" in row["next"] and "gateway run -cluster newyork" in row["next"]
    Gateway(linked, "newyork", "g1").run_once()
    code, out, _ = cli("gateway", "start", "-cluster", "newyork", "-json")
    assert "already running: g1" in json.loads(out)["data"][0]["next"]
    assert "gateway start" in cli("help")[1] and "gateway stop" in cli("help")[1]


# -- gateway list: status, placement, share -----------------------------------------------
@ON_BOTH
def test_two_live_gateways_hold_shares_that_cover_every_partition_once(linked, as_alice):
    linked.set_gateways("newyork", "g1 g2 g3", "sanfrancisco")  # g3 is listed but never runs
    g1, g2 = Gateway(linked, "newyork", "g1"), Gateway(linked, "newyork", "g2")
    g1.heartbeat(), g2.heartbeat()
    g1.run_once(), g2.run_once()
    rows = {r.id: r for r in service.gateways(linked, "newyork")}
    live, down = service.GatewayStatus.LIVE, service.GatewayStatus.DOWN
    assert rows["g1"].status == rows["g2"].status == live and rows["g3"].status == down
    shares = rows["g1"].share + rows["g2"].share
    every = sorted(f"{SF}:{t}/{p}" for t, n in (("t", 3), ("u", 2)) for p in range(n))
    assert sorted(shares) == every and len(set(shares)) == 5
    assert {rows["g1"].partitions, rows["g2"].partitions} == {2, 3} and rows["g3"].partitions == 0
    assert rows["g1"].listed_by == ("sanfrancisco",) and rows["g1"].host and rows["g1"].pid
    # the CLI shows the same rows
    code, out, err = cli("gateway", "list", "-cluster", "newyork", "-json")
    assert code == 0, err
    assert {r["id"]: r["share"] for r in json.loads(out)["data"]} == {k: list(r.share) for k, r in rows.items()}
    # g2 stops: its share goes to g1 at g1's next pass
    g2.stop()
    g1.run_once()
    rows = {r.id: r for r in service.gateways(linked, "newyork")}
    assert list(rows["g1"].share) == every and rows["g2"].status == down


def test_placement_names_the_engine_and_the_airflow_task():
    where = service.placement(
        "spark",
        "spark://h:7077",
        "app-1",
        env={
            "AIRFLOW_CTX_DAG_ID": "stream_gateways",
            "AIRFLOW_CTX_DAG_RUN_ID": "r1",
            "AIRFLOW_CTX_TASK_ID": "gateway",
            "AIRFLOW_CTX_TRY_NUMBER": "3",
        },
    )
    assert where["engine"] == "spark" and where["master"] == "spark://h:7077" and where["appId"] == "app-1"
    assert service.airflow_text(where["airflow"]) == "stream_gateways/r1/gateway try 3"
    assert "airflow" not in service.placement("local", env={})


def test_replica_list_names_the_live_gateways_of_a_flow(linked):
    Gateway(linked, "newyork", "g1").run_once()
    [row] = replica_status(linked, SF)
    assert row.gateways == ["g1"]


# -- clean stop of the in-process gateway -------------------------------------------------------
@ON_BOTH
def test_a_running_gateway_stops_after_its_pass_and_withdraws_its_heartbeat(linked, as_alice):
    produce(linked, 200)
    gateway = Gateway(linked, "newyork", "g1")
    gateway.watch.interval = 0.05
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(line=str(gateway.run(interval=0.01))))
    worker.start()
    deadline = time.monotonic() + 20
    while len(replica_values(linked)) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    code, out, err = cli("gateway", "stop", "-cluster", "newyork", "-wait", "true", "-timeout", "20", "-json")
    assert code == 0, err
    assert json.loads(out)["data"][0]["next"] == "stopped"
    worker.join(10)
    assert not worker.is_alive()
    assert result["line"].startswith(
        "gateway g1 stopped: the gateways of cluster newyork are stopped (gateway stop by alice"
    )
    assert "g1" not in linked.clusters.store("newyork").catalog_list(HEARTBEAT_KIND)
    assert sorted(replica_values(linked)) == sorted(f"m{i}" for i in range(200))  # exactly once
    # started while stopped: does not start, and says how to start again
    line = str(Gateway(linked, "newyork", "g1").run(interval=0.01))
    assert line.startswith("gateway g1 not started") and "gateway start -cluster newyork" in line
    assert "g1" not in linked.clusters.store("newyork").catalog_list(HEARTBEAT_KIND)


def test_gateway_run_local_while_stopped_exits_0_with_one_line(linked, as_alice):
    service.request(linked, "newyork", DesiredState.STOPPED)
    code, out, err = cli("gateway", "run", "-cluster", "newyork", "-engine", "local")
    assert code == 0 and err.count("\n") == 1 and "not started" in err
    produce(linked, 3)  # a drain (-once) ignores the desired state
    code, out, err = cli("gateway", "run", "-cluster", "newyork", "-engine", "local", "-once", "-json")
    assert code == 0 and json.loads(out)["data"][0]["messages"] == 3


def test_stop_wait_times_out_with_one_line_while_a_gateway_stays_live(linked, as_alice):
    Gateway(linked, "newyork", "g1").heartbeat()  # live, but nobody runs its loop
    code, out, err = cli("gateway", "stop", "-cluster", "newyork", "-wait", "true", "-timeout", "0.3")
    assert code == 1 and "still live after 0.3 s: g1" in err and err.count("\n") == 1
    rows = service.gateways(linked, "newyork")
    assert rows[0].status == service.GatewayStatus.STOPPING and rows[0].desired == "stopped"


# -- the supervisor's decision -----------------------------------------------------------------
def test_supervisor_launches_with_doubling_backoff_and_deterministic_run_ids(linked):
    t0 = 1_000_000.0
    assert not supervisor.supervise(linked, "newyork", now=t0).launch  # not managed: left alone
    service.request(linked, "newyork", DesiredState.RUNNING)
    first = supervisor.supervise(linked, "newyork", now=t0)
    assert first.launch and first.run_id.startswith("gateway_service__newyork__") and first.run_id.endswith("__1")
    assert not supervisor.supervise(linked, "newyork", now=t0 + 29).launch  # in flight / backing off
    second = supervisor.supervise(linked, "newyork", now=t0 + 30)
    assert second.launch and second.run_id.endswith("__2")
    assert not supervisor.supervise(linked, "newyork", now=t0 + 30 + 59).launch  # backoff doubled to 60 s
    third = supervisor.supervise(linked, "newyork", now=t0 + 30 + 60)
    assert third.launch and third.run_id.endswith("__3")
    # a launch whose run is still active is in flight, whatever the backoff says
    active = supervisor.supervise(linked, "newyork", run_state=lambda rid: "running", now=t0 + 10_000)
    assert not active.launch and "in flight" in active.reason
    # ended runs: launch again; the backoff is capped at 5 minutes
    for _ in range(6):
        supervisor.supervise(linked, "newyork", run_state=lambda rid: "failed", now=t0 + 10_000)
    assert supervisor.launch_backoff(10) == supervisor.LAUNCH_BACKOFF_MAX_SECONDS
    # a live gateway: nothing to launch, and the backoff starts afresh
    Gateway(linked, "newyork", "g1").heartbeat()
    decision = supervisor.supervise(linked, "newyork")
    assert not decision.launch and "live gateways g1" in decision.reason
    assert service.desired(linked.clusters.store("newyork")).launch.attempts == 0
    # stopped: nothing to supervise
    service.request(linked, "newyork", DesiredState.STOPPED)
    assert not supervisor.supervise(linked, "newyork", now=t0 + 20_000).launch
    assert supervisor.managed_clusters(linked, ["newyork", "sanfrancisco"]) == []


@pytest.mark.parametrize("marked", ["success", "failed"])
def test_a_gateway_run_marked_in_the_ui_is_restarted_and_only_gateway_stop_stops(linked, marked):
    """Issue 21, item 17: the one way to stop a continuous gateway is ``gateway stop`` (the
    service DAG's ``stop``). A run marked success or failed by hand killed its gateway; while the
    cluster is started, the supervisor (every minute) launches a new run within a minute."""
    service.request(linked, "newyork", DesiredState.RUNNING)
    first = supervisor.supervise(linked, "newyork")
    assert first.launch
    gateway = Gateway(linked, "newyork", "g1")
    gateway.heartbeat()  # the launched run's gateway is live: healthy
    assert not supervisor.supervise(linked, "newyork", run_state=lambda rid: "running").launch
    gateway.stop()  # the run marked by hand: Airflow's on_kill ended the gateway
    launched_at = service.desired(linked.clusters.store("newyork")).launch.at
    states = {first.run_id: marked}
    ended = lambda rid: states.get(rid, "running")  # noqa: E731 - the relaunched run runs
    again = supervisor.supervise(linked, "newyork", run_state=ended, now=launched_at + 60)
    assert again.launch and again.run_id != first.run_id, again.reason  # restarted, not stopped
    assert not supervisor.supervise(linked, "newyork", run_state=ended, now=launched_at + 120).launch  # in flight
    # gateway stop: the supervisor leaves the cluster alone, and a gateway started anyway exits at once
    service.request(linked, "newyork", DesiredState.STOPPED)
    assert not supervisor.supervise(linked, "newyork", run_state=ended, now=launched_at + 600).launch


def test_supervisor_needs_adminperm_to_launch(linked, bob):
    service.request(linked, "newyork", DesiredState.RUNNING)
    linked.set_cluster_ace("u:alice", "newyork")
    with pytest.raises(PermissionDenied):
        supervisor.supervise(bob, "newyork")


# -- the supervisor DAG -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def service_dag():
    """The DAG as the package defines it (imported directly: a DagBag costs far more here; DAG
    integrity for every DAG is tests/unit/test_airflow_dags.py's)."""
    from streamrep.dags.stream_gateway_service import dag

    return dag


def test_the_supervisor_dag_runs_every_minute_one_at_a_time(service_dag):
    from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator

    assert service_dag.max_active_runs == 1 and service_dag.catchup is False
    assert service_dag.schedule == timedelta(minutes=1)
    assert service_dag.params["action"] == "supervise" and service_dag.params["cluster"] == ""
    launch = service_dag.get_task("launch_gateways")
    assert launch.operator_class is TriggerDagRunOperator or launch.operator_name == "TriggerDagRunOperator"
    assert launch.partial_kwargs["trigger_dag_id"] == "stream_gateways"
    assert launch.partial_kwargs["skip_when_already_exists"] is True
    assert [t.task_id for t in service_dag.get_task("gateway_service").downstream_list] == ["launch_gateways"]


def test_the_supervisor_operator_starts_launches_once_and_stops(linked, service_dag):
    from airflow.sdk.exceptions import AirflowFailException

    op = service_dag.get_task("gateway_service")

    def execute(action: str, cluster: str = "", run_state=None):
        task = type(op)(task_id="gateway_service", action=action, cluster=cluster)
        ti = None if run_state is None else type("TI", (), {"get_dagrun_state": staticmethod(run_state)})()
        return task.execute({"ti": ti} if ti else {})

    assert execute("supervise") == []  # nothing managed: nothing launched
    [launch] = execute("start", "newyork")
    assert launch["conf"] == {"cluster": "newyork", "once": False}
    assert launch["trigger_run_id"].startswith("gateway_service__newyork__")
    assert service.desired_state(linked.clusters.store("newyork")) == "running"
    assert execute("supervise") == []  # launched a moment ago: in flight (backoff)
    assert execute("supervise", run_state=lambda dag_id, run_id: "running") == []
    Gateway(linked, "newyork", "g1").heartbeat()
    assert execute("supervise") == []  # live
    assert execute("stop", "newyork") == []
    assert service.desired_state(linked.clusters.store("newyork")) == "stopped"
    with pytest.raises(AirflowFailException, match="needs a cluster"):
        execute("start")
    with pytest.raises(AirflowFailException, match="cluster boston"):
        execute("start", "boston")


# -- the page: gateways per cluster, and start/stop for who may trigger the service DAG -----------
def test_only_who_may_trigger_the_service_dag_may_start_or_stop_from_the_page():
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from streamrep.airflow.page_access import allowed_to_control

    manager = SimpleAuthManager()
    assert not allowed_to_control(manager, SimpleAuthManagerUser(username="vic", role="viewer"))
    assert allowed_to_control(manager, SimpleAuthManagerUser(username="uma", role="user"))


def test_the_page_starts_and_stops_gateways_and_shows_their_shares(linked, as_alice):
    from fastapi import HTTPException
    from fastapi.testclient import TestClient

    from streamrep.airflow.page import create_app
    from streamrep.airflow.page_access import PageAccess

    async def viewer(request=None) -> PageAccess:
        return PageAccess("vic", True, False)

    async def operator(request=None) -> PageAccess:
        return PageAccess("alice", True, True)

    async def refused(request=None) -> PageAccess:
        raise HTTPException(403, "Forbidden")

    Gateway(linked, "newyork", "g1").run_once()
    client = TestClient(create_app(access=operator, control=operator, paused=lambda: False))
    [g1] = client.get("/api/clusters/newyork").json()["gateways"]
    assert g1["id"] == "g1" and f"{SF}:t/0" in g1["share"]
    answer = client.post("/api/gateways/newyork/stop")
    assert answer.status_code == 200 and answer.json()["desired"] == "stopped"
    assert answer.json()["by"] == "alice" and answer.json()["hint"] == "g1 stop after their current batch"
    assert service.desired_state(linked.clusters.store("newyork")) == "stopped"
    newyork = client.get("/api/clusters/newyork").json()
    assert newyork["desired"] == "stopped" and newyork["gateways"][0]["status"] == "stopping"
    assert client.post("/api/gateways/newyork/start").json()["desired"] == "running"
    viewing = TestClient(create_app(access=viewer, control=refused))
    assert viewing.get("/api/clusters").json()["mayControl"] is False
    assert viewing.post("/api/gateways/newyork/stop").status_code == 403
    assert service.desired_state(linked.clusters.store("newyork")) == "running"


def test_a_spark_gateway_started_while_stopped_returns_at_once_with_one_line(linked, capsys):
    from streamrep.spark.jobs import gateway_job

    service.request(linked, "newyork", DesiredState.STOPPED)
    gateway_job(None, linked, "newyork", "g1")  # returns before it needs a Spark session
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "gateway g1 not started: the gateways of cluster newyork are stopped"
    )
    assert "g1" not in linked.clusters.store("newyork").catalog_list(HEARTBEAT_KIND)


def test_a_cluster_the_supervisor_may_not_launch_does_not_keep_the_others_down(linked, service_dag, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    op = type(service_dag.get_task("gateway_service"))
    service.request(linked, "sanfrancisco", DesiredState.RUNNING)
    service.request(linked, "newyork", DesiredState.RUNNING)
    linked.set_cluster_ace("u:alice", "sanfrancisco")
    monkeypatch.setenv("STREAMREP_USER", "bob")  # the hook's identity: no adminperm on sanfrancisco
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    [launch] = op(task_id="gateway_service", action="supervise", cluster="").execute({})
    assert launch["conf"]["cluster"] == "newyork"
    with pytest.raises(AirflowFailException, match="adminperm on cluster sanfrancisco"):
        op(task_id="gateway_service", action="supervise", cluster="sanfrancisco").execute({})


def test_a_long_pass_keeps_the_heartbeat_fresh(linked, monkeypatch):
    """A pass draining a backlog beats between batches, so its share does not expire and pass
    to another gateway while it still works on it (each beat moves ``ts`` forward)."""
    monkeypatch.setattr("streamrep.replication.gateway_liveness.HEARTBEAT_INTERVAL_SECONDS", 0.0)
    produce(linked, 60)
    gateway = Gateway(linked, "newyork", "g1")
    store = linked.clusters.store("newyork")
    beats: list[float] = []
    real_update = store.catalog_update

    def spy(kind, key, change):
        real_update(kind, key, change)
        if kind == HEARTBEAT_KIND and key == "g1":
            beats.append(store.catalog_get(HEARTBEAT_KIND, "g1")["ts"])

    monkeypatch.setattr(store, "catalog_update", spy)
    sf = linked.entry(SF)
    fullest = max(linked.store(linked.path(SF)).offsets(sf.uuid, "t", p)[1] for p in range(3))
    assert gateway.run_once(max_messages=10) == 60
    # one beat at the start of the pass, one after each round of batches (one of each partition)
    assert len(beats) >= 1 + -(-fullest // 10) and beats == sorted(beats)
    assert sorted(replica_values(linked)) == sorted(f"m{i}" for i in range(60))


def test_quick_passes_beat_only_when_due_and_a_pass_reads_the_marks_once(linked, monkeypatch):
    """On Kafka a heartbeat is a transaction and a marks read a round trip to the broker, each paid
    per pass or per batch before (bench/README.md, "Kafka latency profile"): passes in quick
    succession beat only when a heartbeat is due, and a pass reads each replica's marks once, not per
    partition or batch."""
    produce(linked, 30)
    gateway = Gateway(linked, "newyork", "g1")
    store = linked.clusters.store("newyork")
    beats: list[str] = []
    marks_reads: list[str] = []
    real_update, real_marks = store.catalog_update, store.marks

    def update_spy(kind, key, change):
        if kind == HEARTBEAT_KIND and key == "g1":
            beats.append(key)
        return real_update(kind, key, change)

    def marks_spy(stream):
        marks_reads.append(stream)
        return real_marks(stream)

    monkeypatch.setattr(store, "catalog_update", update_spy)
    monkeypatch.setattr(store, "marks", marks_spy)
    assert gateway.run_once() == 30
    first = len(beats)  # the beat, and the share it now holds
    assert 1 <= first <= 2
    # the pass read the marks once (and its lag sample once more, and the assignment once before it
    # created the replica's missing topic: one never applied to); each apply planned from them and
    # checked them in its transaction
    assert len(marks_reads) == 3
    del marks_reads[:]
    assert gateway.run_once() == 0 and gateway.run_once() == 0
    assert len(beats) == first  # within HEARTBEAT_INTERVAL_SECONDS of the last beat
    assert len(marks_reads) == 2  # one replica, two idle passes over its 5 partitions
    monkeypatch.setattr("streamrep.replication.gateway_liveness.HEARTBEAT_INTERVAL_SECONDS", 0.0)
    assert gateway.run_once() == 0 and len(beats) == first + 1  # a beat due is written
    assert sorted(replica_values(linked)) == sorted(f"m{i}" for i in range(30))


def test_a_drain_by_a_gateway_the_source_does_not_list_says_so(linked, as_alice):
    linked.set_gateways("newyork", "gw1 gw2", "sanfrancisco")
    produce(linked, 3)
    code, out, err = cli("gateway", "run", "-cluster", "newyork", "-id", "other", "-engine", "local", "-once", "-json")
    assert code == 0 and json.loads(out)["data"][0]["messages"] == 0
    assert err.count("\n") == 1 and "cluster sanfrancisco sends to newyork only through its listed gateways" in err
    code, out, err = cli("gateway", "run", "-cluster", "newyork", "-id", "gw2", "-engine", "local", "-once", "-json")
    assert code == 0 and json.loads(out)["data"][0]["messages"] == 3 and err == ""


def test_a_running_gateway_rides_out_its_cluster_going_away_and_coming_back(linked, caplog):
    """The gateway's own cluster's store disappears under it (its heartbeat and every pass fail
    with Unavailable, as during a Kafka broker restart): the gateway logs and retries instead of
    exiting; once the store is back, replication resumes from the stored positions with nothing
    lost or doubled. (A source that goes away only marks its flows UNEXPECTED: see replica states.)"""
    import os

    produce(linked, 100)
    own_file = linked.clusters.store("newyork").path
    gateway = Gateway(linked, "newyork", "g1")
    worker = threading.Thread(target=gateway.run, kwargs={"interval": 0.01, "stop_after": 12})
    worker.start()
    deadline = time.monotonic() + 10
    while len(replica_values(linked)) < 100 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.rename(own_file, own_file + ".away")
    try:
        deadline = time.monotonic() + 10
        while "pass failed, retrying" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "pass failed, retrying" in caplog.text and "newyork" in caplog.text
        assert worker.is_alive()
    finally:
        os.rename(own_file + ".away", own_file)
    produce(linked, 100)  # m0..m99 again, as new messages at offsets past the first 100
    deadline = time.monotonic() + 10
    while len(replica_values(linked)) < 200 and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.join(15)
    assert not worker.is_alive()
    assert sorted(replica_values(linked)) == sorted([f"m{i}" for i in range(100)] * 2)  # each exactly once
