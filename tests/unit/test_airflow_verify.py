"""Issue 32 in Airflow: ``StreamDiffOperator`` (diffstreams and diffstreamswithcrc, in the task or on
Spark), ``ReplicaLinksOperator``, the ``verify`` step of both setup DAGs and the scheduled
``stream_replica_verify`` DAG. Real embedded clusters, the real compare, real spark-submit."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.execution_time.context import OutletEventAccessors
from airflow_support import DST, SRC, ctx

from streamrep.airflow.assets import REPLICAS_ALIAS, asset_uri
from streamrep.airflow.operators import ReplicaLinksOperator
from streamrep.airflow.spark_operators import StreamDiffOperator
from streamrep.client import Producer
from streamrep.model.message import Message
from streamrep.replication import verification
from streamrep.replication.copy import copy_stream
from streamrep.replication.ops import MANIFEST, OPS_FOR_DST, read_manifest

OTHER = "/mapr/newyork/other"


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a task without an outdir writes
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)


@pytest.fixture
def linked(admin):
    """SF (topic clicks, 2 partitions, 12 messages) and its replica NY, copied, paused: the state
    the setup DAGs' verify step finds."""
    admin.create_stream(SRC, defaultpartitions=2, ttl=0)
    admin.create_topic(SRC, "clicks")
    with Producer(admin) as producer:
        for i in range(12):
            producer.send(f"{SRC}:clicks", f"m{i}".encode(), key=f"k{i}".encode())
    admin.create_stream(DST, copymetafrom=SRC)
    admin.add_replica(SRC, DST, paused=True)
    admin.add_upstream(DST, SRC)
    copy_stream(admin, SRC, DST)
    return admin


def plant_extra(admin, path: str = DST) -> None:
    """A message of its own in the replica, written as a plain client of its cluster would."""
    sp = admin.path(path)
    admin.store(sp).append(admin.entry(sp).uuid, "clicks", {0: [Message(b"planted", b"own")]})


def events_of(context) -> list:
    return list(context["outlet_events"][REPLICAS_ALIAS].asset_alias_events)


def diff_op(**kwargs) -> StreamDiffOperator:
    return StreamDiffOperator(**{"task_id": "verify", "source": SRC, "destination": DST, "engine": "local", **kwargs})


def fails_with(operator, text: str, context=None) -> str:
    with pytest.raises(AirflowFailException) as raised:
        operator.execute(context or ctx())
    message = str(raised.value)
    assert text in message, message
    assert "\n" not in message and raised.value.__cause__ is None
    return message


# -- the operator, in the task -------------------------------------------------------------------


def test_the_operator_is_a_spark_submit_operator_with_its_fields_templated():
    assert issubclass(StreamDiffOperator, SparkSubmitOperator)
    assert set(SparkSubmitOperator.template_fields) <= set(StreamDiffOperator.template_fields)
    assert {"source", "destination", "outdir", "crc", "first_exit", "engine", "fail_on_difference"} <= set(
        StreamDiffOperator.template_fields
    )


@pytest.mark.parametrize("crc", [False, True], ids=["diffstreams", "diffstreamswithcrc"])
def test_a_faithful_replica_is_the_same_recorded_and_its_ops_written(linked, tmp_path, crc):
    outdir = tmp_path / "ops"
    row = diff_op(outdir=str(outdir), crc=crc).execute(ctx())
    assert row["same"] is True and row["engine"] == "local" and row["compared"] == 24
    assert row["outdir"] == str(outdir) and row["summary"].startswith("same: 24 messages compared")
    assert read_manifest(outdir / OPS_FOR_DST)["same"] is True
    (done,) = verification.last(linked, DST).values()
    assert (done.same, done.engine, done.command) == (True, "local", "diffstreamswithcrc" if crc else "diffstreams")
    assert done.by == "alice" and done.counts["compared"] == 24


@pytest.mark.parametrize("crc", [False, True], ids=["diffstreams", "diffstreamswithcrc"])
def test_a_planted_difference_fails_the_task_in_one_line_and_is_recorded(linked, tmp_path, crc):
    plant_extra(linked)
    outdir = tmp_path / "ops"
    message = fails_with(diff_op(outdir=str(outdir), crc=crc), "differ: 0 missing in dst, 1 extra in dst")
    command = "diffstreamswithcrc" if crc else "diffstreams"
    assert message.startswith(f"streamrep {command}: {SRC} and {DST} differ: ")
    assert message.endswith(f"; ops in {outdir}")
    assert read_manifest(outdir / OPS_FOR_DST)["counts"]["extra in dst"] == 1  # written before failing
    (done,) = verification.last(linked, DST).values()
    assert done.same is False and done.counts["extraInDst"] == 1


def test_behind_is_not_a_difference(linked):
    with Producer(linked) as producer:  # the replica is paused: these are in flight
        for i in range(5):
            producer.send(f"{SRC}:clicks", b"later", key=str(i).encode())
    row = diff_op().execute(ctx())
    assert row["same"] is True and row["dstBehind"] == 5


def test_without_an_outdir_a_fresh_folder_is_named_in_the_result(linked, tmp_path):
    from types import SimpleNamespace

    ti = SimpleNamespace(try_number=2, dag_id="stream_replica_verify", task_id="verify", map_index=3)
    row = diff_op().execute({"ti": ti})
    folder = Path(row["outdir"])
    assert folder.name.startswith("streamrep-diffstreams-stream_replica_verify.verify.3.2-")
    assert (folder / OPS_FOR_DST / MANIFEST).is_file()
    again = diff_op().execute({"ti": ti})
    assert again["outdir"] != row["outdir"]  # a retry never meets a folder a try filled


def test_a_difference_can_be_reported_without_failing_and_the_event_carries_it(linked):
    plant_extra(linked)
    context = {**ctx(), "outlet_events": OutletEventAccessors()}
    row = diff_op(fail_on_difference=False, outlets=[REPLICAS_ALIAS]).execute(context)
    assert row["same"] is False and row["extraInDst"] == 1
    (event,) = events_of(context)
    assert event.dest_asset_key.uri == asset_uri(DST) and event.source_alias_name == REPLICAS_ALIAS.name
    assert event.extra["verification"] == row and (event.extra["replica"], event.extra["source"]) == (DST, SRC)
    assert event.extra["pendingMessages"] == 0 and event.extra["isUptodate"] is True  # a caught-up event's keys


def test_a_pair_that_is_not_linked_is_compared_but_not_recorded(linked):
    linked.create_stream(OTHER, copymetafrom=SRC)
    row = diff_op(destination=OTHER, fail_on_difference=False).execute(ctx())
    assert row["missingInDst"] == 12
    assert verification.last(linked, OTHER) == {}


def test_bad_input_fails_in_one_line_and_writes_nothing(linked, tmp_path, monkeypatch):
    outdir = tmp_path / "ops"
    fails_with(diff_op(source="/mapr/sanfrancisco/nope", outdir=str(outdir)), "stream /mapr/sanfrancisco/nope")
    fails_with(diff_op(destination=SRC, outdir=str(outdir)), "cannot compare stream")
    fails_with(diff_op(engine="mapreduce", outdir=str(outdir)), "engine must be one of auto, local, spark")
    assert not outdir.exists()
    outdir.mkdir()
    (outdir / "left-over").write_text("x")
    fails_with(diff_op(outdir=str(outdir)), f"output directory {outdir} exists and is not empty")
    assert [p.name for p in outdir.iterdir()] == ["left-over"]
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    fails_with(diff_op(outdir=str(tmp_path / "bob")), "user bob has none of consumeperm, copyperm")
    assert not (tmp_path / "bob").exists()
    assert verification.last(linked, DST) == {}


# -- on Spark --------------------------------------------------------------------------------------


def stub_app(tmp_path, monkeypatch, body: str) -> Path:
    """``spark_apps/diffstreams.py`` replaced by ``body`` (a real spark-submit runs it)."""
    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "diffstreams.py").write_text(body)
    monkeypatch.setenv("STREAMREP_SPARK_APPS", str(apps))
    return apps


def test_on_spark_the_apps_json_line_is_the_result(linked, tmp_path, monkeypatch):
    """The app's contract (one JSON line on stdout, exit 0 whether same or not) through real
    spark-submit; the row the stub prints is what the local compare returns, so the record is too."""
    local = diff_op(outdir=str(tmp_path / "local")).execute(ctx())
    printed = {k: v for k, v in local.items() if k != "engine"}
    apps = stub_app(
        tmp_path,
        monkeypatch,
        "import json, sys\nargs = sys.argv[1:]\nopen(sys.argv[0] + '.args', 'w').write(' '.join(args))\n"
        f"print('noise')\nprint(json.dumps({printed!r}))\n",
    )
    row = diff_op(engine="spark", crc=True, first_exit=True, outdir=str(tmp_path / "spark")).execute(ctx())
    assert row == {**printed, "engine": "spark"}
    args = (apps / "diffstreams.py.args").read_text()
    assert args.startswith(f"--src {SRC} --dst {DST} --outdir {tmp_path / 'spark'} --home ")
    assert args.endswith("--crc --first-exit")
    done = verification.last(linked, DST)
    assert [(d.engine, d.command) for d in done.values()] == [("spark", "diffstreamswithcrc")]


def test_on_spark_an_app_error_is_one_line_and_not_retried(linked, tmp_path, monkeypatch):
    stub_app(
        tmp_path, monkeypatch, "import sys\nprint('ERROR: the replica is on fire', file=sys.stderr)\nsys.exit(65)\n"
    )
    with pytest.raises(AirflowFailException, match="^streamrep diffstreams: the replica is on fire$"):
        diff_op(engine="spark").execute(ctx())


# -- the links of a cluster ------------------------------------------------------------------------


def test_the_links_of_a_cluster_are_its_streams_replicas(linked):
    linked.create_stream(OTHER, copymetafrom=SRC)
    linked.add_replica(SRC, OTHER, paused=True)
    linked.create_stream("/mapr/newyork/solo")
    found = ReplicaLinksOperator(task_id="links", cluster="sanfrancisco").execute(ctx())
    assert found == [{"source": SRC, "destination": DST}, {"source": SRC, "destination": OTHER}]
    assert ReplicaLinksOperator(task_id="links", cluster="newyork").execute(ctx()) == []
    assert ReplicaLinksOperator(task_id="links").execute(ctx()) == found  # every cluster
    with pytest.raises(AirflowFailException, match="^streamrep: .*nowhere"):
        ReplicaLinksOperator(task_id="links", cluster="nowhere").execute(ctx())
    json.dumps(found)  # an XCom


# -- the DAGs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dag_id", ["stream_replica_manual_setup", "stream_replica_autosetup"])
def test_the_setup_dags_verify_the_copy_in_the_task_before_replication_resumes(dag_id):
    import importlib

    dag = importlib.import_module(f"streamrep.dags.{dag_id}").dag
    verify = dag.task_dict["verify"]
    assert isinstance(verify, StreamDiffOperator)
    assert (verify.source, verify.destination) == ("{{ params.path }}", "{{ params.replica }}")
    assert verify.engine == "auto" and verify.fail_on_difference is True and verify.retries >= 1
    assert verify.command == "diffstreamswithcrc"  # finds what the full compare finds, in flat memory
    assert verify.upstream_task_ids == {"copystream"}
    assert "resume_replica" in verify.get_flat_relative_ids(upstream=False)
    assert not verify.outlets  # the setup's event is wait_caught_up's


def test_the_verify_dag_maps_one_spark_compare_per_link_daily():
    from streamrep.dags.stream_replica_verify import dag

    assert dag.schedule == timedelta(days=1)
    assert dag.catchup is False and dag.max_active_runs == 1 and dag.is_paused_upon_creation is True
    assert {name: dag.params[name] for name in dag.params} == {"cluster": "", "crc": True, "engine": "spark"}
    links, verify = dag.task_dict["list_links"], dag.task_dict["verify"]
    assert isinstance(links, ReplicaLinksOperator) and links.cluster == "{{ params.cluster }}"
    assert verify.operator_class is StreamDiffOperator and verify.upstream_task_ids == {"list_links"}
    assert verify.partial_kwargs["engine"] == "{{ params.engine }}"
    assert verify.partial_kwargs["outlets"] == [REPLICAS_ALIAS]
    assert verify.partial_kwargs["map_index_template"] == "{{ task.destination }}"


def test_the_verify_dag_records_every_link_and_emits_each_replicas_event(linked, streamrep_run_dag):
    """One real run (``dag.test``), both links the same, in the task (engine local: the Spark run is
    the e2e test's): every mapped task succeeds, records its link, and emits its replica's event."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from streamrep.dags.stream_replica_verify import dag

    linked.create_stream(OTHER, copymetafrom=SRC)
    linked.add_replica(SRC, OTHER, paused=True)
    copy_stream(linked, SRC, OTHER)
    result = streamrep_run_dag(dag, {"cluster": "sanfrancisco", "engine": "local"})
    assert result.state == "success" and result.tasks == {"list_links": "success", "verify": "success"}, result
    for replica in (DST, OTHER):
        (done,) = verification.last(linked, replica).values()
        assert done.same and done.command == "diffstreamswithcrc" and done.engine == "local"
    with create_session() as session:
        events = session.query(AssetEvent).all()
        mine = [e for e in events if e.extra.get("verification", {}).get("src") == SRC]
    assert sorted(e.extra["replica"] for e in mine) == [DST, OTHER]
    assert all(e.extra["verification"]["same"] is True for e in mine)


@pytest.mark.slow
def test_a_setup_run_whose_copy_differs_fails_at_verify_and_never_resumes(admin, streamrep_run_dag):
    """The whole manual setup DAG (copystream on real Spark): the replica already held a message of
    its own, which the copy keeps, so verify fails the run and replication stays paused."""
    from streamrep.dags.stream_replica_manual_setup import dag

    admin.create_stream(SRC, defaultpartitions=2, ttl=0)
    admin.create_topic(SRC, "clicks")
    with Producer(admin) as producer:
        for i in range(8):
            producer.send(f"{SRC}:clicks", f"m{i}".encode(), key=f"k{i}".encode())
    admin.create_stream(DST, copymetafrom=SRC)
    admin.create_topic(DST, "clicks", 2)
    plant_extra(admin)
    result = streamrep_run_dag(dag, {"path": SRC, "replica": DST})
    assert result.state == "failed", result
    assert result.tasks["copystream"] == "success" and result.tasks["verify"] == "failed", result
    assert result.tasks["resume_replica"] == "upstream_failed", result
    (link,) = admin.replica_links(SRC)
    assert link.paused is True
    (done,) = verification.last(admin, DST).values()
    assert done.same is False and done.counts["extraInDst"] == 1 and done.counts["missingInDst"] == 0


def test_import_repairs_what_the_diff_found_once(linked, tmp_path):
    """diff (differences reported, not failed), import its opsForDst, diff again: the same; a second
    import applies nothing. Bad input is one line."""
    from streamrep.airflow.operators import StreamImportOperator

    linked.create_stream(OTHER, copymetafrom=SRC)  # not a replica: all 12 are missing there
    found = diff_op(destination=OTHER, fail_on_difference=False, outdir=str(tmp_path / "ops")).execute(ctx())
    assert found["same"] is False and found["missingInDst"] == 12
    ops = f"{found['outdir']}/{OPS_FOR_DST}"
    done = StreamImportOperator(task_id="import", folder=ops, destination=OTHER).execute(ctx())
    assert done["applied"] == 12 and done["leftForAPerson"] == 0 and "\n" not in done["summary"]
    assert diff_op(destination=OTHER, outdir=str(tmp_path / "again")).execute(ctx())["same"] is True
    again = StreamImportOperator(task_id="import", folder=ops, destination=OTHER).execute(ctx())
    assert again["applied"] == 0 and again["alreadyPresent"] == 12
    fails_with(StreamImportOperator(task_id="import", folder=str(tmp_path), destination=OTHER), "ops directory")
    fails_with(StreamImportOperator(task_id="import", folder=ops, destination=DST), OTHER)  # made for another
