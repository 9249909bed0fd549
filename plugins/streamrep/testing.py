"""pytest fixtures for testing DAGs and operators that use streamrep, in your own repository.

Installed with the package, and loaded only where a test session asks for it: one line in the
conftest.py at the root of your tests, ``pytest_plugins = ["streamrep.testing"]``, or ``pytest -p
streamrep.testing``. It is no ``pytest11`` entry point, so it stays out of every other pytest session
of an environment that has the wheel (it sets ``AIRFLOW_HOME``). Every fixture works on embedded
clusters in the test's temporary folder: no broker, no Spark cluster, no Airflow server.

``streamrep_clusters``
    Embedded clusters (``streamrep_cluster_names``, by default ``sanfrancisco`` and ``newyork``),
    registered in a fresh ``STREAMREP_HOME`` and defined as the Airflow connections
    ``streamrep_<cluster>`` that operators look them up by; ``spark_default`` is a local Spark.
    It is a :class:`TestClusters`: ``.admin`` (the admin API as the test's user), ``.produce``,
    ``.count``, ``.replica_state`` and ``.assert_replica_state``.
``streamrep_run_operator``
    ``streamrep_run_operator(operator)`` runs one operator's ``execute`` with a task context and
    returns what it returned (its XCom value).
``streamrep_run_dag``
    ``streamrep_run_dag(dag, conf)`` runs a whole DAG with Airflow's ``dag.test()`` (every task in
    this process, against a throwaway SQLite metadata database) and returns the run's state and
    each task's state.

Airflow reads ``AIRFLOW_HOME`` once, when it is first imported: unless your test session sets it,
this plugin gives the session a throwaway one (at ``pytest_configure``), so no test touches
``~/airflow``.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest

from streamrep.model.replication import ReplicaState

if TYPE_CHECKING:
    from streamrep.client.admin import StreamAdmin
    from streamrep.replication.status import ReplicaStatus

DEFAULT_CLUSTERS = ("sanfrancisco", "newyork")
LOCAL_SPARK = {"conn_type": "spark", "host": "local[2]"}


def pytest_configure(config: pytest.Config) -> None:
    if "AIRFLOW_HOME" not in os.environ and "airflow" not in sys.modules:
        home = tempfile.mkdtemp(prefix="streamrep-pytest-airflow-")
        os.environ["AIRFLOW_HOME"] = home
        os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
        atexit.register(shutil.rmtree, home, ignore_errors=True)


@dataclass
class TestClusters:
    """Embedded clusters of one test, by name, and what a test asks of them."""

    __test__ = False  # not a test class, whatever pytest's name rules say

    home: Path
    urls: dict[str, str]
    admin: StreamAdmin

    def produce(self, topic_path: str, values: Iterable[bytes | str], key: bytes | str | None = None) -> int:
        """Produce ``values`` to ``<stream>:<topic>`` as the test's user; returns how many."""
        from streamrep.client import Producer

        sent = 0
        with Producer(self.admin) as producer:
            for value in values:
                producer.send(topic_path, _bytes(value), key=None if key is None else _bytes(key))
                sent += 1
        return sent

    def count(self, path: str) -> int:
        """The messages ``<stream>`` (every topic) or ``<stream>:<topic>`` holds now."""
        from streamrep.model.paths import parse_stream_or_topic

        stream, topic = parse_stream_or_topic(path, None)
        if topic:
            return sum(p.messages for p in self.admin.topic_info(str(stream), topic))
        return sum(t.messages for t in self.admin.list_topics(str(stream)))

    def replica_state(self, source: str, replica: str) -> ReplicaStatus:
        """``stream replica list -path <source>``'s entry for ``replica`` (``state``, ``paused``,
        ``errors``, lag and pending counts)."""
        from streamrep.replication.status import replica_status

        wanted = self.admin.path(replica)
        for status in replica_status(self.admin, source):
            if status.path == wanted:
                return status
        raise AssertionError(f"{replica} is not a replica of {source}")

    def assert_replica_state(self, source: str, replica: str, state: str, *, paused: bool | None = None) -> None:
        """Assert the replica's state, given in MapR's name (``REPLICA_STATE_REPLICATING``) or
        short (``replicating``), and optionally whether it is paused."""
        status = self.replica_state(source, replica)
        expected = ReplicaState(state if state.startswith("REPLICA_STATE_") else f"REPLICA_STATE_{state.upper()}")
        actual = status.state
        # raised, not asserted: a check of users' tests holds under python -O too
        if actual is not expected:
            raise AssertionError(
                f"{source} -> {replica}: {actual.value}, expected {expected.value} (errors: {status.errors})"
            )
        if paused is not None and status.paused is not paused:
            raise AssertionError(f"{source} -> {replica}: paused is {status.paused}, expected {paused}")


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


@pytest.fixture
def streamrep_cluster_names() -> tuple[str, ...]:
    """The embedded clusters ``streamrep_clusters`` makes; override it to choose others."""
    return DEFAULT_CLUSTERS


@pytest.fixture
def streamrep_clusters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamrep_cluster_names: tuple[str, ...]
) -> Iterable[TestClusters]:
    """Embedded clusters in ``tmp_path``, registered and defined as Airflow connections."""
    from streamrep.client.admin import StreamAdmin
    from streamrep.client.config import Clusters
    from streamrep.client.identity import current_identity

    home = tmp_path / "streamrep-home"
    monkeypatch.setenv("STREAMREP_HOME", str(home))
    for name in ("STREAMREP_DEFAULT_CLUSTER", "STREAMREP_SYNC"):
        monkeypatch.delenv(name, raising=False)
    clusters = Clusters()
    urls = {}
    for i, name in enumerate(streamrep_cluster_names):
        url = f"embedded:{tmp_path / 'clusters' / f'{name}.db'}"
        (tmp_path / "clusters").mkdir(exist_ok=True)
        admin = StreamAdmin(clusters, current_identity())
        admin.add_cluster(name, url, default=(i == 0))
        urls[name] = url
        monkeypatch.setenv(
            f"AIRFLOW_CONN_STREAMREP_{name.upper()}", json.dumps({"conn_type": "streamrep", "host": url})
        )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(LOCAL_SPARK))
    found = TestClusters(home=home, urls=urls, admin=StreamAdmin(clusters, current_identity()))
    yield found
    clusters.close()


@pytest.fixture
def streamrep_run_operator() -> Callable[..., Any]:
    """``run(operator, try_number=1)``: the operator's ``execute`` with a task context."""
    from airflow.sdk.bases.operator import ExecutorSafeguard

    def run(operator: Any, try_number: int = 1, **context: Any) -> Any:
        ti = SimpleNamespace(try_number=try_number, xcom_push=lambda *a, **k: None, task=operator)
        # As Airflow's task runner calls execute (task_runner._execute_task, Airflow 3.2 and 3.3): in a
        # copy of the context whose ExecutorSafeguard tracker names the task, so the safeguard does not
        # warn "cannot be called outside of the Task Runner!" and nothing leaks to the caller.
        call = contextvars.copy_context()
        call.run(ExecutorSafeguard.tracker.set, operator)
        task_context = {"ti": ti, "task": operator, "params": getattr(operator, "params", {}), **context}
        return call.run(operator.execute, task_context)

    return run


@pytest.fixture(scope="session")
def streamrep_airflow_db() -> None:
    """Airflow's metadata database, migrated once per session when it is a throwaway SQLite file
    inside ``AIRFLOW_HOME`` (never a database the session did not make)."""
    from airflow.configuration import conf
    from airflow.utils.db import initdb

    url = conf.get("database", "sql_alchemy_conn")
    if not url.startswith(f"sqlite:///{os.environ.get('AIRFLOW_HOME', '~')}/"):
        pytest.skip(
            f"streamrep_run_dag migrates only a throwaway SQLite database in AIRFLOW_HOME, not {url.split('@')[-1]}"
        )
    initdb()


def _serialize(dag: Any) -> None:
    """Write ``dag`` to the metadata database as the dag-processor would: ``dag.test()`` runs only
    serialized DAGs, and finds by itself only those of the dags folder, not one a test defines."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    manager = DagBundlesManager()  # type: ignore[no-untyped-call, unused-ignore]  # Airflow's __init__ is unannotated
    manager.sync_bundles_to_db()
    bundle = next(iter(manager.get_all_dag_bundles()))
    bag = DagBag(collect_dags=False)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, bundle.name, None)


@dataclass(frozen=True)
class DagResult:
    """A finished ``dag.test()`` run: its state and each task's."""

    state: str
    tasks: dict[str, str]

    def __str__(self) -> str:
        return f"{self.state}: " + ", ".join(f"{t}={s}" for t, s in sorted(self.tasks.items()))


@pytest.fixture
def streamrep_run_dag(streamrep_airflow_db: None) -> Callable[..., DagResult]:
    """``run(dag, conf=None)``: the DAG run by ``dag.test()``, as a :class:`DagResult`."""

    def run(dag: Any, conf: dict[str, Any] | None = None) -> DagResult:
        _serialize(dag)
        dag_run = dag.test(run_conf=conf or {})
        tasks = {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in dag_run.get_task_instances()}
        return DagResult(str(getattr(dag_run.state, "value", dag_run.state)), tasks)

    return run
