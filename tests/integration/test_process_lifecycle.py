"""No Spark job outlives its parent (issue 7, item 4).

A gateway or a copy started by the CLI, or by an Airflow operator, is killed through its parent
(SIGKILL, SIGTERM, or Airflow's ``on_kill``) while it replicates a backlog. Every process of the
job recorded before the kill (spark-submit's JVM, the Python driver, pyspark's daemons and
workers) must be gone within a bounded wait, the destination must stop growing, and a restart
must end with the destination exactly equal to the source: 0 lost, 0 duplicated.

The process tree is read from /proc here, independently of ``streamrep.spark.lifetime``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from replication_helpers import STREAMREP_EXE, USER, command, contents, count, produce

from streamrep.client import Clusters, StreamAdmin
from streamrep.errors import NotFound
from streamrep.model.ace import Identity
from streamrep.replication.gateway import HEARTBEAT_KIND

pytestmark = pytest.mark.slow

SF, NY = "sanfrancisco", "newyork"
SOURCE, REPLICA, COPY = f"/mapr/{SF}/activity", f"/mapr/{NY}/activity", f"/mapr/{NY}/activity-copy"
# Enough that the job is still replicating when it is killed (Spark moves ~20-100k messages/s here).
BACKLOG = 400_000
GONE_WITHIN = 90  # seconds for every process of a killed job to go: a bound, not a measurement


# -- processes -------------------------------------------------------------------------------
def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name: state, ppid, pgrp, ..."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def tree(pid: int) -> list[int]:
    """``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [pid], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def alive(pids: list[int]) -> list[int]:
    return [pid for pid in pids if (fields := _stat(pid)) is not None and fields[0] != "Z"]


def wait_for(condition, timeout: float, what: str, every: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class Job:
    """The processes of one Spark job, recorded while it runs, to check they all end.

    :param root: the job's parent (the CLI, a task process), or spark-submit itself.
    :param app: the Spark app the job runs.
    """

    def __init__(self, root: int, app: str):
        self.root, self.app = root, app
        self.pids: list[int] = []

    def record(self) -> None:
        """Record the job below (and with) the root: the JVM, the driver and pyspark's daemons."""
        pids = tree(self.root)
        commands = [command(p) for p in pids]
        assert any("java" in c and "SparkSubmit" in c for c in commands), commands
        assert any(f"spark_apps/{self.app}.py" in c for c in commands), commands
        assert any("pyspark.daemon" in c for c in commands), commands
        self.pids = [p for p in pids if p != self.root or "SparkSubmit" in command(p)]

    def assert_all_gone(self) -> None:
        try:
            wait_for(lambda: not alive(self.pids), GONE_WITHIN, "every process of the job to end")
        except AssertionError:
            raise AssertionError(f"survivors: {[(p, command(p)[:120]) for p in alive(self.pids)]}") from None


@pytest.fixture
def reaper():
    """Jobs a test starts; whatever survives the test is killed, so no process outlives it."""
    jobs: list[Job] = []
    yield jobs
    for job in jobs:
        for pid in alive([*job.pids, *tree(job.root)]):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


# -- streams ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def backlog_template(tmp_path_factory):
    """A STREAMREP_HOME made once per module (producing the backlog takes a while): SOURCE on
    sanfrancisco with BACKLOG messages, and REPLICA on newyork linked to it. Yields the home, the
    values sent, and SOURCE's values by ``(topic, partition)`` (the tests never change SOURCE)."""
    home = tmp_path_factory.mktemp("backlog") / "home"
    admin = StreamAdmin(Clusters(str(home)), Identity(USER))
    try:
        admin.clusters.add(SF)
        admin.clusters.add(NY)
        admin.create_stream(SOURCE, ttl=0)
        admin.create_topic(SOURCE, "clicks", 2)
        admin.create_stream(REPLICA, copymetafrom=SOURCE)
        admin.add_replica(SOURCE, REPLICA)
        admin.add_upstream(REPLICA, SOURCE)
        values = produce(admin, f"{SOURCE}:clicks", (f"m{i:07d}" for i in range(BACKLOG)))
        source = {k: [m.value for m in v] for k, v in contents(admin, SOURCE).items()}
    finally:
        admin.clusters.close()  # every SQLite file closed (and its WAL checkpointed) before copies
    yield SimpleNamespace(home=home, values=values, source=source)


@pytest.fixture
def backlog(backlog_template, streamrep_home, request):
    """A copy of the template's home as this test's STREAMREP_HOME: its own clusters' files, the
    registry pointing at them. Returns the ``api`` admin over it, the values sent and SOURCE's
    values by ``(topic, partition)``."""
    shutil.copytree(backlog_template.home, streamrep_home, dirs_exist_ok=True)
    registry = streamrep_home / "clusters.json"
    registry.write_text(registry.read_text().replace(str(backlog_template.home), str(streamrep_home)))
    admin = request.getfixturevalue("api")
    assert admin.clusters.embedded_file(SF, admin.clusters.get(SF).url).startswith(str(streamrep_home))
    return admin, backlog_template.values, backlog_template.source


def assert_same_as_source(admin, stream: str, values: list[str], source: dict) -> None:
    """``stream`` holds every source message once, in the source's partitions and order
    (``source``: the source's values by ``(topic, partition)``)."""
    dst = {k: [m.value for m in v] for k, v in contents(admin, stream).items()}
    held = [value.decode() for partition in dst.values() for value in partition]
    assert len(held) == len(set(held)) == len(values), f"{len(held)} held, {len(set(held))} distinct"
    assert set(held) == set(values)
    assert dst == source


def start_cli(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([str(STREAMREP_EXE), *args], env=env, stdout=out, stderr=out)


def held(admin, stream: str) -> int:
    """How many messages ``stream`` holds; 0 while it does not exist yet."""
    try:
        return count(admin, stream)
    except NotFound:
        return 0


def kill_mid_flight(parent: subprocess.Popen, job: Job, sig: int, admin, stream: str) -> int:
    """Once ``stream`` grows, record the job, signal its parent and wait until every process of
    the job is gone; returns what ``stream`` held then, after checking it no longer grows."""
    wait_for(lambda: held(admin, stream) > 0 or parent.poll() is not None, 600, f"{stream} to grow")
    assert parent.poll() is None, f"the job's parent exited early with {parent.returncode}"
    job.record()
    killed = time.monotonic()
    os.kill(parent.pid, sig)
    parent.wait(timeout=GONE_WITHIN)
    job.assert_all_gone()
    print(
        f"\n{signal.Signals(sig).name} of the parent: the job's {len(job.pids)} processes gone after "
        f"{time.monotonic() - killed:.1f}s"
    )
    at_stop = count(admin, stream)
    assert 0 < at_stop < BACKLOG, f"{at_stop} of {BACKLOG}: the job was not stopped mid-flight"
    time.sleep(1)  # nothing of the job runs any more: nothing may arrive
    assert count(admin, stream) == at_stop
    return at_stop


# -- the CLI ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_gateway_run_dies_with_the_cli_and_a_restart_is_exact(backlog, cli, child_env, tmp_path, reaper, sig):
    admin, values, source = backlog
    log = tmp_path / "gateway.log"
    parent = start_cli(["gateway", "run", "-cluster", NY, "-id", "g1", "-interval", "0.2"], child_env, log)
    reaper.append(job := Job(parent.pid, "gateway"))

    kill_mid_flight(parent, job, sig, admin, REPLICA)
    if sig != signal.SIGKILL:  # an orderly stop: the CLI's exit status, no traceback, the heartbeat withdrawn
        output = log.read_text()
        if sig == signal.SIGTERM:
            assert (parent.returncode, output.splitlines()[-1]) == (1, "streamrep: error: stopped by SIGTERM")
        else:
            assert parent.returncode == 130  # Ctrl-C, as for every command
        assert "Traceback" not in output
        assert "g1" not in admin.store(admin.path(REPLICA)).catalog_list(HEARTBEAT_KIND)

    # The restart on Spark after SIGKILL also meets the checkpoint the killed job left; the
    # stored positions are the same for either engine, so the other restarts run in-process.
    engine = "spark" if sig == signal.SIGKILL else "local"
    code, out, err = cli("gateway", "run", "-cluster", NY, "-id", "g1", "-once", "true", "-engine", engine, timeout=600)
    assert code == 0, err[-3000:]
    assert_same_as_source(admin, REPLICA, values, source)


def test_copystream_dies_with_the_cli_and_a_rerun_is_exact(backlog, cli, child_env, tmp_path, reaper):
    admin, values, source = backlog
    parent = start_cli(
        ["copystream", "-src", SOURCE, "-dst", COPY, "-engine", "spark"], child_env, tmp_path / "copy.log"
    )
    reaper.append(job := Job(parent.pid, "copystream"))
    kill_mid_flight(parent, job, signal.SIGKILL, admin, COPY)

    code, out, err = cli("copystream", "-src", SOURCE, "-dst", COPY, "-engine", "local", timeout=600)
    assert code == 0, err[-3000:]
    assert_same_as_source(admin, COPY, values, source)


# -- Airflow ---------------------------------------------------------------------------------
AIRFLOW_TASK = """
import sys
from types import SimpleNamespace
from streamrep.airflow.spark_operators import StreamGatewayOperator

StreamGatewayOperator(task_id="gateway", cluster=sys.argv[1], gateway_id="g1", interval=0.2).execute(
    {"ti": SimpleNamespace(try_number=1)})
"""


def test_gateway_operator_dies_with_its_task_process(backlog, cli, child_env, tmp_path, reaper):
    """The task process running the operator's execute is killed with SIGKILL (as Airflow's
    supervisor does last): its Spark job goes with it."""
    admin, values, source = backlog
    with open(tmp_path / "task.log", "wb") as out:
        parent = subprocess.Popen([sys.executable, "-c", AIRFLOW_TASK, NY], env=child_env, stdout=out, stderr=out)
    reaper.append(job := Job(parent.pid, "gateway"))

    kill_mid_flight(parent, job, signal.SIGKILL, admin, REPLICA)

    code, out, err = cli("gateway", "run", "-cluster", NY, "-id", "g1", "-once", "true", "-engine", "local")
    assert code == 0, err[-3000:]
    assert_same_as_source(admin, REPLICA, values, source)


def test_gateway_operator_on_kill_stops_the_whole_job(backlog, cli, child_env, monkeypatch, reaper):
    """Airflow's ``on_kill`` (a timeout, the task marked failed or success) stops the JVM, the
    driver and the workers; the task then fails."""
    from airflow.sdk.exceptions import AirflowException

    from streamrep.airflow.spark_operators import StreamGatewayOperator

    admin, values, source = backlog
    for name in ("STREAMREP_HOME", "STREAMREP_USER", "STREAMREP_GROUPS"):
        monkeypatch.setenv(name, child_env[name])
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    operator = StreamGatewayOperator(task_id="gateway", cluster=NY, gateway_id="g1", interval=0.2)
    outcome: list[BaseException | None] = []

    def task():
        try:
            operator.execute({"ti": SimpleNamespace(try_number=1)})
            outcome.append(None)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            outcome.append(err)

    runner = threading.Thread(target=task, name="airflow-task")
    runner.start()
    try:
        wait_for(lambda: count(admin, REPLICA) > 0 or not runner.is_alive(), 600, "the gateway to replicate")
        assert runner.is_alive(), outcome
        spark_submit = operator._hook._submit_sp
        reaper.append(job := Job(spark_submit.pid, "gateway"))
        job.record()
        operator.on_kill()
        job.assert_all_gone()
    finally:
        runner.join(GONE_WITHIN)
    assert not runner.is_alive()
    assert isinstance(outcome[0], AirflowException), outcome
    assert 0 < count(admin, REPLICA) < BACKLOG

    code, out, err = cli("gateway", "run", "-cluster", NY, "-id", "g1", "-once", "true", "-engine", "local")
    assert code == 0, err[-3000:]
    assert_same_as_source(admin, REPLICA, values, source)
