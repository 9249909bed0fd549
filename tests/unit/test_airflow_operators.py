"""The streamrep operators and hook on real embedded clusters (a tmp STREAMREP_HOME): success,
failure with streamrep's one-line message, and retry (a second run finds the state it wanted)."""

from __future__ import annotations

import json
import os

import pytest
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSkipException,
)
from airflow_support import DST, SRC, ctx

from streamrep.airflow import rows as presented
from streamrep.airflow.hook import StreamrepHook, cluster_conn_id, user_errors
from streamrep.airflow.operators import (
    AutosetupCheckOperator,
    GatewayPlanOperator,
    ReplicaAddOperator,
    ReplicaEditOperator,
    ReplicaLagMonitorOperator,
    ReplicaPauseOperator,
    ReplicaRemoveOperator,
    ReplicaResumeOperator,
    ReplicaStatusOperator,
    ReplicaVerifyOperator,
    StreamCreateOperator,
    UpstreamAddOperator,
    UpstreamVerifyOperator,
)
from streamrep.client import Producer
from streamrep.errors import InvalidArgument, NotFound, Unavailable
from streamrep.replication.copy import copy_stream


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch):
    """A tmp STREAMREP_HOME; operators act as alice (group eng), like the ``admin`` fixture, and
    no streamrep connection is defined."""
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")
    for key in list(os.environ):
        if key.startswith("AIRFLOW_CONN_STREAMREP"):
            monkeypatch.delenv(key)


@pytest.fixture
def source(admin):
    """/mapr/sanfrancisco/activity with 2 partitions and 10 messages in topic clicks."""
    admin.create_stream(SRC, defaultpartitions=2, ttl=0)
    admin.create_topic(SRC, "clicks")
    with Producer(admin) as producer:
        for i in range(10):
            producer.send(f"{SRC}:clicks", f"m{i}".encode(), key=f"k{i}".encode())
    return SRC


@pytest.fixture
def replicated(admin, source):
    """The seeds' manual steps 1-5 done on the admin API: created, added paused, upstream added."""
    admin.create_stream(DST, copymetafrom=SRC)
    admin.add_replica(SRC, DST, paused=True)
    admin.add_upstream(DST, SRC)
    return DST


def fails_with(operator, text: str, try_number: int = 1, kind=AirflowFailException) -> str:
    with pytest.raises(kind) as raised:
        operator.execute(ctx(try_number))
    message = str(raised.value)
    assert text in message, message
    assert "\n" not in message and message.startswith("streamrep: ")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__  # no chained traceback
    return message


# -- hook ---------------------------------------------------------------------------------
def test_hook_falls_back_to_the_cli_registry(home):
    hook = StreamrepHook()
    assert hook.clusters.home == home.home
    assert hook.clusters.get("newyork").url == home.get("newyork").url
    assert hook.identity.user == "alice" and hook.identity.groups == frozenset({"eng"})
    assert hook.registry_home() == home.home  # nothing overridden: Spark apps read the same registry
    hook.close()


def test_hook_cluster_from_a_streamrep_connection(home, tmp_path, monkeypatch):
    target = tmp_path / "elsewhere" / "boston.db"
    target.parent.mkdir()
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{cluster_conn_id('boston').upper()}",
        json.dumps({"conn_type": "streamrep", "host": f"embedded:{target}"}),
    )
    hook = StreamrepHook()
    assert hook.clusters.get("boston").url == f"embedded:{target}"
    hook.admin.create_stream("/mapr/boston/events")
    assert target.exists()
    assert [c.name for c in hook.clusters.list()] == ["boston", "newyork", "sanfrancisco"]
    # Spark apps get a registry folder that resolves boston the same way, and the rest as before.
    derived = hook.registry_home()
    registry = json.loads(open(os.path.join(derived, "clusters.json")).read())
    assert registry["clusters"]["boston"] == {"url": f"embedded:{target}"}
    assert registry["clusters"]["newyork"] == {"url": home.get("newyork").url}
    assert hook.process_env()["STREAMREP_HOME"] == derived
    hook.close()


def test_hook_connection_with_extra_url_home_and_identity(empty_home, tmp_path, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_STREAMREP_DEFAULT",
        json.dumps(
            {"conn_type": "streamrep", "login": "carol", "extra": {"home": str(tmp_path / "h"), "groups": "eng,ops"}}
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_STREAMREP_LONDON",
        json.dumps({"conn_type": "streamrep", "extra": {"url": f"embedded:{tmp_path / 'london.db'}"}}),
    )
    hook = StreamrepHook()
    assert hook.clusters.home == str(tmp_path / "h")
    assert hook.identity.user == "carol" and hook.identity.groups == frozenset({"eng", "ops"})
    assert hook.clusters.get("london").url == f"embedded:{tmp_path / 'london.db'}"
    env = hook.process_env()
    assert env["STREAMREP_USER"] == "carol" and set(env["STREAMREP_GROUPS"].split()) == {"eng", "ops"}


def test_hook_ignores_connections_that_are_not_clusters(home, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_DEFAULT", json.dumps({"conn_type": "streamrep", "login": "alice"}))
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_NEWYORK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    hook = StreamrepHook()
    assert hook.clusters.get("newyork").url == home.get("newyork").url  # not a streamrep connection
    with pytest.raises(NotFound, match="cluster default is not known"):
        hook.clusters.get("default")  # streamrep_default holds settings, not a cluster


def test_hook_refuses_a_connection_without_an_embedded_url(home, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_STREAMREP_PARIS", json.dumps({"conn_type": "streamrep", "host": "paris.example"}))
    with pytest.raises(InvalidArgument, match="connection streamrep_paris: cluster url 'paris.example'"):
        StreamrepHook().clusters.get("paris")


def test_user_errors_fail_without_retry_but_unavailable_is_retried():
    with pytest.raises(AirflowFailException, match="^streamrep: stream x does not exist$"), user_errors():
        raise NotFound("stream x does not exist")
    with pytest.raises(AirflowException, match="^streamrep: cannot read") as raised, user_errors():
        raise Unavailable("cannot read cluster registry")
    assert not isinstance(raised.value, AirflowFailException)


def test_operators_take_the_connection_of_a_cluster_by_conn_id(admin, source, tmp_path, monkeypatch):
    """``cluster_conn_ids`` names a cluster's connection where it is not ``streamrep_<cluster>``
    (templated, so a DAG param can choose it); the other clusters keep the convention."""
    elsewhere = tmp_path / "ny-prod.db"
    monkeypatch.setenv("AIRFLOW_CONN_NY_PROD", json.dumps({"conn_type": "streamrep", "host": f"embedded:{elsewhere}"}))
    assert "cluster_conn_ids" in StreamCreateOperator.template_fields
    create = StreamCreateOperator(
        task_id="create", path=DST, copymetafrom=SRC, cluster_conn_ids={"newyork": "{{ params.ny }}"}
    )
    create.render_template_fields({"params": {"ny": "ny_prod"}})
    assert create.cluster_conn_ids == {"newyork": "ny_prod"}
    create.execute(ctx())
    assert elsewhere.exists()  # newyork through ny_prod, not the registry's newyork
    with pytest.raises(NotFound):
        admin.stream_info(DST)
    assert StreamrepHook(cluster_conn_ids={"newyork": "ny_prod"}).admin.stream_info(DST).meta.defaultpartitions == 2
    # a named connection that is missing, or not a streamrep one, is one line, not the registry's cluster
    fails_with(
        StreamCreateOperator(task_id="c2", path=DST, cluster_conn_ids={"newyork": "ny_missing"}),
        "cluster newyork: connection ny_missing is not defined",
    )
    monkeypatch.setenv("AIRFLOW_CONN_NY_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    fails_with(
        ReplicaStatusOperator(task_id="s", path=SRC, cluster_conn_ids={"sanfrancisco": "ny_spark"}),
        "connection ny_spark is of type spark, not streamrep",
    )
    fails_with(
        ReplicaStatusOperator(task_id="s2", path=SRC, cluster_conn_ids=["ny_prod"]),
        "cluster_conn_ids must map cluster names to connection ids",
    )


def test_the_spark_operators_and_the_sensor_take_cluster_conn_ids(admin, source, tmp_path, monkeypatch):
    from streamrep.airflow.sensors import ReplicaUpToDateSensor
    from streamrep.airflow.spark_operators import StreamCopyOperator, StreamGatewayOperator

    elsewhere = tmp_path / "ny-prod.db"
    monkeypatch.setenv("AIRFLOW_CONN_NY_PROD", json.dumps({"conn_type": "streamrep", "host": f"embedded:{elsewhere}"}))
    conn_ids = {"newyork": "ny_prod"}
    for operator in (
        StreamCopyOperator(task_id="copy", source=SRC, destination=DST, cluster_conn_ids=conn_ids),
        StreamGatewayOperator(task_id="gw", cluster="newyork", cluster_conn_ids=conn_ids),
        ReplicaUpToDateSensor(task_id="wait", path=SRC, replica=DST, cluster_conn_ids=conn_ids),
    ):
        assert "cluster_conn_ids" in operator.template_fields, operator
        assert operator.cluster_conn_ids == conn_ids
    # the copy plans against newyork of ny_prod, and its Spark app gets that cluster in its registry
    copy = StreamCopyOperator(task_id="copy", source=SRC, destination=DST, cluster_conn_ids=conn_ids)
    hook = StreamrepHook(cluster_conn_ids=conn_ids)
    assert copy.preflight(hook, ctx()) is None  # 10 messages to copy
    registry = json.loads(open(os.path.join(hook.registry_home(), "clusters.json")).read())
    assert registry["clusters"]["newyork"] == {"url": f"embedded:{elsewhere}"}
    hook.close()


# -- step 1: stream create -copymetafrom --------------------------------------------------------
def test_create_copymetafrom_success_and_retry(admin, source):
    op = StreamCreateOperator(task_id="create", path=DST, copymetafrom=SRC)
    info = op.execute(ctx())
    assert info["path"] == DST and info["defaultpartitions"] == 2 and info["ttl"] == 0
    assert admin.entry(DST).meta == admin.entry(SRC).meta
    again = op.execute(ctx(2))  # the stream exists with the same metadata: success
    assert again["uuid"] == info["uuid"]


def test_create_fails_if_the_stream_exists_with_other_metadata(admin, source):
    admin.create_stream(DST, ttl=60)
    fails_with(
        StreamCreateOperator(task_id="create", path=DST, copymetafrom=SRC),
        f"stream {DST} already exists with other metadata: defaultpartitions is 1, not 2; ttl is 60, not 0",
    )


def test_create_fails_for_an_unknown_source_and_a_bad_path(home):
    fails_with(StreamCreateOperator(task_id="create", path=DST, copymetafrom=SRC), f"stream {SRC} does not exist")
    fails_with(StreamCreateOperator(task_id="create", path="/mapr/newyork/a:b"), "invalid stream path")


def test_create_without_copymetafrom_and_with_settings(admin, home):
    op = StreamCreateOperator(task_id="create", path="/mapr/newyork/plain", settings={"defaultpartitions": 3})
    assert op.execute(ctx())["defaultpartitions"] == 3
    assert op.execute(ctx(2))["defaultpartitions"] == 3


# -- step 2: replica add -paused ---------------------------------------------------------------
def test_replica_add_paused_success_and_retry(admin, source):
    admin.create_stream(DST, copymetafrom=SRC)
    op = ReplicaAddOperator(task_id="add", path=SRC, replica=DST, paused=True)
    link = op.execute(ctx())
    assert link["source"] == SRC and link["path"] == DST and link["paused"] is True
    assert op.execute(ctx(2))["path"] == DST  # registered with the same settings: success
    assert len(admin.entry(SRC).replicas) == 1


def test_replica_add_fails_when_registered_with_other_settings(admin, source):
    admin.create_stream(DST, copymetafrom=SRC)
    admin.add_replica(SRC, DST, paused=True)
    fails_with(
        ReplicaAddOperator(task_id="add", path=SRC, replica=DST, paused="False"),
        f"{DST} is already a replica of {SRC} with paused=true synchronous=false, not paused=false",
    )
    fails_with(
        ReplicaAddOperator(task_id="add", path=SRC, replica=DST, paused=True, synchronous=True),
        "with paused=true synchronous=false, not paused=true synchronous=true",
    )


def test_replica_add_paused_accepts_the_link_resumed_since(admin, source):
    """A rerun of a setup DAG meets the link its earlier run added paused and then resumed."""
    admin.create_stream(DST, copymetafrom=SRC)
    admin.add_replica(SRC, DST, paused=True)
    admin.resume_replica(SRC, DST)
    link = ReplicaAddOperator(task_id="add", path=SRC, replica=DST, paused=True).execute(ctx())
    assert link["path"] == DST and link["paused"] is False
    assert len(admin.entry(SRC).replicas) == 1


def test_replica_add_retry_fails_for_a_replica_deleted_and_recreated(admin, source):
    """The link an earlier try added names the stream then at DST; one recreated there is not it."""
    admin.create_stream(DST, copymetafrom=SRC)
    op = ReplicaAddOperator(task_id="add", path=SRC, replica=DST, paused=True)
    op.execute(ctx())
    admin.delete_stream(DST)
    admin.create_stream(DST, copymetafrom=SRC)
    message = fails_with(op, "it was deleted and recreated", try_number=2)
    assert admin.entry(DST).uuid in message and f"remove the replica from {SRC} and add it again" in message
    assert admin.entry(SRC).replicas[0].uuid != admin.entry(DST).uuid  # left as it was


def test_replica_add_fails_for_a_missing_replica_and_without_permission(admin, source, monkeypatch):
    fails_with(ReplicaAddOperator(task_id="add", path=SRC, replica=DST), f"stream {DST} does not exist")
    admin.create_stream(DST, copymetafrom=SRC)
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "sales")
    fails_with(ReplicaAddOperator(task_id="add", path=SRC, replica=DST), "user bob does not have adminperm")


def test_replica_add_passes_the_network_options_and_refuses_bad_ones(admin, source):
    admin.create_stream(DST, copymetafrom=SRC)
    fails_with(
        ReplicaAddOperator(task_id="add", path=SRC, replica=DST, networkcompression="foo"),
        "invalid networkcompression 'foo'",
    )
    fails_with(
        ReplicaAddOperator(task_id="add", path=SRC, replica=DST, networkencryption="maybe"),
        "invalid networkencryption 'maybe': true or false",
    )
    fails_with(ReplicaAddOperator(task_id="add", path=SRC, replica=DST, throttle=2), "invalid throttle 2")
    fails_with(
        ReplicaAddOperator(task_id="add", path=SRC, replica=DST, maxbytespersec="-1"), "invalid maxbytespersec '-1'"
    )
    fails_with(
        ReplicaAddOperator(task_id="add", path=SRC, replica=DST, networkcompression="lzf"), "Kafka has no LZF codec"
    )
    assert admin.entry(SRC).replicas == ()
    op = ReplicaAddOperator(
        task_id="add",
        path=SRC,
        replica=DST,
        paused=True,
        throttle="True",
        networkencryption=False,
        networkcompression="zlib",
        maxbytespersec="10M",
    )
    link = op.execute(ctx())
    assert (link["throttle"], link["networkencryption"], link["networkcompression"]) == (True, False, "zlib")
    assert link["maxbytespersec"] == 10_000_000
    assert op.execute(ctx(2))["networkcompression"] == "zlib"  # a retry finds the same link


def test_autosetup_check_refuses_bad_network_options_before_creating_the_replica(admin, source):
    fails_with(
        AutosetupCheckOperator(task_id="check", path=SRC, replica=DST, networkcompression="lzf"),
        "Kafka has no LZF codec",
    )
    fails_with(
        AutosetupCheckOperator(task_id="check", path=SRC, replica=DST, maxbytespersec="nan"),
        "invalid maxbytespersec 'nan'",
    )
    with pytest.raises(NotFound):
        admin.entry(DST)


# -- step 3: replica list (verify) -------------------------------------------------------------
def test_replica_verify_pushes_the_replica_list(replicated):
    rows = ReplicaVerifyOperator(task_id="verify", path=SRC, replica=DST).execute(ctx())
    assert [r["replicaPath"] for r in rows] == [DST]
    assert rows[0]["paused"] is True and rows[0]["pendingMessages"] == 10
    assert json.loads(json.dumps(rows)) == rows  # XCom-ready
    again = ReplicaVerifyOperator(task_id="verify", path=SRC, replica=DST).execute(ctx(2))
    assert [(r["replicaPath"], r["pendingMessages"]) for r in again] == [(DST, 10)]


def test_replica_verify_fails_when_the_replica_is_missing(admin, source):
    fails_with(ReplicaVerifyOperator(task_id="verify", path=SRC, replica=DST), f"{DST} is not a replica of {SRC}")


# -- steps 4 and 5: upstream add and verify ----------------------------------------------------
def upstream_rows(rows: list[dict]) -> list[tuple]:
    """The ``upstream list`` fields that name each upstream stream: its cluster and UUID."""
    return [(r["cluster"], r["uuid"]) for r in rows]


def test_upstream_add_success_and_retry(admin, source):
    admin.create_stream(DST, copymetafrom=SRC)
    op = UpstreamAddOperator(task_id="upstream", path=DST, upstream=SRC)
    rows = op.execute(ctx())
    assert upstream_rows(rows) == [("sanfrancisco", admin.entry(SRC).uuid)]
    assert rows == [presented.upstream_row(r) for r in admin.list_upstreams(DST)] and set(rows[0]) == {
        "cluster",
        "stream",
        "upstreamPath",
        "idx",
        "uuid",
    }
    assert op.execute(ctx(2)) == rows


def test_upstream_add_retry_fails_for_an_upstream_deleted_and_recreated(admin, source):
    admin.create_stream(DST, copymetafrom=SRC)
    op = UpstreamAddOperator(task_id="upstream", path=DST, upstream=SRC)
    agreed = admin.entry(SRC).uuid
    op.execute(ctx())
    admin.delete_stream(SRC)
    admin.create_stream(SRC)
    message = fails_with(op, "it was deleted and recreated", try_number=2)
    assert admin.entry(SRC).uuid in message and f"remove the upstream from {DST} and add it again" in message
    assert [(r.path.cluster, r.uuid) for r in admin.list_upstreams(DST)] == [("sanfrancisco", agreed)]  # left as it was


def test_upstream_add_fails_on_a_topic_name_conflict(admin, source):
    admin.create_stream(DST, copymetafrom=SRC)
    admin.create_stream("/mapr/sanfrancisco/other")
    admin.create_topic("/mapr/sanfrancisco/other", "clicks")
    admin.add_upstream(DST, "/mapr/sanfrancisco/other")
    fails_with(UpstreamAddOperator(task_id="upstream", path=DST, upstream=SRC), "topic name conflict")


def test_upstream_verify(replicated, admin):
    rows = UpstreamVerifyOperator(task_id="verify", path=DST, upstream=SRC).execute(ctx())
    assert upstream_rows(rows) == [("sanfrancisco", admin.entry(SRC).uuid)] and rows == [
        presented.upstream_row(r) for r in admin.list_upstreams(DST)
    ]
    assert UpstreamVerifyOperator(task_id="verify", path=DST, upstream=SRC).execute(ctx(2)) == rows
    admin.remove_upstream(DST, SRC)
    fails_with(UpstreamVerifyOperator(task_id="verify", path=DST, upstream=SRC), f"{SRC} is not an upstream of {DST}")


# -- step 7 and control: resume, pause, remove ---------------------------------------------------
def test_resume_and_pause_success_and_retry(replicated, admin):
    rows = ReplicaResumeOperator(task_id="resume", path=SRC, replica=DST).execute(ctx())
    assert rows[0]["paused"] is False
    assert ReplicaResumeOperator(task_id="resume", path=SRC, replica=DST).execute(ctx(2))[0]["paused"] is False
    rows = ReplicaPauseOperator(task_id="pause", path=SRC, replica=DST).execute(ctx())
    assert rows[0]["paused"] is True and rows[0]["pendingMessages"] == 10
    assert ReplicaPauseOperator(task_id="pause", path=SRC, replica=DST).execute(ctx(2))[0]["paused"] is True


def test_edit_changes_what_is_given_and_fails_in_one_line(replicated, admin):
    op = ReplicaEditOperator(
        task_id="edit", path=SRC, replica=DST, synchronous="true", networkcompression="zstd", maxbytespersec="10M"
    )
    [row] = op.execute(ctx())
    assert (row["synchronous"], row["networkcompression"], row["throttle"]) == (True, "zstd", False)
    assert row["maxbytespersec"] == 10_000_000
    assert op.execute(ctx(2))[0]["synchronous"] is True  # a retry finds it set
    fails_with(ReplicaEditOperator(task_id="edit", path=SRC, replica=DST, networkcompression="lzf"), "no LZF codec")
    fails_with(ReplicaEditOperator(task_id="edit", path=SRC, replica=DST), "needs one of -newreplica")


def test_resume_and_pause_fail_for_an_unregistered_replica(admin, source):
    fails_with(ReplicaResumeOperator(task_id="resume", path=SRC, replica=DST), f"{DST} is not a replica of {SRC}")
    fails_with(ReplicaPauseOperator(task_id="pause", path=SRC, replica=DST), f"{DST} is not a replica of {SRC}")


def test_remove_success_retry_and_failure(replicated, admin):
    op = ReplicaRemoveOperator(task_id="remove", path=SRC, replica=DST, confirmed=True)
    assert op.execute(ctx()) == []
    assert admin.entry(SRC).replicas == ()
    assert op.execute(ctx(2)) == []  # a retry: the earlier try removed it
    fails_with(op, f"{DST} is not a replica of {SRC}", try_number=1)  # a first try: nothing to remove
    assert admin.entry(DST).uuid  # the replica stream and its data stay


def test_remove_retry_still_fails_for_an_unknown_source(home):
    fails_with(
        ReplicaRemoveOperator(task_id="remove", path=SRC, replica=DST, confirmed=True),
        f"stream {SRC} does not exist",
        try_number=3,
    )


def test_replica_status(replicated, admin):
    copy_stream(admin, SRC, DST)
    rows = ReplicaStatusOperator(task_id="status", path=SRC).execute(ctx())
    assert rows[0]["replicaPath"] == DST and rows[0]["pendingMessages"] == 0
    assert ReplicaStatusOperator(task_id="status", path=SRC).execute(ctx(2))[0]["pendingMessages"] == 0
    fails_with(ReplicaStatusOperator(task_id="status", path="/mapr/sanfrancisco/nope"), "does not exist")


# -- autosetup precondition, gateway plan, skipping --------------------------------------------
def test_autosetup_check(admin, source):
    assert AutosetupCheckOperator(task_id="check", path=SRC, replica=DST).execute(ctx())["path"] == SRC
    assert AutosetupCheckOperator(task_id="check", path=SRC, replica=DST).execute(ctx(2))["path"] == SRC
    assert admin.entry(DST).autosetup_from == admin.entry(SRC).uuid  # created, marked as this autosetup's
    other = "/mapr/newyork/other"
    admin.create_stream(other)
    fails_with(
        AutosetupCheckOperator(task_id="check", path=SRC, replica=other),
        f"replica stream {other} already exists; autosetup creates it",
    )


def test_autosetup_check_needs_permission(admin, source, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "bob")
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    fails_with(AutosetupCheckOperator(task_id="check", path=SRC, replica=DST), "user bob does not have adminperm")


def test_gateway_plan(replicated, admin):
    op = GatewayPlanOperator(task_id="plan", cluster="newyork")
    only = op.execute(ctx())
    assert len(only) == 1  # none listed: one gateway named after this host
    admin.set_gateways("newyork", "gw2 gw1", cluster="sanfrancisco")
    assert op.execute(ctx(2)) == ["gw1", "gw2"]
    assert GatewayPlanOperator(task_id="plan", cluster="newyork", gateways="gwx").execute(ctx()) == ["gwx"]
    fails_with(GatewayPlanOperator(task_id="plan", cluster="tokyo"), "cluster tokyo is not known")
    fails_with(GatewayPlanOperator(task_id="plan", cluster="newyork", gateways="bad/name"), "invalid gateway name")


def test_only_if_false_skips_the_task(replicated, admin):
    with pytest.raises(AirflowSkipException):
        ReplicaAddOperator(task_id="reverse", path=DST, replica=SRC, only_if="False").execute(ctx())
    assert admin.entry(DST).replicas == ()
    assert ReplicaAddOperator(task_id="reverse", path=DST, replica=SRC, paused=True, only_if=True).execute(ctx())


def test_operators_declare_template_fields_and_docstrings():
    for op in (
        StreamCreateOperator,
        ReplicaAddOperator,
        ReplicaVerifyOperator,
        UpstreamAddOperator,
        UpstreamVerifyOperator,
        ReplicaResumeOperator,
        ReplicaPauseOperator,
        ReplicaEditOperator,
        ReplicaRemoveOperator,
        ReplicaStatusOperator,
        AutosetupCheckOperator,
        GatewayPlanOperator,
    ):
        assert "path" in op.template_fields or "cluster" in op.template_fields, op
        assert ":param" in (op.__doc__ or "") and ":return:" in op.__doc__, op


def test_provider_info_fits_airflows_schema():
    """What the (optional) ``apache_airflow_provider`` entry point would hand Airflow, so that
    its connection form lists the ``streamrep`` type."""
    import importlib.resources

    import jsonschema

    from streamrep.airflow.provider import get_provider_info

    schema = json.loads(importlib.resources.files("airflow").joinpath("provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    (conn_type,) = info["connection-types"]
    assert conn_type["connection-type"] == StreamrepHook.conn_type
    assert conn_type["hook-class-name"] == "streamrep.airflow.hook.StreamrepHook"


# -- the lag monitor ---------------------------------------------------------------------------
@pytest.mark.backends("embedded", "kafka")
def test_the_lag_monitor_fails_naming_the_replica(replicated, admin):
    from streamrep.replication.gateway import Gateway
    from streamrep.replication.lag import set_alert

    admin.resume_replica(SRC, DST)
    monitor = ReplicaLagMonitorOperator(task_id="check_replica_lag", cluster="{{ params.cluster }}")
    monitor.cluster = "newyork"  # as rendered
    message = fails_with(monitor, f"replica {DST} (of {SRC}): no gateway is live")
    assert "ErrAllGatewaysUnreachable" in message
    gateway = Gateway(admin, "newyork", "gw1")
    gateway.heartbeat()
    set_alert(admin, SRC, DST, max_lag_messages=5)
    fails_with(monitor, f"replica {DST} (of {SRC}): 10 messages behind passes its threshold of 5 messages")
    gateway.run_once()
    [row] = monitor.execute(ctx())  # caught up, a gateway live: the run succeeds
    assert (row["replicaPath"], row["lagMessages"], row["maxLagMessages"], row["problems"]) == (DST, 0, 5, [])
    assert ReplicaLagMonitorOperator(task_id="all").execute(ctx())[0]["replicaPath"] == DST  # every cluster
