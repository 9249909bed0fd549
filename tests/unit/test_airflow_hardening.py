"""Airflow hardening (issue 7): the control DAG's required replica and remove confirmation, the
``streamrep`` connection form and its test button, gateway supervision (labels, backoff, user
errors not retried), Spark's own logging kept out of task logs, and the up-to-date sensor
failing at once when waiting cannot succeed. Real embedded clusters, real spark-submit, and
Airflow's own ProvidersManager and Connection model."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import sqlite3
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException, ParamValidationError
from airflow_support import DST, SRC, ctx, running_replica

from streamrep.airflow.hook import StreamrepHook
from streamrep.airflow.operators import ReplicaRemoveOperator
from streamrep.airflow.sensors import ReplicaUpToDateSensor
from streamrep.airflow.spark_operators import StreamCopyOperator, StreamGatewayOperator
from streamrep.airflow.triggers import ReplicaUpToDateTrigger
from streamrep.errors import CorruptStore, InvalidArgument, NotFound, PermissionDenied, Unavailable
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.replication import ReplicaState
from streamrep.spark.jobs import USER_ERROR_EXIT, fail, is_outage, is_user_error

DAGS = Path(__file__).resolve().parents[2] / "dags"


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


@pytest.fixture
def running(admin):
    """sanfrancisco/activity -> newyork/activity, resumed, with 5 messages not replicated yet."""
    return running_replica(admin)


def first_event(trigger: ReplicaUpToDateTrigger):
    async def first():
        async for event in trigger.run():
            return event

    return asyncio.run(asyncio.wait_for(first(), timeout=20))


# -- the control DAG: no default replica, remove only when confirmed ---------------------------
def test_control_dag_refuses_a_trigger_without_a_replica(dagbag):
    params = copy.deepcopy(dagbag.dags["stream_replica_control"].params)
    with pytest.raises(ParamValidationError, match="replica"):
        params.validate()  # what a trigger that forgets the replica meets
    assert params.get_param("confirm_remove").resolve() is False
    params["replica"] = DST
    assert params.validate()["replica"] == DST


def test_control_dag_passes_the_confirmation_to_remove_only(dagbag):
    tasks = dagbag.dags["stream_replica_control"].task_dict
    assert tasks["remove"].confirmed == "{{ params.confirm_remove }}"
    assert not hasattr(tasks["pause"], "confirmed") and not hasattr(tasks["resume"], "confirmed")


@pytest.mark.parametrize("confirmed", [False, "False", "", None])
def test_remove_without_confirmation_fails_and_keeps_the_replica(running, confirmed):
    op = ReplicaRemoveOperator(task_id="remove", path=SRC, replica=DST, confirmed=confirmed)
    with pytest.raises(AirflowFailException) as raised:
        op.execute(ctx())
    assert str(raised.value) == (
        f"streamrep: stream replica remove -path {SRC} -replica {DST} was not confirmed: "
        f"set confirm_remove to true to remove the replica"
    )
    assert [link.path for link in running.entry(SRC).replicas] == [DST]


def test_a_corrupt_store_fails_the_task_at_once_in_one_line(running, home):
    """A corrupt store file is the user's to fix: unlike Unavailable (an AirflowException, retried),
    the task fails without retrying, with the one line naming the cluster and the file."""
    path = home.get("sanfrancisco").url[len("embedded:") :]
    home.close()
    for name in (f"{path}-wal", f"{path}-shm"):
        if os.path.exists(name):
            os.remove(name)
    with open(path, "wb") as f:
        f.write(b"\x00garbage, not SQLite\xff" * 512)
    with pytest.raises(AirflowFailException) as raised:
        ReplicaRemoveOperator(task_id="remove", path=SRC, replica=DST, confirmed="True").execute(ctx())
    assert str(raised.value) == f"streamrep: cluster sanfrancisco: cannot open store {path}: file is not a database"
    assert raised.value.__cause__ is None


def test_remove_with_confirmation_removes(running):
    assert ReplicaRemoveOperator(task_id="remove", path=SRC, replica=DST, confirmed="True").execute(ctx()) == []
    assert running.entry(SRC).replicas == ()


# -- the streamrep connection type: its form and its test button -------------------------------
def test_providers_manager_sees_the_connection_form():
    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    behaviour = manager.field_behaviours["streamrep"]
    assert set(behaviour["hidden_fields"]) == {"port", "schema", "password"}
    assert behaviour["relabeling"] == {"host": "Cluster URL", "login": "Act as user"}
    assert behaviour["placeholders"]["host"].startswith("embedded:")
    assert behaviour == StreamrepHook.get_ui_field_behaviour() | {"placeholders": behaviour["placeholders"]}
    hook = manager.hooks["streamrep"]
    assert hook.hook_name == "Streamrep cluster" and hook.connection_testable


def test_connection_test_opens_the_cluster_and_reads_its_catalog(home, monkeypatch):
    from airflow.models.connection import Connection

    url = home.get("newyork").url
    home.store("newyork").catalog_update(STREAM_KIND, "activity", lambda _: {"x": 1})
    conn = Connection(conn_id="streamrep_newyork", conn_type="streamrep", host=url)
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_NEWYORK", conn.as_json())
    assert conn.test_connection() == (True, f"cluster newyork at {url}: store opened, 1 streams")


def test_connection_test_resolves_a_relative_url_as_the_tasks_do(home, monkeypatch):
    """A relative embedded: path is taken from STREAMREP_HOME, as the tasks' stores take it,
    not from the current directory of the process that runs the test button."""
    from airflow.models.connection import Connection

    relative = os.path.relpath(home.get("newyork").url.removeprefix("embedded:"), home.home)
    conn = Connection(conn_id="streamrep_newyork", conn_type="streamrep", host=f"embedded:{relative}")
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_NEWYORK", conn.as_json())
    monkeypatch.chdir("/")
    ok, message = conn.test_connection()
    assert ok, message


def test_connection_test_reports_a_problem_in_one_line_and_creates_nothing(home, tmp_path, monkeypatch):
    from airflow.models.connection import Connection

    def tested(**fields) -> tuple[bool, str]:
        conn = Connection(conn_id="streamrep_tokyo", conn_type="streamrep", **fields)
        monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_TOKYO", conn.as_json())
        return conn.test_connection()

    missing = tmp_path / "nowhere" / "tokyo.db"
    assert tested(host=f"embedded:{missing}") == (
        False,
        f"no cluster store at {missing}; create it with 'streamrep cluster add -url embedded:{missing}'",
    )
    assert not missing.parent.exists()  # the test did not create an empty store
    foreign = tmp_path / "foreign.db"
    sqlite3.connect(foreign).execute("CREATE TABLE t (x)").connection.close()
    ok, message = tested(host=f"embedded:{foreign}")
    assert not ok and "not a streamrep store" in message and "\n" not in message
    assert tested(host="kafka://broker") == (
        False,
        "connection streamrep_tokyo: invalid cluster url 'kafka://broker': expected kafka://host:port[,host:port...]",
    )
    ok, message = tested(host="tokyo.example:9092")
    assert not ok and message.startswith(
        "connection streamrep_tokyo: cluster url 'tokyo.example:9092' is not supported"
    )


def test_connection_test_of_the_common_settings_reads_the_registry(home, monkeypatch):
    from airflow.models.connection import Connection

    conn = Connection(conn_id="streamrep_default", conn_type="streamrep", extra=json.dumps({"home": home.home}))
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_DEFAULT", conn.as_json())
    assert conn.test_connection() == (True, f"registry {home.registry_path} lists 2 clusters: newyork sanfrancisco")
    broken = Path(home.home) / "broken"
    broken.mkdir()
    (broken / "clusters.json").write_text("{not json")
    conn = Connection(conn_id="streamrep_default", conn_type="streamrep", extra=json.dumps({"home": str(broken)}))
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_DEFAULT", conn.as_json())
    ok, message = conn.test_connection()
    assert not ok and message.startswith(f"cannot read cluster registry {broken}/clusters.json")


# -- Kafka clusters through connections: URL, client settings, test button ---------------------
def kafka_connections(home, monkeypatch, tmp_path) -> None:
    """Connections ``streamrep_sanfrancisco`` and ``streamrep_newyork`` for the Kafka clusters of
    ``home`` (URL and client settings, the namespace among them), and a STREAMREP_HOME with no
    registry: the tasks find the clusters through the connections only."""
    for name in ("sanfrancisco", "newyork"):
        info = home.get(name)
        monkeypatch.setenv(
            f"AIRFLOW_CONN_STREAMREP_{name.upper()}",
            json.dumps({"conn_type": "streamrep", "host": info.url, "extra": {"kafka": dict(info.settings)}}),
        )
    monkeypatch.setenv("STREAMREP_HOME", str(tmp_path / "no-registry"))


@pytest.mark.backends("kafka")
def test_kafka_connections_run_the_setup_tasks_on_kafka_with_their_settings(home, admin, tmp_path, monkeypatch):
    """The operators of the manual-setup, autosetup and control DAGs, through Kafka connections
    (the Kafka e2e runs only the manual-setup and gateway DAGs)."""
    from streamrep.airflow.operators import (
        AutosetupCheckOperator,
        ReplicaAddOperator,
        ReplicaPauseOperator,
        ReplicaResumeOperator,
        ReplicaStatusOperator,
        StreamCreateOperator,
        UpstreamAddOperator,
    )

    admin.create_stream(SRC, defaultpartitions=2, ttl=3600)
    kafka_connections(home, monkeypatch, tmp_path)
    hook = StreamrepHook()
    assert hook.clusters.get("newyork").settings == home.get("newyork").settings  # the namespace among them
    hook.close()
    StreamCreateOperator(task_id="create_replica", path=DST, copymetafrom=SRC).execute(ctx())
    ReplicaAddOperator(task_id="add_replica_paused", path=SRC, replica=DST, paused=True).execute(ctx())
    UpstreamAddOperator(task_id="add_upstream", path=DST, upstream=SRC).execute(ctx())
    # what the tasks wrote is in the clusters' namespaces on Kafka, as the CLI's registry sees them
    assert admin.entry(DST).meta == admin.entry(SRC).meta
    assert [(r.replica_path, r.paused) for r in admin.list_replicas(SRC)] == [(DST, True)]
    assert [u.path for u in admin.upstream_links(DST)] == [SRC]
    rows = ReplicaResumeOperator(task_id="resume_replica", path=SRC, replica=DST).execute(ctx())
    assert [(r["replicaPath"], r["paused"]) for r in rows] == [(DST, False)]
    rows = ReplicaPauseOperator(task_id="pause", path=SRC, replica=DST).execute(ctx())  # the control DAG's
    assert [(r["replicaPath"], r["paused"]) for r in rows] == [(DST, True)]
    assert [r["paused"] for r in ReplicaStatusOperator(task_id="replica_list", path=SRC).execute(ctx())] == [True]
    assert [r.paused for r in admin.list_replicas(SRC)] == [True]
    metrics = "/mapr/newyork/metrics"  # the autosetup DAG's first task creates and marks its replica
    assert AutosetupCheckOperator(task_id="check", path=SRC, replica=metrics).execute(ctx())["path"] == SRC
    assert admin.entry(metrics).autosetup_from == admin.entry(SRC).uuid
    assert not os.path.exists(tmp_path / "no-registry" / "clusters.json")


@pytest.mark.backends("kafka")
def test_spark_apps_and_triggers_get_the_kafka_settings_of_the_connections(home, admin, tmp_path, monkeypatch):
    running_replica(admin)
    kafka_connections(home, monkeypatch, tmp_path)
    hook = StreamrepHook()
    hook.clusters.get("sanfrancisco"), hook.clusters.get("newyork")
    derived = Path(hook.registry_home())  # the STREAMREP_HOME of spark-submit
    registry = json.loads((derived / "clusters.json").read_text())
    for name in ("sanfrancisco", "newyork"):
        info = home.get(name)
        assert registry["clusters"][name] == {"url": info.url, "settings": dict(info.settings)}
    assert (derived / "clusters.json").stat().st_mode & 0o077 == 0  # settings may hold credentials
    hook.close()
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, deferrable=True, poke_interval=1)
    from airflow.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(ctx())
    _, kwargs = deferred.value.trigger.serialize()
    row = ReplicaUpToDateTrigger(**json.loads(json.dumps(kwargs))).check()  # as the triggerer rebuilds it
    assert (row["replicaPath"], row["pendingMessages"]) == (DST, 5)


@pytest.mark.backends("kafka")
def test_connection_test_reaches_a_kafka_cluster_and_counts_its_streams(home, admin, monkeypatch):
    from airflow.models.connection import Connection

    admin.create_stream("/mapr/newyork/one")
    admin.create_stream("/mapr/newyork/two")
    info = home.get("newyork")
    conn = Connection(
        conn_id="streamrep_newyork",
        conn_type="streamrep",
        extra=json.dumps({"url": info.url, "kafka": dict(info.settings)}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_NEWYORK", conn.as_json())
    namespace = info.settings["streamrep.namespace"]
    assert conn.test_connection() == (
        True,
        f"cluster newyork at {info.url} (namespace {namespace}): Kafka reached, 2 streams",
    )
    unused = Connection(
        conn_id="streamrep_newyork",
        conn_type="streamrep",
        extra=json.dumps({"url": info.url, "kafka": {**info.settings, "streamrep.namespace": f"{namespace}-unused"}}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_NEWYORK", unused.as_json())
    ok, message = unused.test_connection()
    assert not ok and "holds no streamrep catalog of this installation" in message, message
    ok, message = unused.test_connection()  # the test created none of its internal topics
    assert not ok and "holds no streamrep catalog of this installation" in message, message


def test_connection_test_of_a_kafka_cluster_that_cannot_be_reached_says_why_in_one_line(monkeypatch):
    from airflow.models.connection import Connection

    def tested(**fields) -> tuple[bool, str]:
        conn = Connection(conn_id="streamrep_tokyo", conn_type="streamrep", **fields)
        monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_TOKYO", conn.as_json())
        return conn.test_connection()

    port = _unused_port()
    ok, message = tested(host=f"kafka://127.0.0.1:{port}")
    assert not ok and message.startswith(f"cluster tokyo: Kafka at 127.0.0.1:{port} is unreachable"), message
    assert "\n" not in message
    # client settings reach confluent-kafka unchanged: a bad one is the client's own one-line complaint
    ok, message = tested(
        host=f"kafka://127.0.0.1:{port}", extra=json.dumps({"kafka": {"security.protocol": "carrier-pigeon"}})
    )
    assert not ok and "carrier-pigeon" in message and "security.protocol" in message and "\n" not in message, message


def _unused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "fields, error",
    [
        (
            {"host": "embedded:/tmp/x.db", "extra": {"kafka": {"security.protocol": "SSL"}}},
            "connection streamrep_tokyo: extra.kafka applies only to kafka:// clusters",
        ),
        (
            {"host": "kafka://127.0.0.1:9092", "extra": {"kafka": ["security.protocol=SSL"]}},
            "connection streamrep_tokyo: extra.kafka must be an object of Kafka client settings, "
            'e.g. {"security.protocol": "SASL_SSL"}',
        ),
        (
            {"host": "kafka://127.0.0.1:9092", "extra": {"kafka": {"ssl": {"ca": "x"}}}},
            "connection streamrep_tokyo: extra.kafka must be an object of Kafka client settings, "
            'e.g. {"security.protocol": "SASL_SSL"}',
        ),
        (
            {"host": "kafka://127.0.0.1:9092,", "extra": {}},
            "connection streamrep_tokyo: invalid cluster url 'kafka://127.0.0.1:9092,': expected kafka://host:port[,host:port...]",
        ),
    ],
)
def test_a_malformed_kafka_connection_is_one_line_error(empty_home, monkeypatch, fields, error):
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_TOKYO", json.dumps({"conn_type": "streamrep", **fields}))
    with pytest.raises(InvalidArgument) as raised:
        StreamrepHook().clusters.get("tokyo")
    assert str(raised.value) == error
    with pytest.raises(AirflowFailException, match="^streamrep: connection streamrep_tokyo: "):
        ReplicaRemoveOperator(task_id="remove", path="/mapr/tokyo/a", replica=DST, confirmed=True).execute(ctx())


def test_the_page_hides_the_kafka_bootstrap_servers_from_who_may_not_read_connections():
    from streamrep.airflow.page_access import HIDDEN, hide_locations, location_scrubber

    url = "kafka://k1.example:9092,k2.example:9093"
    tokyo = {
        "name": "tokyo",
        "kind": "kafka",
        "url": url,
        "error": "cluster tokyo: Kafka at k1.example:9092,k2.example:9093 is unreachable "
        "(cannot read topics: Failed to get metadata: Local: Broker transport failure)",
        "streams": [{"path": "/mapr/tokyo/a", "error": "k2.example:9093/2: Connect to ipv4#10.0.0.2 failed"}],
        "gateways": [{"id": "g1", "master": "spark://k1.example:7077"}],
        "links": [{"source": "/mapr/tokyo/a", "replica": DST, "errors": "cannot read k1.example:9092"}],
    }
    hidden = json.dumps(hide_locations(tokyo, location_scrubber([url], "/var/lib/streamrep")))
    for where in ("k1.example", "k2.example", "kafka://", "10.0.0.2"):
        assert where not in hidden, hidden
    assert f"cluster tokyo: Kafka at {HIDDEN} is unreachable" in hidden


# -- gateways: named map indexes, backoff, user errors not retried -----------------------------
def test_gateway_tasks_are_labelled_and_back_off(dagbag):
    gateway = dagbag.dags["stream_gateways"].task_dict["gateway"]
    kwargs = gateway.partial_kwargs
    assert kwargs["map_index_template"] == "{{ task.gateway_id }}"
    assert kwargs["retry_exponential_backoff"] >= 2 and kwargs["retries"] >= 100
    assert timedelta(seconds=1) <= kwargs["retry_delay"] < kwargs["max_retry_delay"] <= timedelta(minutes=10)
    from jinja2 import Environment

    op = StreamGatewayOperator(task_id="gw", cluster="newyork", gateway_id="gw1")
    assert Environment().from_string(kwargs["map_index_template"]).render(task=op) == "gw1"


def test_the_spark_apps_exit_with_a_distinct_status_for_user_errors(capsys):
    for err in (
        NotFound("stream /mapr/a/b does not exist"),
        PermissionDenied("user bob does not have copyperm"),
        InvalidArgument("bad"),
        CorruptStore("cluster a: cannot open store x: file is not a database"),
        RuntimeError("py4j: streamrep.errors.NotFound: stream /mapr/a/b does not exist"),
        RuntimeError("py4j: streamrep.errors.CorruptStore: cluster a: cannot open store x: file is not a database"),
    ):
        assert is_user_error(err) and fail(err) == USER_ERROR_EXIT, err
    for err in (
        Unavailable("cluster a: store x cannot be read"),
        RuntimeError("Java heap space"),
        RuntimeError("wrapped streamrep.errors.Unavailable: cluster a is down"),
    ):
        assert not is_user_error(err) and fail(err) == 1, err
    # A running Spark gateway rides out an Unavailable, also one a task raised (Spark wraps it), and nothing else.
    assert is_outage(Unavailable("down")) and is_outage(RuntimeError("wrapped streamrep.errors.Unavailable: down"))
    assert not any(
        map(
            is_outage,
            (NotFound("gone"), RuntimeError("py4j: streamrep.errors.NotFound: gone"), RuntimeError("Java heap space")),
        )
    )
    assert USER_ERROR_EXIT not in (
        0,
        1,
        2,
        3,
    )  # not success, a crash, argparse's usage error, nor the CLI's internal error
    assert capsys.readouterr().err.splitlines()[0] == "ERROR: stream /mapr/a/b does not exist"


def stand_in_apps(tmp_path, monkeypatch, error: str) -> None:
    """spark_apps whose gateway and copystream end as the real ones do on ``error``: through
    ``streamrep.spark.jobs.fail``, run by the real spark-submit."""
    apps = tmp_path / "apps"
    apps.mkdir()
    script = (
        "import sys\nfrom streamrep import errors\nfrom streamrep.spark.jobs import fail\n"
        f"sys.exit(fail(errors.{error}('stream /mapr/newyork/activity: stand-in failure')))\n"
    )
    for app in ("gateway.py", "copystream.py"):
        (apps / app).write_text(script)
    monkeypatch.setenv("STREAMREP_SPARK_APPS", str(apps))


def test_a_user_error_in_the_spark_app_fails_the_task_without_retry(running, tmp_path, monkeypatch):
    stand_in_apps(tmp_path, monkeypatch, "PermissionDenied")
    with pytest.raises(AirflowFailException) as raised:
        StreamGatewayOperator(task_id="gateway", cluster="newyork", gateway_id="gw1", once=True).execute(ctx())
    assert str(raised.value) == "streamrep gateway: stream /mapr/newyork/activity: stand-in failure"
    assert raised.value.__cause__ is None


def test_an_unavailable_cluster_in_the_spark_app_is_retried(running, tmp_path, monkeypatch):
    """Also: a user's driver Java options win over the warnings-only log config (the default, and
    no INFO line in the task log, are asserted on real Spark runs by test_airflow_spark_operators.py's
    copystream-then-gateway test)."""
    stand_in_apps(tmp_path, monkeypatch, "Unavailable")
    op = StreamCopyOperator(
        task_id="copy", source=SRC, destination=DST, conf={"spark.driver.extraJavaOptions": "-Dx=1"}
    )
    with pytest.raises(AirflowException) as raised:
        op.execute(ctx())
    assert not isinstance(raised.value, AirflowFailException)
    assert str(raised.value) == "streamrep copystream: stream /mapr/newyork/activity: stand-in failure"
    assert op.conf["spark.driver.extraJavaOptions"] == "-Dx=1"  # the user's conf wins


# -- Spark's own logging stays out of the task log ---------------------------------------------
# -- the up-to-date sensor fails at once when waiting cannot succeed ---------------------------
def test_sensor_fails_at_once_when_the_replica_is_removed_while_waiting(running):
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=3600)
    assert sensor.poke(ctx()).is_done is False
    running.remove_replica(SRC, DST)
    with pytest.raises(AirflowFailException, match=f"^streamrep: {DST} is not a replica of {SRC}$"):
        sensor.execute(ctx())


def test_sensor_fails_at_once_in_an_error_state(running, monkeypatch):
    running.clusters.remove("newyork")  # the replica's cluster is gone: REPLICA_STATE_UNEXPECTED
    (row,) = running.list_replicas(SRC)
    assert row.state == ReplicaState.UNEXPECTED.value
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, poke_interval=0.1, timeout=3600)
    with pytest.raises(AirflowFailException) as raised:
        sensor.execute(ctx())
    message = str(raised.value)
    assert message.startswith(f"streamrep: replica {DST} of {SRC} is in state REPLICA_STATE_UNEXPECTED: ")
    assert "newyork" in message and "\n" not in message


def test_deferrable_sensor_fails_at_once_when_paused(running):
    running.pause_replica(SRC, DST)
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, deferrable=True, timeout=3600)
    with pytest.raises(AirflowFailException, match=f"^streamrep: replica {DST} of {SRC} is paused"):
        sensor.execute(ctx())  # before deferring


def test_trigger_fails_the_task_when_the_replica_is_paused_while_it_waits(running):
    trigger = ReplicaUpToDateTrigger(path=SRC, replica=DST, home=running.clusters.home, poll_interval=0.1)
    running.pause_replica(SRC, DST)
    event = first_event(trigger)
    assert event.payload["status"] == "error"
    assert event.payload["message"].startswith(f"streamrep: replica {DST} of {SRC} is paused")
    sensor = ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, deferrable=True)
    with pytest.raises(AirflowFailException, match="is paused"):
        sensor.execute_complete(ctx(), event.payload)


def test_trigger_fails_the_task_in_an_error_state(running):
    trigger = ReplicaUpToDateTrigger(path=SRC, replica=DST, home=running.clusters.home, poll_interval=0.1)
    running.clusters.remove("newyork")
    event = first_event(trigger)
    assert event.payload["status"] == "error"
    assert "is in state REPLICA_STATE_UNEXPECTED" in event.payload["message"]


def test_trigger_keeps_waiting_while_a_gateway_is_missing(running):
    """Waiting for a gateway can succeed: the trigger polls on (stopped here after a while)."""
    trigger = ReplicaUpToDateTrigger(path=SRC, replica=DST, home=running.clusters.home, poll_interval=0.05)
    with pytest.raises(asyncio.TimeoutError):

        async def first():
            async for event in trigger.run():
                return event

        asyncio.run(asyncio.wait_for(first(), timeout=0.5))


# -- the page's authentication, through Airflow's real API app -----------------------------------
@pytest.fixture(scope="module")
def airflow_api(tmp_path_factory):
    """Airflow's own API app (``airflow.api_fastapi.app.create_app``, as the api-server builds
    it: plugins mounted, the simple auth manager with login on, its middlewares), served through
    FastAPI's TestClient, and a real JWT per role from ``POST /auth/token``. TestClient rather
    than an api-server process: the e2e server runs with login off, and a second server per
    session would cost far more than this."""
    from airflow import plugins_manager
    from airflow.api_fastapi.app import create_app, purge_cached_app
    from fastapi.testclient import TestClient

    home = tmp_path_factory.mktemp("airflow-auth")
    patch = pytest.MonkeyPatch()
    from airflow import settings

    plugins = str(home / "plugins")  # empty: the page comes through the package's entry point
    patch.setenv("AIRFLOW__CORE__PLUGINS_FOLDER", plugins)
    patch.setattr(settings, "PLUGINS_FOLDER", plugins)  # read from the config once, at import
    patch.setenv(
        "AIRFLOW__CORE__AUTH_MANAGER", "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
    )
    patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
    patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "ada:admin,olga:op,uma:user,vic:viewer")
    patch.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(home / "passwords.json"))

    def fresh() -> None:
        plugins_manager._get_plugins.cache_clear()
        plugins_manager.get_fastapi_plugins.cache_clear()
        purge_cached_app()

    from airflow.configuration import conf
    from airflow.utils.db import initdb

    # Token checks read the metadata database (revoked tokens): migrate the throwaway one that
    # tests/conftest.py gives in-process Airflow, never another.
    assert conf.get("database", "sql_alchemy_conn").startswith(f"sqlite:///{os.environ['AIRFLOW_HOME']}/")
    assert "streamrep-airflow-unit-" in os.environ["AIRFLOW_HOME"]
    initdb()
    fresh()
    try:
        client = TestClient(create_app(apps="core"))
        assert "/streamrep" in {getattr(route, "path", None) for route in client.app.routes}  # the plugin
        passwords = json.loads((home / "passwords.json").read_text())
        tokens = {}
        for user, password in passwords.items():
            answer = client.post("/auth/token", json={"username": user, "password": password})
            assert answer.status_code == 201, answer.text
            tokens[user] = answer.json()["access_token"]
        yield client, tokens
    finally:
        patch.undo()
        fresh()


def as_user(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def broken_cluster(running):
    """A third cluster whose store file is not a streamrep store: its error names the file."""
    info = running.clusters.add("tokyo")
    running.clusters.close()
    path = Path(info.url.split(":", 1)[1])
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    path.write_bytes(b"not a database" * 100)
    return running, path


@pytest.fixture(scope="module")
def streamrep_dags_in_db(airflow_api):
    """The repository's dags folder parsed and written to the API app's metadata database, as the
    DAG processor would, so that the REST trigger validates params as in production."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = DagBag(dag_folder=str(Path(__file__).resolve().parents[2] / "dags"))
    assert bag.import_errors == {}
    sync_bag_to_db(bag, "dags-folder", None)
    return airflow_api


@pytest.mark.slow
@pytest.mark.parametrize(
    "dag_id, conf, detail",
    [
        (
            "stream_replica_control",
            {"path": "/mapr/sanfrancisco/activity:clicks", "replica": "/mapr/newyork/activity"},
            "Invalid input for param path: '/mapr/sanfrancisco/activity:clicks' is not a stream path: "
            "/mapr/<cluster>/<stream>, with no ':topic'",
        ),
        (
            "stream_replica_monitor",
            {"cluster": "new york"},
            "Invalid input for param cluster: 'new york' is not empty or a cluster name: letters, digits, "
            "'.', '_' or '-', starting with a letter or digit",
        ),
        (
            "stream_replica_control",
            {"path": "/mapr/sanfrancisco/activity", "replica": "/mapr/newyork/activity", "action": "delete"},
            "Invalid input for param action: 'delete' is not one of ['pause', 'remove', 'resume']",
        ),
        (
            "stream_gateways",
            {"cluster": "newyork", "once": "yes"},
            "Invalid input for param once: 'yes' is not of type 'boolean'",
        ),
    ],
)
def test_a_rest_trigger_with_a_bad_param_is_refused_in_one_line(streamrep_dags_in_db, dag_id, conf, detail):
    """Airflow's own validation (the API server's, as the trigger form and REST reach it) says
    what is wrong in one line, without jsonschema's dump of the schema."""
    client, tokens = streamrep_dags_in_db
    answer = client.post(
        f"/api/v2/dags/{dag_id}/dagRuns",
        json={"logical_date": None, "conf": conf},
        headers=as_user(tokens["ada"]),
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == detail


# One bad value per param of the package's DAGs (by name: a name means the same thing in each DAG
# that has it), and words of the one-line error it must get. Each is refused by the task too.
BAD_PARAMS = {
    "path": ("/mapr/sanfrancisco/activity:clicks", "is not a stream path"),
    "replica": ("/mapr/new york/activity", "is not a stream path"),
    "cluster": ("new york", "a cluster name"),
    "action": ("restart", "is not one of"),
    "once": ("yes", "is not of type 'boolean'"),
    "gateways": ("gw1 gw1", "is not empty or gateway names"),  # listed twice: validate_gateways
    "multimaster": ("true", "is not of type 'boolean'"),
    "synchronous": (1, "is not of type 'boolean'"),
    "throttle": ("on", "is not of type 'boolean'"),
    "networkencryption": ("maybe", "is not of type 'boolean'"),
    "networkcompression": ("lzf", "is not one of"),  # MapR's, but Kafka has no LZF codec
    "maxbytespersec": ("lots", "is not bytes a second"),
    "confirm_remove": ("yes", "is not of type 'boolean'"),
    "phase": ("sideways", "is not one of"),
    "timeout": (-1, "is less than the minimum of 0"),
    "force": ("yes", "is not of type 'boolean'"),
    "crc": ("yes", "is not of type 'boolean'"),
    "engine": ("mapreduce", "is not one of"),
}
# Values the docs and the CLI's grammar use, beyond the defaults; each must pass.
GOOD_PARAMS = {
    "maxbytespersec": ["10M", 10_000_000, "1M", "10MB/s", "1.5g", 0],
    "gateways": ["gw1 gw2:7660", "gw1,gw2"],
    "timeout": [0, 30, 86_400],
    "networkcompression": ["off", "zlib", "zstd"],
    "cluster": ["newyork"],
    "engine": ["auto", "local", "spark"],
}
# A bad value whose range depends on its unit, which no JSON schema keyword says: the format
# (parse_max_bytes_per_sec) refuses it.
BAD_BYTES_PER_SEC = ["500", "200G", 999, "0.4", "-1M", "nan", "inf", True]
REQUIRED = {"replica": "/mapr/newyork/activity"}  # the params without a default


def package_dags_params() -> dict[str, list[str]]:
    import streamrep.dags

    return {dag_id: list(getattr(streamrep.dags, dag_id).params) for dag_id in streamrep.dags.__all__}


def trigger(client, token, dag_id: str, conf: dict):
    return client.post(
        f"/api/v2/dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf}, headers=as_user(token)
    )


def required_of(dag_id: str) -> dict:
    import streamrep.dags

    return {k: v for k, v in REQUIRED.items() if k in getattr(streamrep.dags, dag_id).params}


@pytest.mark.slow
@pytest.mark.parametrize("dag_id", sorted(package_dags_params()))
def test_every_param_of_every_dag_refuses_a_bad_value_at_trigger_time(streamrep_dags_in_db, dag_id):
    """Issue 31: each param's schema refuses what its task would refuse, over Airflow's REST
    trigger, with a 400 whose one line names the param; its defaults and good values pass."""
    client, tokens = streamrep_dags_in_db
    names = package_dags_params()[dag_id]
    assert set(names) <= set(BAD_PARAMS), f"{dag_id}: a param without a bad value in this table"
    required = required_of(dag_id)
    for name in names:
        value, words = BAD_PARAMS[name]
        answer = trigger(client, tokens["ada"], dag_id, {**required, name: value})
        assert answer.status_code == 400, (name, answer.text)
        detail = answer.json()["detail"]
        assert detail.startswith(f"Invalid input for param {name}: {value!r} ") and words in detail, detail
        assert "\n" not in detail and len(detail) < 300, detail  # one line, no schema dump
    defaults = trigger(client, tokens["ada"], dag_id, required)
    assert defaults.status_code == 200, defaults.text
    for name in set(names) & set(GOOD_PARAMS):
        for value in GOOD_PARAMS[name]:
            good = trigger(client, tokens["ada"], dag_id, {**required, name: value})
            assert good.status_code == 200, (name, value, good.text)
            assert good.json()["conf"][name] == value


@pytest.mark.slow
def test_maxbytespersec_is_refused_at_trigger_time_exactly_as_the_task_refuses_it(streamrep_dags_in_db):
    from streamrep.model.network import parse_max_bytes_per_sec

    client, tokens = streamrep_dags_in_db
    for value in BAD_BYTES_PER_SEC:
        with pytest.raises(InvalidArgument):
            parse_max_bytes_per_sec(value)  # what the task would do with it
        answer = trigger(client, tokens["ada"], "stream_replica_autosetup", {"maxbytespersec": value})
        assert answer.status_code == 400, (value, answer.text)
        assert answer.json()["detail"].startswith(f"Invalid input for param maxbytespersec: {value!r} is not"), value


@pytest.mark.slow
def test_a_good_trigger_and_other_answers_pass_unchanged(streamrep_dags_in_db):
    client, tokens = streamrep_dags_in_db
    good = client.post(
        "/api/v2/dags/stream_replica_monitor/dagRuns",
        json={"logical_date": None, "conf": {"cluster": "newyork"}},
        headers=as_user(tokens["ada"]),
    )
    assert good.status_code == 200, good.text
    assert good.json()["conf"] == {"cluster": "newyork"}
    missing = client.post(
        "/api/v2/dags/no_such_dag/dagRuns", json={"logical_date": None, "conf": {}}, headers=as_user(tokens["ada"])
    )
    assert missing.status_code == 404


@pytest.mark.slow
def test_page_and_api_refuse_requests_without_a_valid_login(airflow_api, running):
    client, _ = airflow_api
    for route in ("/streamrep/api/clusters", "/streamrep/api/clusters/newyork"):
        assert client.get(route).status_code == 401, route
        assert client.get(route, headers=as_user("not-a-jwt")).status_code == 403, route
        assert "activity" not in client.get(route).text


def whole_topology(client, token) -> tuple[dict, list[dict], str]:
    """The page's data as the browser gathers it: the cluster list, then each cluster."""
    listing = client.get("/streamrep/api/clusters", headers=as_user(token))
    assert listing.status_code == 200, listing.text
    answers = [
        client.get(f"/streamrep/api/clusters/{c['name']}", headers=as_user(token)) for c in listing.json()["clusters"]
    ]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    return listing.json(), [a.json() for a in answers], listing.text + "".join(a.text for a in answers)


@pytest.mark.slow
def test_a_viewer_sees_the_topology_but_no_cluster_location(airflow_api, broken_cluster):
    client, tokens = airflow_api
    admin, tokyo_file = broken_cluster
    home = admin.clusters.home
    for user in ("vic", "uma"):  # viewer and user: no access to connections
        listing, answers, text = whole_topology(client, tokens[user])
        clusters = {c["name"]: c for c in answers}
        assert set(clusters) == {"newyork", "sanfrancisco", "tokyo"}
        assert all(c["url"] is None for c in [*clusters.values(), *listing["clusters"]])
        assert clusters["tokyo"]["error"].startswith("cluster tokyo: cannot open store (hidden)")
        links = {(link["source"], link["replica"]) for c in answers for link in c["links"]}
        assert links == {(SRC, DST)}
        assert home not in text and str(tokyo_file) not in text and "embedded:" not in text


@pytest.mark.slow
def test_who_may_read_connections_sees_the_cluster_locations(airflow_api, broken_cluster):
    client, tokens = airflow_api
    admin, tokyo_file = broken_cluster
    for user in ("olga", "ada"):  # op and admin
        _, answers, _ = whole_topology(client, tokens[user])
        clusters = {c["name"]: c for c in answers}
        assert clusters["newyork"]["url"] == admin.clusters.get("newyork").url
        assert str(tokyo_file) in clusters["tokyo"]["error"]
        [link] = [link for c in answers for link in c["links"]]
        assert (link["source"], link["replica"]) == (SRC, DST) and link["replicaState"].startswith("REPLICA_STATE_")
    assert client.get("/streamrep/", follow_redirects=False).headers["location"] == "../plugin/stream-replication"


@pytest.mark.slow
def test_the_ui_session_cookie_is_a_login_too(airflow_api, running):
    """The page runs inside the UI on the same origin: its requests carry the UI's JWT cookie,
    not a bearer header."""
    client, tokens = airflow_api
    client.cookies.set("_token", tokens["vic"])
    try:
        answer = client.get("/streamrep/api/clusters")
    finally:
        client.cookies.clear()
    assert answer.status_code == 200 and answer.json()["user"] == "vic"


@pytest.mark.slow
def test_only_who_may_trigger_the_gateway_service_starts_or_stops_gateways_from_the_page(airflow_api, running):
    from streamrep.replication import service

    client, tokens = airflow_api
    store = running.clusters.store("newyork")
    assert client.post("/streamrep/api/gateways/newyork/stop").status_code == 401
    viewer = client.post("/streamrep/api/gateways/newyork/stop", headers=as_user(tokens["vic"]))
    assert viewer.status_code == 403 and service.desired_state(store) is None
    assert client.get("/streamrep/api/clusters", headers=as_user(tokens["vic"])).json()["mayControl"] is False
    running.set_cluster_ace("u:alice | u:uma", "newyork")  # the Airflow user acts as themselves
    user = client.post("/streamrep/api/gateways/newyork/stop", headers=as_user(tokens["uma"]))
    assert user.status_code == 200, user.text
    assert user.json()["desired"] == "stopped" and user.json()["by"] == "uma" and user.json()["requestedBy"] == "uma"
    assert service.desired_state(store) == "stopped"
    assert client.get("/streamrep/api/clusters", headers=as_user(tokens["uma"])).json()["mayControl"] is True


def tokyo_authenticating_alice(monkeypatch) -> None:
    """The connection ``streamrep_tokyo``: a Kafka cluster (no broker behind it) whose settings
    authenticate the SASL principal alice."""
    from airflow.models.connection import Connection

    secure = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": "secret",
    }
    kafka = Connection(
        conn_id="streamrep_tokyo",
        conn_type="streamrep",
        host="kafka://127.0.0.1:9",
        extra=json.dumps({"kafka": secure}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_TOKYO", kafka.as_json())


def test_a_connections_act_as_user_that_its_cluster_does_not_authenticate_is_refused(home, monkeypatch):
    """The "Act as user" of streamrep_default names an identity; a cluster whose connection
    authenticates another SASL principal refuses it in one line (no broker is needed to decide)."""
    from airflow.models.connection import Connection

    tokyo_authenticating_alice(monkeypatch)
    for login, refused in (("bob", True), ("alice", False)):
        default = Connection(conn_id="streamrep_default", conn_type="streamrep", login=login)
        monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_DEFAULT", default.as_json())
        admin = StreamrepHook().get_conn()
        if refused:
            with pytest.raises(
                PermissionDenied, match="^cluster tokyo authenticates this client as alice; acting as bob is refused"
            ):
                admin.caller("tokyo")
        else:
            assert admin.caller("tokyo").user == "alice"
        assert admin.caller("newyork").user == login  # an embedded cluster: the connection's user


# -- the Test button as Airflow's UI sends it, through Airflow's real API app ----------------------
def list_test_body(connection: dict) -> dict:
    """What the connections list's Test button posts for a listed connection (Airflow 3.2 and 3.3
    UI alike): every field as listed, blanks as "", and ``port: Number(port)``, 0 for none."""
    return {
        "conn_type": connection["conn_type"],
        "connection_id": connection["connection_id"],
        "description": connection["description"] or "",
        "extra": connection["extra"] or "{}",
        "host": connection["host"] or "",
        "login": connection["login"] or "",
        "password": connection["password"] or "",
        "port": connection["port"] or 0,
        "schema": connection["schema"] or "",
    }


@pytest.fixture
def ui_connections(airflow_api, home, monkeypatch):
    """Airflow's API app (with streamrep's plugin, so its connection-test middleware) and the
    connection test on, a ``test(connection_id)`` that presses the list's Test button, and the
    admin's headers."""
    client, tokens = airflow_api
    monkeypatch.setenv("AIRFLOW__CORE__TEST_CONNECTION", "Enabled")
    headers = as_user(tokens["ada"])

    def test(connection_id: str):
        listed = client.get("/api/v2/connections", headers=headers).json()["connections"]
        (connection,) = [c for c in listed if c["connection_id"] == connection_id]
        return client.post("/api/v2/connections/test", json=list_test_body(connection), headers=headers)

    yield SimpleNamespace(client=client, headers=headers, test=test, home=home)
    for listed in client.get("/api/v2/connections", headers=headers).json()["connections"]:
        client.delete(f"/api/v2/connections/{listed['connection_id']}", headers=headers)


@pytest.mark.slow
def test_a_form_saved_connection_tests_green_from_the_list_and_names_its_url(ui_connections):
    ui = ui_connections
    url = ui.home.get("newyork").url
    folder = sorted(os.listdir(os.path.dirname(url.removeprefix("embedded:"))))
    # as the add form saves it: the hidden port, schema and password are not sent
    body = {"connection_id": "streamrep_newyork", "conn_type": "streamrep", "host": url}
    assert ui.client.post("/api/v2/connections", json=body, headers=ui.headers).status_code == 201
    # the list's body says port 0, which Airflow 3.3.2 alone refuses (connection_test.py says why)
    answer = ui.test("streamrep_newyork")
    assert answer.status_code == 200, answer.text
    # Airflow tests under a random connection id: the message names the URL, not that id
    assert answer.json() == {"status": True, "message": f"cluster at {url}: store opened, 0 streams"}
    assert sorted(os.listdir(os.path.dirname(url.removeprefix("embedded:")))) == folder  # nothing created


@pytest.mark.slow
def test_a_mistyped_connection_tests_red_with_its_reason_in_one_line(ui_connections, tmp_path):
    ui = ui_connections
    missing = tmp_path / "typo" / "newyork.db"
    body = {"connection_id": "streamrep_newyork", "conn_type": "streamrep", "host": f"embedded:{missing}"}
    assert ui.client.post("/api/v2/connections", json=body, headers=ui.headers).status_code == 201
    answer = ui.test("streamrep_newyork")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "status": False,
        "message": f"no cluster store at {missing}; create it with 'streamrep cluster add -url embedded:{missing}'",
    }
    assert not missing.parent.exists()
    # edited as the edit form saves it (only the changed field): a URL Airflow's form cannot mean
    patch = {"connection_id": "streamrep_newyork", "conn_type": "streamrep", "host": "kafka://broker"}
    edited = ui.client.patch("/api/v2/connections/streamrep_newyork?update_mask=host", json=patch, headers=ui.headers)
    assert edited.status_code == 200, edited.text
    assert ui.test("streamrep_newyork").json() == {
        "status": False,
        "message": "invalid cluster url 'kafka://broker': expected kafka://host:port[,host:port...]",
    }


@pytest.mark.slow
def test_a_kafka_connection_to_a_closed_port_tests_red_in_one_line(ui_connections):
    ui = ui_connections
    (port,) = kafka_local.free_ports(1)  # nothing listens there
    body = {"connection_id": "streamrep_boston", "conn_type": "streamrep", "host": f"kafka://127.0.0.1:{port}"}
    assert ui.client.post("/api/v2/connections", json=body, headers=ui.headers).status_code == 201
    result = ui.test("streamrep_boston").json()
    assert result["status"] is False and "\n" not in result["message"]
    assert result["message"].startswith(f"cluster kafka://127.0.0.1:{port}: Kafka at 127.0.0.1:{port} is unreachable")


def test_the_middleware_drops_port_zero_of_streamrep_tests_only():
    from streamrep.airflow.connection_test import without_port_zero

    streamrep = {"conn_type": "streamrep", "connection_id": "streamrep_a", "port": 0, "host": "embedded:a.db"}
    assert json.loads(without_port_zero(json.dumps(streamrep).encode())) == {
        k: v for k, v in streamrep.items() if k != "port"
    }
    for unchanged in (
        json.dumps({**streamrep, "conn_type": "postgres"}).encode(),  # another type keeps Airflow's check
        json.dumps({**streamrep, "port": 9092}).encode(),
        b"not json",
    ):
        assert without_port_zero(unchanged) == unchanged
