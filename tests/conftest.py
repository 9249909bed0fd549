"""Shared fixtures: an isolated STREAMREP_HOME with two embedded clusters, and admins.

``home`` sets ``STREAMREP_HOME`` with ``monkeypatch.setenv``, so code that builds its own
``Clusters()`` (the CLI, for example) sees the same registry as the test.
"""

from __future__ import annotations

import atexit
import faulthandler
import importlib.util
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

if "airflow" not in sys.modules:  # a throwaway Airflow home for in-process Airflow: never ~/airflow
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="streamrep-airflow-unit-")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import Clusters
from streamrep.model.ace import Identity

# The fixtures users get (opt-in, as in a user's repository): tests/unit/test_provider_distribution.py uses them.
pytest_plugins = ["streamrep.testing"]

ALICE = Identity(user="alice", groups=frozenset({"eng"}))
BOB = Identity(user="bob", groups=frozenset({"sales"}))
CAROL = Identity(user="carol", groups=frozenset({"eng"}))

# Environment variables that would change behaviour under test if the caller had them set.
_ISOLATED_ENV = ("STREAMREP_DEFAULT_CLUSTER", "STREAMREP_USER", "STREAMREP_GROUPS", "STREAMREP_SYNC")


_SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str):
    """``scripts/<name>.py`` as the module ``<name>`` (the scripts are not a package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


kafka_local = load_script("kafka_local")
wheel_envs = load_script("wheel_envs")

BACKENDS = ("embedded", "kafka")  # the cluster backends: ``add_cluster`` registers a cluster on each
# A Store with no cluster behind it (tests/store/memory_store.py): for the Store suites of tests/store alone.
STORE_ONLY_BACKENDS = ("memory",)
STORE_TESTS = Path(__file__).resolve().parent / "store"
# This worker's session-wide servers, each with its stop. ``session_servers_stopped`` stops them before
# the module that runs alone (``ALONE``), this worker's last: seven idle brokers took about a core.
SESSION_SERVERS: dict[str, Callable[[], object]] = {}


@pytest.fixture(scope="module")
def session_servers_stopped() -> None:
    """Stop this worker's session-wide servers (brokers, Spark): for the module that runs last and alone.
    A test after it that asked for one would get a stopped server."""
    for stop in SESSION_SERVERS.values():
        stop()
    SESSION_SERVERS.clear()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> str:
    """The bootstrap address (``127.0.0.1:<port>``) of one real Apache Kafka broker for the whole
    session (from ``scripts/kafka_local.py``, as ``./run kafka``), on free loopback ports in a
    temporary folder. Killed at session end, and by the kernel if the session itself is killed.

    Skips only when the install step could not get the jars; a broker that fails to start is an error.
    """
    missing = kafka_local.jars_missing_reason()
    if missing:
        pytest.skip(missing)
    port, controller_port = kafka_local.free_ports(2)
    broker = kafka_local.Broker("test", port, controller_port, tmp_path_factory.mktemp("kafka"))
    try:
        kafka_local.start(broker, die_with_parent=True)
        SESSION_SERVERS["kafka_broker"] = lambda: kafka_local.stop(broker, timeout=10)
        yield broker.bootstrap
    finally:
        kafka_local.stop(broker, timeout=10)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory) -> dict:
    """``{"sanfrancisco": SecureCluster, "newyork": SecureCluster}``: the two secured three-node
    clusters of ``./run kafka secure`` (``scripts/kafka_local.py``), on free loopback ports in a
    temporary folder, started together once per session. Clients connect with
    ``cluster.settings(principal)``. Killed at session end, and by the kernel if the session itself
    is killed. Tests may stop, kill and restart single brokers but leave all three running.

    Skips only when the install step could not get the jars; a cluster that fails to start is an error.
    """
    missing = kafka_local.jars_missing_reason()
    if missing:
        pytest.skip(missing)
    home = tmp_path_factory.mktemp("secure-kafka")
    ports = kafka_local.free_ports(12)  # held together, so the two clusters' ports differ
    clusters = {
        name: kafka_local.secure_cluster(name, ports[6 * i : 6 * i + 6], home / name)
        for i, name in enumerate(("sanfrancisco", "newyork"))
    }
    try:
        for cluster in clusters.values():
            kafka_local.start_secure(cluster, die_with_parent=True)
        SESSION_SERVERS["secure_kafka"] = lambda: [kafka_local.stop_secure(c, timeout=10) for c in clusters.values()]
        yield clusters
    finally:
        for cluster in clusters.values():
            kafka_local.stop_secure(cluster, timeout=10)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone cluster for the whole session: a master and one worker (2 cores) from
    pyspark's own ``spark-class`` (``scripts/spark_local.py``, as ``./run spark``), on free loopback
    ports in a temporary folder. The daemons' environment has no PYTHONPATH, so executors import
    streamrep only from the Python they run. Killed at session end, and by the kernel if the session
    itself is killed. Yields ``spark_local.Cluster`` (``master_url``, ``webui``, ``work_dir``).
    """
    if shutil.which("java") is None:
        pytest.skip("java is not on PATH")
    spark_local = load_script("spark_local")  # loaded here: the Kafka install tests copy only kafka_local
    port, webui_port, worker_webui_port = kafka_local.free_ports(3)
    cluster = spark_local.Cluster(port, webui_port, worker_webui_port, tmp_path_factory.mktemp("spark"))
    try:
        spark_local.start(cluster, die_with_parent=True)
        SESSION_SERVERS["spark_cluster"] = lambda: spark_local.stop(cluster, timeout=10)
        yield cluster
    finally:
        spark_local.stop(cluster, timeout=10)


def pytest_sessionstart(session):
    """A test worker that dies of a signal (a fault in a C library) leaves its threads' stacks in a
    file that the controller prints (``pytest_terminal_summary``): pytest's own faulthandler writes
    to the worker's stderr, which xdist does not show. xdist names the test; this says where it was."""
    workerinput = getattr(session.config, "workerinput", None)
    if workerinput is not None and os.environ.get(CRASH_DIR):
        log = open(Path(os.environ[CRASH_DIR]) / f"{workerinput['workerid']}-{os.getpid()}.log", "w")  # noqa: SIM115
        faulthandler.enable(file=log, all_threads=True)


def _exit_finished_worker() -> None:
    """End a test worker once its session is over and reported. pytest-xdist would keep it until the
    whole run ends, and librdkafka clients the tests left open keep reconnecting to the brokers its
    session stopped: in one CI rehearsal such a worker took both cores (143 clients) while the other
    built and started the compose stack, which then timed out (docs/platform.md). The controller has
    its ``workerfinished`` by now, and ignores the channel's end after it."""
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(0)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if getattr(config, "workerinput", None) is None:  # the controller, before it starts the workers
        os.environ[CRASH_DIR] = tempfile.mkdtemp(prefix="streamrep-crash-")  # they inherit it
    else:  # the first cleanup added is the last run, after every plugin's own
        config.add_cleanup(_exit_finished_worker)
    # A runner may start the suite as a background job of a non-interactive shell, which ignores
    # SIGINT, and every child would inherit that: the Ctrl-C tests' commands would never see it.
    # A terminal's Ctrl-C reaches a foreground command with the default disposition; a Python
    # handler here is reset to that in each child at exec (an ignored signal would stay ignored).
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "backends(*names): run the test on each named cluster backend "
        "(embedded, kafka; memory in tests/store); its clusters come from the home fixture",
    )
    config.addinivalue_line(
        "markers",
        "secure_kafka: needs the secured three-node Kafka clusters of the "
        "secure_kafka fixture (skipped when the Kafka jars are not installed)",
    )


CRASH_DIR = "STREAMREP_TEST_CRASH_DIR"


def pytest_terminal_summary(terminalreporter):
    crash_dir = os.environ.get(CRASH_DIR)
    if hasattr(terminalreporter.config, "workerinput") or not crash_dir or not os.path.isdir(crash_dir):
        return
    for log in sorted(Path(crash_dir).glob("*.log")):
        text = log.read_text(errors="replace").strip()
        if text:
            terminalreporter.write_sep("=", f"worker {log.stem} died; its threads then")
            terminalreporter.write_line(text[-6000:])


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get(CRASH_DIR):
        shutil.rmtree(os.environ.pop(CRASH_DIR), ignore_errors=True)


SECURE_FILES = "test_secure_"  # the modules that use the secure_kafka fixture
# The secured modules, one after the other on one worker (a lane of their own): each worker that used
# the session's ``secure_kafka`` fixture would start six brokers of its own.
HEAVY_LANE = SECURE_FILES
# The compose stack (twelve containers, images built from scratch) runs last, alone: beside the other
# modules it took 25 minutes of a CI run at a load average of 15-40, and slowed them; alone 7.5.
ALONE = "tests/e2e/test_stack.py"
# The modules that take longest, longest first (the heavy lane's first). pytest-xdist hands modules
# out in collection order, so these start at once and the short ones fill in at the end: the run
# no longer ends with one worker on a long module and the other idle.
LONGEST_FIRST = (
    "tests/kafka/test_secure_",
    "tests/e2e/test_wheel_install.py",
    "tests/e2e/test_airflow_e2e.py",
    "tests/e2e/test_airflow_production.py",
    "tests/kafka/test_kafka_releases.py",
    "tests/kafka/test_kafka_faults.py",
    "tests/integration/test_spark.py",
    "tests/e2e/test_demo.py",
    "tests/e2e/test_airflow_kafka_e2e.py",
)


def _longest_first(item: pytest.Item) -> int:
    path = item.nodeid.split("::")[0]
    if path == ALONE:
        return len(LONGEST_FIRST) + 1
    return next((rank for rank, prefix in enumerate(LONGEST_FIRST) if path.startswith(prefix)), len(LONGEST_FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_longest_first)  # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)  # xdist's hook: -p no:xdist runs without it
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's loadfile, except that the ``HEAVY_LANE`` modules are one unit of work, run by one
    worker in collection order, and the ``ALONE`` module waits until every other module is done (each
    worker holds back only its last test), then runs on one worker (not the heavy lane's, when it can)
    while the others finish and stop."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    config.option.loadscopereorder = False  # keep LONGEST_FIRST's order, not the most tests first

    class Lanes(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return "the heavy lane" if os.path.basename(scope).startswith(HEAVY_LANE) else scope

        def _assign_work_unit(self, node) -> None:
            first = next((scope for scope in self.workqueue if scope != ALONE), None)
            if first is not None:  # any other unit first: one a crashed worker gave back is queued after ALONE
                self.workqueue.move_to_end(first, last=False)
                super()._assign_work_unit(node)
                return
            # A worker runs its last test only once it gets more work or is shut down: 1 pending is idle.
            if any(self._pending_of(work) > 1 for work in self.assigned_work.values()):
                return
            # To a worker that did not start the secured clusters, if one is still there (it stops its
            # own session servers first: ``session_servers_stopped``), the others shut down.
            idle = [n for n in self.nodes if not n.shutting_down]
            lighter = [n for n in idle if "the heavy lane" not in self.assigned_work[n]]
            chosen = node if node in lighter or not lighter else lighter[0]
            super()._assign_work_unit(chosen)
            for other in idle:
                if other is not chosen:
                    other.shutdown()

    return Lanes(config, log)


def pytest_generate_tests(metafunc):
    """Tests marked ``backends(...)`` run once per backend: the ``backend`` fixture decides what
    ``home`` registers. A Kafka run is also marked ``kafka``. ``STORE_ONLY_BACKENDS`` have no
    cluster to register: only tests/store may name them."""
    marker = metafunc.definition.get_closest_marker("backends")
    if marker is not None and "backend" in metafunc.fixturenames:
        names = marker.args or BACKENDS
        if set(names) & set(STORE_ONLY_BACKENDS) and not metafunc.definition.path.is_relative_to(STORE_TESTS):
            raise pytest.UsageError(f"{metafunc.definition.nodeid}: {STORE_ONLY_BACKENDS} are for tests/store only")
        metafunc.parametrize(
            "backend", [pytest.param(n, marks=[pytest.mark.kafka] if n == "kafka" else []) for n in names]
        )


@pytest.fixture
def backend() -> str:
    """The backend of the clusters ``home`` registers: embedded unless the test is marked ``backends``."""
    return "embedded"


def delete_namespace(bootstrap: str, namespace: str) -> None:
    """Delete every Kafka topic of a streamrep namespace (its streams' and its internal ones)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [
        n
        for n in admin.list_topics(timeout=30).topics
        if n.startswith(f"{namespace}.") or n.startswith(f"_streamrep.{namespace}.")
    ]
    if names:
        for future in admin.delete_topics(names, request_timeout=30).values():
            try:
                future.result()
            except Exception:  # noqa: BLE001 - best effort: the broker is discarded at session end anyway
                pass


@pytest.fixture
def kafka_namespace(kafka_broker):
    """``kafka_namespace() -> name``: a fresh streamrep namespace on the session broker, whose
    topics are deleted after the test. (Test modules cannot import this conftest by name: the
    integration folder has a conftest of its own.)"""
    made = []

    def new() -> str:
        made.append(f"t{uuid.uuid4().hex[:10]}")
        return made[-1]

    yield new
    for namespace in made:
        delete_namespace(kafka_broker, namespace)


@pytest.fixture
def add_cluster(request, backend):
    """``add_cluster(clusters, name)``: register cluster ``name`` on the test's backend. A Kafka
    cluster is a namespace of its own on the session's broker, deleted after the test."""
    namespaces = []

    def add(clusters: Clusters, name: str, **kwargs):
        if backend == "embedded":
            return clusters.add(name, **kwargs)
        bootstrap = request.getfixturevalue("kafka_broker")
        namespace = f"t{uuid.uuid4().hex[:10]}-{name}"
        namespaces.append((bootstrap, namespace))
        return clusters.add(name, url=f"kafka://{bootstrap}", settings={"streamrep.namespace": namespace}, **kwargs)

    yield add
    for bootstrap, namespace in namespaces:
        delete_namespace(bootstrap, namespace)


@pytest.fixture
def empty_home(tmp_path, monkeypatch) -> Clusters:
    """A fresh STREAMREP_HOME with no cluster registered."""
    home = tmp_path / "streamrep-home"
    monkeypatch.setenv("STREAMREP_HOME", str(home))
    for name in _ISOLATED_ENV:
        monkeypatch.delenv(name, raising=False)
    clusters = Clusters()
    yield clusters
    clusters.close()


@pytest.fixture
def home(empty_home, add_cluster) -> Clusters:
    """STREAMREP_HOME with the clusters ``sanfrancisco`` (the default) and ``newyork``: embedded,
    or Kafka clusters on the session's broker for a test marked ``backends``."""
    add_cluster(empty_home, "sanfrancisco")
    add_cluster(empty_home, "newyork")
    return empty_home


@pytest.fixture
def admin(home) -> StreamAdmin:
    """The admin API as alice (group ``eng``)."""
    return StreamAdmin(home, ALICE)


@pytest.fixture
def bob(home) -> StreamAdmin:
    """The admin API as bob (group ``sales``): owns nothing alice creates."""
    return StreamAdmin(home, BOB)


@pytest.fixture
def carol(home) -> StreamAdmin:
    """The admin API as carol: not alice, but in alice's group ``eng``."""
    return StreamAdmin(home, CAROL)


class SilentBroker:
    """A TCP server that accepts connections and never answers: a Kafka cluster that hangs."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent_broker():
    """A Kafka "cluster" that accepts connections and never answers (``SilentBroker``)."""
    broker = SilentBroker()
    yield broker
    broker.close()
