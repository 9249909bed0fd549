"""StreamCopyOperator and StreamGatewayOperator: SparkSubmitOperator subclasses running the real
spark_apps with real spark-submit (local master) on real embedded clusters."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from airflow_support import DST, SRC, ctx

from streamrep.airflow.spark_operators import StreamCopyOperator, StreamGatewayOperator
from streamrep.client import Consumer, Producer
from streamrep.replication.status import replica_status
from streamrep.spark.command import LOG_JAVA_OPTIONS


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)  # exercise the local fallback


def produce(admin, values):
    with Producer(admin) as producer:
        for value in values:
            producer.send(f"{SRC}:clicks", value.encode(), key=value.encode())


def held(admin, path) -> Counter:
    consumer = Consumer(f"{path}:clicks", from_start=True, admin=admin)
    values: Counter = Counter()
    while batch := consumer.poll(1000, timeout=0.2):
        values.update(m.value.decode() for m in batch)
    return values


@pytest.fixture
def source(admin):
    admin.create_stream(SRC, defaultpartitions=2)
    admin.create_topic(SRC, "clicks")
    produce(admin, [f"m{i}" for i in range(20)])
    return admin


def test_operators_are_spark_submit_operators_with_template_fields():
    for op in (StreamCopyOperator, StreamGatewayOperator):
        assert issubclass(op, SparkSubmitOperator)
        assert set(SparkSubmitOperator.template_fields) <= set(op.template_fields)
        assert ":param" in op.__doc__ and ":return:" in op.__doc__
    assert {"source", "destination"} <= set(StreamCopyOperator.template_fields)
    assert {"cluster", "gateway_id", "once"} <= set(StreamGatewayOperator.template_fields)


def test_copystream_user_errors_fail_before_spark(source, monkeypatch):
    with pytest.raises(AirflowFailException, match="^streamrep: stream /mapr/sanfrancisco/nope does not exist$"):
        StreamCopyOperator(task_id="copy", source="/mapr/sanfrancisco/nope", destination=DST).execute(ctx())
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    with pytest.raises(AirflowFailException, match="user bob has none of consumeperm, copyperm"):
        StreamCopyOperator(task_id="copy", source=SRC, destination=DST).execute(ctx())


def test_an_app_error_line_becomes_the_task_error(source, tmp_path, monkeypatch):
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "copystream.py").write_text(
        "import sys\nprint('ERROR: stream /mapr/newyork/activity is on fire', file=sys.stderr)\nsys.exit(1)\n"
    )
    monkeypatch.setenv("STREAMREP_SPARK_APPS", str(apps))
    with pytest.raises(AirflowException) as raised:
        StreamCopyOperator(task_id="copy", source=SRC, destination=DST).execute(ctx())
    assert str(raised.value) == "streamrep copystream: stream /mapr/newyork/activity is on fire"
    assert not isinstance(raised.value, AirflowFailException)  # a Spark failure is retried


@pytest.mark.slow
def test_copystream_then_a_gateway_retry_on_spark_move_each_message_once_with_a_quiet_task_log(source, capfd):
    """One Spark copy and one Spark gateway serve several assertions (each Spark start costs a
    minute or more on the CI machine):

    - the copy creates the destination and copies everything; a retry copies nothing and starts
      no Spark;
    - a retry of a gateway task finds the positions the copy stored with its messages and applies
      only what followed, exactly once, withdrawing its heartbeat on exit;
    - the task log (the provider logs every line spark-submit prints) has the gateway's progress
      line but none of Spark's INFO lines: the driver gets the warnings-only log config.
    """
    admin = source
    copy = StreamCopyOperator(task_id="copy", source=SRC, destination=DST)
    copied = copy.execute(ctx())
    assert copy.conf["spark.driver.extraJavaOptions"] == LOG_JAVA_OPTIONS
    assert Path(LOG_JAVA_OPTIONS.split("file:", 1)[1]).is_file()
    assert copied["messages"] == 20 and copied["destination"] == DST
    ends = {
        f"clicks:{p}": admin.clusters.store("sanfrancisco").offsets(admin.entry(SRC).uuid, "clicks", p)[1]
        for p in range(2)
    }
    assert copied["positions"] == ends
    assert held(admin, DST) == Counter(f"m{i}" for i in range(20))
    again = StreamCopyOperator(task_id="copy", source=SRC, destination=DST).execute(ctx(2))
    assert again["messages"] == 0 and again["positions"] == ends  # no Spark: nothing to copy
    assert held(admin, DST) == Counter(f"m{i}" for i in range(20))

    # the copied stream becomes the replica (the manual steps: copystream, then the gateways)
    admin.add_replica(SRC, DST)
    admin.add_upstream(DST, SRC)
    produce(admin, [f"n{i}" for i in range(5)])
    capfd.readouterr()  # the gateway's log only, from here
    op = StreamGatewayOperator(task_id="gateway", cluster="newyork", gateway_id="gw1", once="True")
    assert op.execute(ctx(2)) == {"cluster": "newyork", "gateway": "gw1", "once": True}
    assert held(admin, DST) == Counter([f"m{i}" for i in range(20)] + [f"n{i}" for i in range(5)])
    assert admin.clusters.store("newyork").catalog_list("gateway-heartbeat") == {}  # withdrawn on exit
    assert admin.list_replicas(SRC)[0].state == "REPLICA_STATE_REPLICATING"
    assert replica_status(admin, SRC)[0].pending_messages == 0

    log = capfd.readouterr()
    lines = (log.out + log.err).splitlines()
    submitted = [line for line in lines if "spark_submit" in line]
    assert len(submitted) > 2, lines[-20:]
    assert not [line for line in submitted if " INFO " in line], submitted[:20]
    progress = [line for line in submitted if "gateway gw1: 5 messages in " in line]
    assert len(progress) == 1, submitted


def test_gateway_fails_before_spark_for_an_unknown_cluster(source):
    with pytest.raises(AirflowFailException, match="^streamrep: cluster tokyo is not known"):
        StreamGatewayOperator(task_id="gateway", cluster="tokyo", once=True).execute(ctx())


def test_a_gateway_task_can_serve_its_metrics_from_the_driver(empty_home):
    from streamrep.airflow.hook import StreamrepHook

    hook = StreamrepHook()
    try:
        args = StreamGatewayOperator(task_id="gw", cluster="newyork", gateway_id="gw1", metrics_port=9464).app_args(
            hook
        )
        assert args[args.index("--metrics-port") + 1] == "9464"
        assert "--metrics-port" not in StreamGatewayOperator(task_id="gw", cluster="newyork").app_args(hook)
    finally:
        hook.close()


def test_gateway_permission_and_name_fail_before_spark(source, monkeypatch):
    """Issue 21, item 11: what the app would refuse after Spark's start is refused by the task
    itself, in a second, as a failure that is not retried."""
    source.set_cluster_ace("u:alice", "newyork")
    with pytest.raises(AirflowFailException, match="^streamrep: invalid gateway name 'a/b'"):
        StreamGatewayOperator(task_id="gateway", cluster="newyork", gateway_id="a/b", once=True).execute(ctx())
    for interval in (0, "0", -1, "nan", 3601, "soon"):  # 0 would poll the clusters in a busy loop
        with pytest.raises(AirflowFailException, match="^streamrep: interval must be a number of seconds above 0"):
            StreamGatewayOperator(task_id="gateway", cluster="newyork", interval=interval).execute(ctx())
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    with pytest.raises(AirflowFailException, match="^streamrep: user bob .*newyork"):
        StreamGatewayOperator(task_id="gateway", cluster="newyork", once=True).execute(ctx())


def test_the_gateway_app_refuses_an_interval_of_zero_in_one_line_before_spark():
    """Issue 29, item 9: the app as spark-submit runs it (no Spark is started for a bad argument)."""
    import subprocess
    import sys
    from pathlib import Path

    app = Path(__file__).resolve().parents[2] / "spark_apps" / "gateway.py"
    done = subprocess.run(
        [sys.executable, str(app), "--cluster", "newyork", "--interval", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.strip() == "ERROR: interval must be a number of seconds above 0 and at most 3600, not 0.0"


@pytest.fixture
def stub_gateway_app(tmp_path, monkeypatch) -> Path:
    """A ``gateway.py`` that notes each spark-submit that ran it (its arguments, one line) and
    exits 0. Real spark-submit runs it; a real continuous gateway would add a Spark start (43-69 s
    under load) and a ``gateway stop`` to end it, and its run on Spark is covered by
    ``test_copystream_then_a_gateway_retry_on_spark_move_each_message_once_with_a_quiet_task_log``.
    What this checks is only whether the task reaches spark-submit."""
    apps, submitted = tmp_path / "apps", tmp_path / "submitted"
    apps.mkdir()
    (apps / "gateway.py").write_text(
        f"import sys\nwith open({str(submitted)!r}, 'a') as f:\n    f.write(' '.join(sys.argv[1:]) + '\\n')\n"
    )
    monkeypatch.setenv("STREAMREP_SPARK_APPS", str(apps))
    return submitted


@pytest.fixture
def linked(source):
    source.create_stream(DST, copymetafrom=SRC)
    source.add_replica(SRC, DST)
    source.add_upstream(DST, SRC)
    return source


def test_stream_gateways_on_a_stopped_cluster_ends_in_seconds_without_spark(
    linked, stub_gateway_app, streamrep_run_dag
):
    """Issue 31: the DAG used to start Spark for 122 s to say "not started"; its gateway tasks
    are now skipped before spark-submit, with the stop's reason, and the run succeeds."""
    import time

    from streamrep.dags.stream_gateways import dag
    from streamrep.model.gateways import DesiredState
    from streamrep.replication import service

    service.request(linked, "newyork", DesiredState.STOPPED)
    started = time.monotonic()
    result = streamrep_run_dag(dag, {"cluster": "newyork", "gateways": "gw1 gw2"})
    took = time.monotonic() - started
    assert result.state == "success" and result.tasks == {"plan_gateways": "success", "gateway": "skipped"}
    assert not stub_gateway_app.exists()  # no spark-submit ran
    assert took < 20, took  # dag.test's own start included; Spark's alone took 43-122 s
    op = StreamGatewayOperator(task_id="gateway", cluster="newyork", gateway_id="gw1")
    with pytest.raises(AirflowSkipException) as skipped:
        op.execute(ctx())
    assert str(skipped.value).startswith("gateway gw1 not started: the gateways of cluster newyork are stopped")
    assert str(skipped.value).endswith("start them with 'streamrep gateway start -cluster newyork'")
    assert not stub_gateway_app.exists()


def test_stream_gateways_on_a_started_or_unmanaged_cluster_still_submits(linked, stub_gateway_app, streamrep_run_dag):
    from streamrep.dags.stream_gateways import dag
    from streamrep.model.gateways import DesiredState
    from streamrep.replication import service

    assert service.desired_state(linked.clusters.store("newyork")) is None  # not managed
    unmanaged = streamrep_run_dag(dag, {"cluster": "newyork", "gateways": "gw1"})
    assert unmanaged.tasks == {"plan_gateways": "success", "gateway": "success"}, unmanaged
    service.request(linked, "newyork", DesiredState.RUNNING)
    op = StreamGatewayOperator(task_id="gateway", cluster="newyork", gateway_id="gw2")
    assert op.execute(ctx()) == {"cluster": "newyork", "gateway": "gw2", "once": False}
    service.request(linked, "newyork", DesiredState.STOPPED)  # a drain (once) ignores the stop, as the app does
    StreamGatewayOperator(task_id="gateway", cluster="newyork", gateway_id="gw3", once=True).execute(ctx())
    submitted = stub_gateway_app.read_text().splitlines()
    assert [line.split("--id ")[1].split()[0] for line in submitted] == ["gw1", "gw2", "gw3"], submitted
    assert all(line.startswith("--cluster newyork ") for line in submitted) and submitted[2].endswith("--once")
