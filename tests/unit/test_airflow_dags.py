"""DAG integrity: every DAG imports, the manual setup has the seeds' seven steps in order, and
params are validated by their JSON schema (a malformed path is refused at trigger time)."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.messaging.triggers.msg_queue import MessageQueueTrigger
from airflow.sdk import TriggerRule
from airflow.sdk.exceptions import ParamValidationError
from airflow.serialization.encoders import encode_asset_like
from airflow.serialization.serialized_objects import BaseSerialization

from streamrep.airflow.assets import REPLICAS_ALIAS, replica_asset, topic_asset
from streamrep.airflow.operators import (
    AutosetupCheckOperator,
    FailbackOperator,
    FailoverOperator,
    FailoverPlanOperator,
    GatewayPlanOperator,
    ReplicaAddOperator,
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
from streamrep.airflow.sensors import ReplicaUpToDateSensor
from streamrep.airflow.spark_operators import StreamCopyOperator, StreamDiffOperator, StreamGatewayOperator
from streamrep.airflow.triggers import StreamMessageTrigger

DAGS = Path(__file__).resolve().parents[2] / "dags"
DAG_IDS = {
    "stream_replica_manual_setup",
    "stream_replica_autosetup",
    "stream_gateways",
    "stream_replica_control",
    "stream_gateway_service",
    "stream_replica_failover",
    "stream_replica_failback",
    "stream_replica_monitor",
    "stream_replica_verify",
    "stream_messages_example",
    "stream_replica_uptodate_example",
}
# the supervisor, the monitor, and the examples scheduled on Assets; every other DAG runs when triggered
SCHEDULED = {
    "stream_gateway_service",
    "stream_replica_monitor",
    "stream_replica_verify",
    "stream_messages_example",
    "stream_replica_uptodate_example",
}

NETWORK = ("throttle", "networkencryption", "networkcompression", "maxbytespersec")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def chain_of(dag) -> list:
    """The tasks of a DAG that must be one straight line, in order."""
    (task,) = dag.roots
    order = [task]
    while task.downstream_list:
        (task,) = task.downstream_list
        order.append(task)
    assert len(order) == len(dag.tasks), "not a single chain"
    return order


def accepts(dag, **conf) -> bool:
    """Whether a trigger with ``conf`` passes the DAG's param schema."""
    params = copy.deepcopy(dag.params)  # Param.resolve keeps the value: the DAG object is shared by the process
    try:
        for key, value in conf.items():
            params.get_param(key).resolve(value)
    except ParamValidationError:
        return False
    return True


def test_every_dag_imports_with_no_errors(dagbag):
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == DAG_IDS


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dags_are_triggered_documented_and_tagged(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert (dag.schedule is None or getattr(dag.timetable, "summary", None) == "None") != (dag_id in SCHEDULED)
    assert dag.doc_md and "**Params**" in dag.doc_md
    assert "streamrep" in dag.tags
    for name in dag.params:
        param = dag.params.get_param(name)
        assert param.schema.get("type") and param.description, (dag_id, name)


def test_manual_setup_is_the_seeds_seven_steps_in_order(dagbag):
    dag = dagbag.dags["stream_replica_manual_setup"]
    steps = [(t.task_id, type(t)) for t in chain_of(dag)]
    assert steps == [
        ("create_replica", StreamCreateOperator),
        ("add_replica_paused", ReplicaAddOperator),
        ("verify_replica", ReplicaVerifyOperator),
        ("add_upstream", UpstreamAddOperator),
        ("verify_upstream", UpstreamVerifyOperator),
        ("copystream", StreamCopyOperator),
        ("verify", StreamDiffOperator),
        ("resume_replica", ReplicaResumeOperator),
        ("wait_caught_up", ReplicaUpToDateSensor),
    ]
    tasks = dag.task_dict
    assert tasks["wait_caught_up"].outlets == [REPLICAS_ALIAS]  # the replica's asset event
    assert tasks["wait_caught_up"].deferrable is True  # waits in the triggerer, not a worker slot
    assert (tasks["create_replica"].path, tasks["create_replica"].copymetafrom) == (
        "{{ params.replica }}",
        "{{ params.path }}",
    )
    assert tasks["add_replica_paused"].paused is True
    assert (tasks["add_upstream"].path, tasks["add_upstream"].upstream) == ("{{ params.replica }}", "{{ params.path }}")
    copy = tasks["copystream"]
    assert isinstance(copy, SparkSubmitOperator) and copy._conn_id == "spark_default"
    assert set(dag.params) == {"path", "replica", *NETWORK}
    for name in NETWORK:
        assert getattr(tasks["add_replica_paused"], name) == f"{{{{ params.{name} }}}}"
    assert all(t.retries >= 1 for t in dag.tasks)  # safe to retry, so retried


def test_autosetup_steps_and_the_optional_reverse_link(dagbag):
    dag = dagbag.dags["stream_replica_autosetup"]
    order = chain_of(dag)
    assert [t.task_id for t in order] == [
        "check",
        "create_replica",
        "add_replica_paused",
        "add_upstream",
        "copystream",
        "verify",
        "add_reverse_replica",
        "add_reverse_upstream",
        "resume_reverse_replica",
        "resume_replica",
        "wait_caught_up",
    ]
    # as in the core's autosetup: resume_replica finishes the autosetup (clears the replica's
    # mark), so it comes last and a rerun after any earlier failure is still accepted
    tasks = dag.task_dict
    # a cluster that is down is retried; a user's error fails at once (AirflowFailException)
    assert isinstance(tasks["check"], AutosetupCheckOperator) and tasks["check"].retries >= 1
    for reverse in ("add_reverse_replica", "add_reverse_upstream", "resume_reverse_replica"):
        assert tasks[reverse].only_if == "{{ params.multimaster }}"
    assert (tasks["add_reverse_replica"].path, tasks["add_reverse_replica"].replica) == (
        "{{ params.replica }}",
        "{{ params.path }}",
    )
    assert tasks["add_replica_paused"].synchronous == "{{ params.synchronous }}"
    assert tasks["resume_replica"].trigger_rule == TriggerRule.NONE_FAILED  # runs when the reverse steps skip
    assert (tasks["resume_reverse_replica"].path, tasks["resume_reverse_replica"].replica) == (
        "{{ params.replica }}",
        "{{ params.path }}",
    )
    assert set(dag.params) == {
        "path",
        "replica",
        "multimaster",
        "synchronous",
        *NETWORK,
    }
    for task in ("check", "add_replica_paused", "add_reverse_replica"):  # checked first, then on both links
        for name in NETWORK:
            assert getattr(tasks[task], name) == f"{{{{ params.{name} }}}}"
    wait = tasks["wait_caught_up"]
    assert isinstance(wait, ReplicaUpToDateSensor) and wait.outlets == [REPLICAS_ALIAS]
    assert (wait.path, wait.replica) == ("{{ params.path }}", "{{ params.replica }}")
    assert dag.render_template_as_native_obj


@pytest.mark.parametrize("dag_id", ["stream_replica_manual_setup", "stream_replica_autosetup"])
def test_network_params_default_to_maprs_and_refuse_bad_values(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    assert {name: dag.params[name] for name in NETWORK} == {
        "throttle": False,
        "networkencryption": False,
        "networkcompression": "lz4",
        "maxbytespersec": "0",  # no limit
    }
    assert accepts(dag, networkcompression="zlib", networkencryption=True, throttle=True, maxbytespersec="10M")
    assert accepts(dag, maxbytespersec=10_000_000)
    assert not accepts(dag, networkcompression="foo")
    assert not accepts(dag, networkcompression="lzf")  # no Kafka codec: refused at trigger time
    assert not accepts(dag, networkencryption="maybe")
    assert not accepts(dag, throttle=2)
    # parse_max_bytes_per_sec, the task's own check, refuses these at trigger time too (issue 31)
    assert accepts(dag, maxbytespersec="10MB/s") and accepts(dag, maxbytespersec="1.5G")
    assert not any(accepts(dag, maxbytespersec=bad) for bad in ("lots", "500", "200G", 999, True))


def test_gateways_dag_maps_one_supervised_spark_task_per_gateway(dagbag):
    dag = dagbag.dags["stream_gateways"]
    plan, gateway = dag.task_dict["plan_gateways"], dag.task_dict["gateway"]
    assert (
        plan.operator_class is GatewayPlanOperator
        if hasattr(plan, "operator_class")
        else isinstance(plan, GatewayPlanOperator)
    )
    assert gateway.operator_class is StreamGatewayOperator
    assert issubclass(StreamGatewayOperator, SparkSubmitOperator)
    assert gateway.partial_kwargs["retries"] >= 100 and gateway.partial_kwargs["retry_delay"].total_seconds() >= 10
    assert plan in gateway.upstream_list
    assert set(dag.params) == {"cluster", "once", "gateways"}


def test_control_dag_branches_to_the_action(dagbag):
    dag = dagbag.dags["stream_replica_control"]
    tasks = dag.task_dict
    assert {type(tasks[a]) for a in ("pause", "resume", "remove")} == {
        ReplicaPauseOperator,
        ReplicaResumeOperator,
        ReplicaRemoveOperator,
    }
    assert {t.task_id for t in tasks["choose_action"].downstream_list} == {"pause", "resume", "remove"}
    assert isinstance(tasks["replica_list"], ReplicaStatusOperator)
    assert tasks["replica_list"].trigger_rule == TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS
    assert dag.params.get_param("action").schema["enum"] == ["pause", "remove", "resume"]


def test_messages_example_is_scheduled_on_a_watched_topic_asset(dagbag):
    dag = dagbag.dags["stream_messages_example"]
    (asset,) = dag.timetable.asset_condition.objects
    assert asset == topic_asset("/mapr/sanfrancisco/activity:clicks", watchers=asset.watchers)
    assert asset.uri == "streamrep://sanfrancisco/activity:clicks"
    (watcher,) = asset.watchers
    # common-messaging's MessageQueueTrigger, found for scheme "streamrep" through the provider info
    assert isinstance(watcher.trigger, MessageQueueTrigger) and watcher.trigger.scheme == "streamrep"
    assert isinstance(watcher.trigger.trigger, StreamMessageTrigger)
    assert watcher.trigger.trigger.path == "/mapr/sanfrancisco/activity:clicks"
    # what the dag-processor stores, and so what the triggerer runs: a plain StreamMessageTrigger
    (encoded,) = encode_asset_like(asset)["watchers"]
    assert encoded["trigger"]["classpath"] == "streamrep.airflow.triggers.StreamMessageTrigger"
    assert BaseSerialization.deserialize(encoded["trigger"]["kwargs"]["path"]) == "/mapr/sanfrancisco/activity:clicks"
    assert [t.task_id for t in dag.tasks] == ["show_messages"]


def test_uptodate_example_is_scheduled_on_the_replica_the_setup_dags_emit_for(dagbag):
    dag = dagbag.dags["stream_replica_uptodate_example"]
    assert list(dag.timetable.asset_condition.objects) == [replica_asset("/mapr/newyork/activity")]
    # the setup DAGs' default replica, whose caught-up event comes through the alias
    setup = dagbag.dags["stream_replica_manual_setup"]
    assert setup.params["replica"] == "/mapr/newyork/activity"
    assert [t.task_id for t in dag.tasks] == ["report"]


GOOD_PATHS = [
    "/mapr/sanfrancisco/activity",
    "mapr/sanfrancisco/activity",
    "/mapr/a.b_c-1/x/y.z",
    "/activity",
    "/mapr/sanfrancisco/my stream",
]
BAD_PATHS = [
    "/mapr/sanfrancisco/activity:clicks",
    "",
    "/mapr//activity",
    "/mapr/sanfrancisco//x",
    "/mapr/-bad/activity",
    "/mapr/sanfrancisco/a\tb",
    42,
    None,
]


@pytest.mark.parametrize(
    "dag_id",
    [
        "stream_replica_manual_setup",
        "stream_replica_autosetup",
        "stream_replica_control",
        "stream_replica_failover",
        "stream_replica_failback",
    ],
)
def test_path_params_accept_stream_paths_and_refuse_malformed_ones(dagbag, dag_id):
    dag = dagbag.dags[dag_id]
    for path in GOOD_PATHS:
        assert accepts(dag, path=path, replica=path), path
    for path in BAD_PATHS:
        assert not accepts(dag, path=path), path
        assert not accepts(dag, replica=path), path


def test_a_malformed_path_is_refused_with_a_readable_message(dagbag):
    dag = dagbag.dags["stream_replica_manual_setup"]
    params = (
        dag.params.deep_merge({"path": "/mapr/sanfrancisco/activity:clicks"})
        if hasattr(dag.params, "deep_merge")
        else None
    )
    with pytest.raises(ParamValidationError) as raised:
        if params is not None:
            params.validate()
        else:
            dag.params["path"] = "/mapr/sanfrancisco/activity:clicks"
    message = str(raised.value).splitlines()[0]
    assert message.startswith("Invalid input for param path: '/mapr/sanfrancisco/activity:clicks' does not match")


def test_flag_cluster_and_action_params(dagbag):
    auto = dagbag.dags["stream_replica_autosetup"]
    assert accepts(auto, multimaster=True, synchronous=False)
    assert not accepts(auto, multimaster="yes")
    gateways = dagbag.dags["stream_gateways"]
    assert accepts(gateways, cluster="newyork", once=True)
    assert not accepts(gateways, cluster="new york") and not accepts(gateways, cluster="")
    control = dagbag.dags["stream_replica_control"]
    assert all(accepts(control, action=a) for a in ("pause", "resume", "remove"))
    assert not accepts(control, action="delete")


@pytest.mark.parametrize(
    "dag_id, step, operator",
    [
        ("stream_replica_failover", "failover", FailoverOperator),
        ("stream_replica_failback", "failback", FailbackOperator),
    ],
)
def test_failover_dags_ask_a_person_before_the_irreversible_step(dagbag, dag_id, step, operator):
    from airflow.providers.standard.operators.hitl import ApprovalOperator

    dag = dagbag.dags[dag_id]
    assert [(t.task_id, type(t)) for t in chain_of(dag)] == [
        ("plan", FailoverPlanOperator),
        ("approve", ApprovalOperator),
        (step, operator),
    ]
    tasks = dag.task_dict
    assert tasks["plan"].procedure == step
    assert "xcom_pull(task_ids='plan')['markdown']" in tasks["approve"].body  # the approval shows the plan
    assert tasks["approve"].retries == 0 and tasks[step].retries >= 1
    assert tasks[step].outlets == [REPLICAS_ALIAS]  # a caught-up event for the replica (or the source) it leaves
    assert (tasks[step].path, tasks[step].replica) == ("{{ params.path }}", "{{ params.replica }}")
    assert accepts(dag, timeout=30) and not accepts(dag, timeout=-1) and not accepts(dag, timeout="soon")
    if dag_id == "stream_replica_failover":
        assert set(dag.params) == {"path", "replica", "force", "timeout"}
        assert accepts(dag, force=True) and not accepts(dag, force="yes")
    else:
        assert set(dag.params) == {"path", "replica", "phase", "timeout"}
        assert accepts(dag, phase="return") and not accepts(dag, phase="sideways")


def test_the_monitor_checks_every_five_minutes_without_catchup_or_retries(dagbag):
    dag = dagbag.dags["stream_replica_monitor"]
    (task,) = dag.tasks
    assert isinstance(task, ReplicaLagMonitorOperator) and task.cluster == "{{ params.cluster }}"
    assert task.retries == 0  # a failure is the alert: a retry would only repeat it
    assert dag.schedule == timedelta(minutes=5)
    assert dag.catchup is False and dag.max_active_runs == 1
    assert set(dag.params) == {"cluster"} and accepts(dag, cluster="newyork") and not accepts(dag, cluster="a b")


def test_the_package_dags_come_through_the_dags_folder_short_file(dagbag):
    """A dags folder needs only ``dags/streamrep_dags.py`` (docs/airflow.md): every packaged DAG is
    registered as defined there, so the scheduler and workers parse that file to find it."""
    import streamrep.dags

    assert set(streamrep.dags.__all__) <= set(dagbag.dag_ids)
    for dag_id in streamrep.dags.__all__:
        assert Path(dagbag.dags[dag_id].fileloc) == DAGS / "streamrep_dags.py", dag_id


def test_the_dags_folder_short_file_passes_airflows_safe_mode_without_its_comments(tmp_path):
    """Safe mode skips a file whose text does not name "airflow" and "dag": the short file's code
    names both, so no comment has to (issue 33)."""
    import io
    import tokenize

    from airflow.utils.file import might_contain_dag

    source = (DAGS / "streamrep_dags.py").read_text(encoding="utf-8")
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    code = tokenize.untokenize(t for t in tokens if t.type != tokenize.COMMENT)
    assert "#" not in code
    stripped = tmp_path / "streamrep_dags.py"
    stripped.write_text(code, encoding="utf-8")
    assert might_contain_dag(str(stripped), safe_mode=True)


@pytest.mark.parametrize("dag_id", ["stream_replica_control", "stream_replica_failover", "stream_replica_failback"])
def test_dags_whose_runs_would_race_run_one_at_a_time(dagbag, dag_id):
    """Issue 21, item 15: a second failover (or control) run waits in the queue instead of
    racing the first on the same links and fences."""
    assert dagbag.dags[dag_id].max_active_runs == 1


def test_the_scheduled_dags_of_the_package_start_paused(dagbag):
    """Issue 21, item 10: a scheduled DAG runs once someone unpauses it, as Airflow's own default
    (dags_are_paused_at_creation) has it, whatever the installation sets: on a fresh
    ``airflow standalone`` none of their runs starts before the API server is up, and so none fails.
    The triggered DAGs never run by themselves and follow the installation's setting."""
    import streamrep.dags

    for dag_id in streamrep.dags.__all__:
        dag = dagbag.dags[dag_id]
        if dag.schedule is not None:
            assert dag.is_paused_upon_creation is True, dag_id
        else:
            assert dag.is_paused_upon_creation is None, dag_id
    assert {d for d in streamrep.dags.__all__ if dagbag.dags[d].schedule is not None} == {
        "stream_gateway_service",
        "stream_replica_monitor",
        "stream_replica_verify",
    }


def test_every_param_has_a_title_and_a_description(dagbag):
    """Issue 21, item 16: the trigger form labels each field and says what it takes."""
    import streamrep.dags

    for dag_id in streamrep.dags.__all__:
        for name, param in dagbag.dags[dag_id].params.items():
            param = dagbag.dags[dag_id].params.get_param(name)
            assert param.schema.get("title") and param.description, (dag_id, name)


def test_the_plugin_knows_the_package_dags():
    import streamrep.dags
    from streamrep.airflow.plugin import DAG_IDS

    assert set(streamrep.dags.__all__) == DAG_IDS


def test_a_bad_path_says_what_a_path_is_in_one_line(dagbag):
    from streamrep.airflow.params import one_line_param_error

    value = "/mapr/sanfrancisco/activity:clicks"
    params = copy.deepcopy(dagbag.dags["stream_replica_manual_setup"].params)
    with pytest.raises(ParamValidationError) as raised:
        params.get_param("path").resolve(value)
    assert "Failed validating" in str(raised.value)  # jsonschema's dump, which the API server's answer loses
    line = one_line_param_error(f"Invalid input for param path: {raised.value}")
    assert line == (
        f"Invalid input for param path: {value!r} is not a stream path: /mapr/<cluster>/<stream>, with no ':topic'"
    )
