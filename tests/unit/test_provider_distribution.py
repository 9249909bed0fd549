"""What the provider distribution declares: provider info, version range, config option, and the
pytest fixtures it ships (``streamrep.testing``, loaded here by tests/conftest.py's
``pytest_plugins``, as in a user's repository). The wheel itself, installed into other Airflow releases, is
``tests/e2e/test_wheel_install.py``'s."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE, REPLICA = "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"


def test_the_provider_info_is_valid_for_airflow_and_names_what_exists():
    import airflow
    import jsonschema

    from streamrep.airflow.provider import get_provider_info

    info = get_provider_info()
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
    for kind, base in (
        ("hooks", "BaseHook"),
        ("operators", "BaseOperator"),
        ("sensors", "BaseSensorOperator"),
        ("triggers", "BaseTrigger"),
    ):
        (entry,) = info[kind]
        assert entry["integration-name"] == info["integrations"][0]["integration-name"]
        found = [
            cls
            for name in entry["python-modules"]
            for _, cls in inspect.getmembers(importlib.import_module(name), inspect.isclass)
            if cls.__module__ == name and base in [c.__name__ for c in cls.__mro__]
        ]
        assert found, f"no {base} in {entry['python-modules']}"
    (conn,) = info["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    assert getattr(importlib.import_module(module), name).conn_type == conn["connection-type"]


@pytest.mark.parametrize("lazy", ["True", "False"])
def test_airflow_loads_the_page_once_whether_providers_are_discovered_lazily_or_not(lazy, tmp_path):
    """Through the airflow.plugins entry point, with no plugin import error in either mode (a
    provider-info "plugins" entry would be loaded a second time with lazy discovery off)."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LAZY_DISCOVER_PROVIDERS": lazy,
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from airflow import plugins_manager as m; "
            "plugins, errors = m._get_plugins(); print(json.dumps([[p.name for p in plugins], errors]))",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    names, errors = json.loads(done.stdout.strip().splitlines()[-1])
    assert names.count("streamrep") == 1 and errors == {}, done.stdout + done.stderr


def test_airflow_reads_the_declared_config_option(monkeypatch):
    from streamrep.airflow.spark_operators import StreamCopyOperator

    assert StreamCopyOperator(task_id="c", source="/mapr/a/s", destination="/mapr/b/s")._conn_id == "spark_default"
    monkeypatch.setenv("AIRFLOW__STREAMREP__SPARK_CONN_ID", "spark_cluster")
    assert StreamCopyOperator(task_id="c", source="/mapr/a/s", destination="/mapr/b/s")._conn_id == "spark_cluster"
    assert (
        StreamCopyOperator(task_id="c", source="/mapr/a/s", destination="/mapr/b/s", conn_id="mine")._conn_id == "mine"
    )


def test_the_supported_airflow_range_is_the_one_pyproject_declares():
    from streamrep.airflow.support import SUPPORTED_AIRFLOW

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert f"apache-airflow{SUPPORTED_AIRFLOW}" in project["dependencies"]
    assert project["entry-points"]["airflow.plugins"] == {
        "streamrep": "streamrep.airflow.plugin:StreamrepPlugin",
        "streamrep_rest": "streamrep.cli.rest:RestPlugin",  # maprcli's REST form: the CLI layer's own plugin
    }
    assert "pytest11" not in project["entry-points"]  # opt-in: pytest_plugins = ["streamrep.testing"]


def test_airflow_2_is_refused_in_one_line_naming_the_fix():
    from streamrep.airflow.support import require_airflow

    with pytest.raises(ImportError) as refused:
        require_airflow("2.10.5")
    message = str(refused.value)
    assert "\n" not in message and "Airflow 2.10.5" in message and "apache-airflow>=3.2.2" in message
    require_airflow("3.3.2")
    require_airflow("3.2.2")
    require_airflow("3.4.0")  # no ceiling


# -- the pytest fixtures users get ------------------------------------------------------------
def test_the_clusters_fixture_defines_connections_the_operators_use(streamrep_clusters):
    from streamrep.airflow.hook import StreamrepHook

    assert set(streamrep_clusters.urls) == {"sanfrancisco", "newyork"}
    hook = StreamrepHook("streamrep_newyork")
    try:
        ok, message = hook.test_connection()
        assert ok is True, message
        assert hook.clusters.get("newyork").url == streamrep_clusters.urls["newyork"]
    finally:
        hook.close()


def test_counts_and_replica_states_assert_what_is_there(streamrep_clusters, streamrep_run_operator):
    from streamrep.airflow.operators import ReplicaAddOperator, StreamCreateOperator, UpstreamAddOperator

    admin = streamrep_clusters.admin
    admin.create_stream(SOURCE, defaultpartitions=2)
    assert streamrep_clusters.produce(f"{SOURCE}:a", ["x", "y", "z"]) == 3
    streamrep_clusters.produce(f"{SOURCE}:b", [b"w"])
    assert streamrep_clusters.count(f"{SOURCE}:a") == 3 and streamrep_clusters.count(SOURCE) == 4
    streamrep_run_operator(StreamCreateOperator(task_id="create", path=REPLICA, copymetafrom=SOURCE))
    streamrep_run_operator(ReplicaAddOperator(task_id="add", path=SOURCE, replica=REPLICA, paused=True))
    streamrep_clusters.assert_replica_state(SOURCE, REPLICA, "waiting_for_upstream", paused=True)
    streamrep_run_operator(UpstreamAddOperator(task_id="upstream", path=REPLICA, upstream=SOURCE))
    streamrep_clusters.assert_replica_state(SOURCE, REPLICA, "REPLICA_STATE_PAUSED", paused=True)
    with pytest.raises(AssertionError, match="REPLICA_STATE_PAUSED, expected REPLICA_STATE_REPLICATING"):
        streamrep_clusters.assert_replica_state(SOURCE, REPLICA, "replicating")
    with pytest.raises(AssertionError, match="paused is True, expected False"):
        streamrep_clusters.assert_replica_state(SOURCE, REPLICA, "paused", paused=False)
    with pytest.raises(AssertionError, match="is not a replica of"):
        streamrep_clusters.replica_state(SOURCE, "/mapr/newyork/other")


def test_run_operator_runs_execute_as_the_task_runner_does_without_its_warning(
    streamrep_clusters, streamrep_run_operator, capsys
):
    """Airflow 3's operators log through structlog to the process's output, not to the logging
    records that caplog holds: the output is what a user sees, so it is what is read."""
    from airflow.sdk.bases.operator import ExecutorSafeguard

    from streamrep.airflow import rows as presented
    from streamrep.airflow.operators import ReplicaStatusOperator, StreamCreateOperator

    warning = "cannot be called outside of the Task Runner!"
    streamrep_clusters.admin.create_stream(SOURCE, defaultpartitions=3)
    capsys.readouterr()
    assert ReplicaStatusOperator(task_id="direct", path=SOURCE).execute({}) == []  # the call the fixture replaces
    assert warning in capsys.readouterr().out  # so the warning would be seen
    created = streamrep_run_operator(StreamCreateOperator(task_id="create", path=REPLICA, copymetafrom=SOURCE))
    output = capsys.readouterr().out
    assert warning not in output and "StreamCreateOperator" in output  # the operator's own log is there
    assert created == presented.stream_info_row(streamrep_clusters.admin.stream_info(REPLICA))
    assert created["defaultpartitions"] == 3
    assert ExecutorSafeguard.tracker.get(None) is None  # nothing left set in the caller's context


def test_a_dag_run_reports_the_failed_task(streamrep_clusters, streamrep_run_dag):
    """A DAG whose replica step names a stream that does not exist fails at that task."""
    from airflow.sdk import DAG

    from streamrep.airflow.operators import ReplicaAddOperator, StreamCreateOperator

    streamrep_clusters.admin.create_stream(SOURCE)
    with DAG("fails_at_add", schedule=None) as dag:
        create = StreamCreateOperator(task_id="create", path=REPLICA, copymetafrom=SOURCE)
        add = ReplicaAddOperator(task_id="add", path=SOURCE, replica="/mapr/newyork/missing", retries=0)
        create >> add
    result = streamrep_run_dag(dag)
    assert result.state == "failed" and result.tasks == {"create": "success", "add": "failed"}, result
