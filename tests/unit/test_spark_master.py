"""Where Spark runs: the CLI's ``-master``, ``STREAMREP_SPARK_MASTER``, and Airflow's ``spark_default``
connection, each reaching spark-submit's ``--master``; a bad master is one line before Spark starts."""

from __future__ import annotations

import io
import json
import os

import pytest

from streamrep.cli.main import run
from streamrep.errors import InvalidArgument
from streamrep.spark import command as spark_command
from streamrep.spark import lifetime

GOOD = (
    "local",
    "local[2]",
    "local[*]",
    "local[4,2]",
    "local-cluster[2,1,1024]",
    "spark://127.0.0.1:7077",
    "spark://master-a:7077,master-b:7077",
    "yarn",
    "k8s://https://10.0.0.1:6443",
)
BAD = (
    "locall",
    "local[x]",
    "local[2] ",
    "spark://127.0.0.1",
    "spark://h:7077/",
    "spark:/h:7077",
    "mesos://h:5050",
    "k8s://",
    "127.0.0.1:7077",
)


@pytest.mark.parametrize("master", GOOD)
def test_masters_spark_submit_takes_are_accepted(master, monkeypatch):
    monkeypatch.delenv("STREAMREP_SPARK_MASTER", raising=False)
    argv, _ = spark_command.spark_submit_command("copystream", ["--src", "a", "--dst", "b"], master=master)
    assert argv[argv.index("--master") + 1] == master


@pytest.mark.parametrize("master", BAD)
def test_a_bad_master_is_refused_before_spark_starts(master):
    with pytest.raises(InvalidArgument, match=r"^bad Spark master .*: expected local, local\[N\]"):
        spark_command.spark_submit_command("gateway", ["--cluster", "c"], master=master)


def test_the_master_comes_from_the_argument_then_the_environment_then_local(monkeypatch):
    monkeypatch.delenv("STREAMREP_SPARK_MASTER", raising=False)
    assert spark_command.master_url(None) == "local[2]"
    monkeypatch.setenv("STREAMREP_SPARK_MASTER", "spark://127.0.0.1:7077")
    assert spark_command.master_url(None) == "spark://127.0.0.1:7077"
    assert spark_command.master_url("local[1]") == "local[1]"
    argv, _ = spark_command.spark_submit_command("copystream", ["--numthreads", "3"])
    assert argv[argv.index("--master") + 1] == "spark://127.0.0.1:7077"  # not local[3]: a cluster was asked for
    monkeypatch.setenv("STREAMREP_SPARK_MASTER", "spark//typo")
    with pytest.raises(InvalidArgument, match="bad Spark master 'spark//typo'"):
        spark_command.master_url(None)


def test_the_executors_python_is_this_one_unless_told(monkeypatch):
    import sys

    monkeypatch.delenv("STREAMREP_SPARK_PYTHON", raising=False)
    assert spark_command.spark_conf()["spark.pyspark.python"] == sys.executable
    monkeypatch.setenv("STREAMREP_SPARK_PYTHON", "/opt/streamrep/bin/python")
    conf = spark_command.spark_conf()
    assert conf["spark.pyspark.python"] == "/opt/streamrep/bin/python"
    assert conf["spark.pyspark.driver.python"] == sys.executable  # the driver runs here, in this venv


@pytest.mark.parametrize(
    "command",
    [
        ("copystream", "-src", "/mapr/a/s", "-dst", "/mapr/b/s"),
        ("copystream", "-src", "/mapr/a/s", "-dst", "/mapr/b/s", "-engine", "local"),  # checked even when unused
        ("gateway", "run", "-cluster", "b"),
        ("stream", "replica", "autosetup", "-path", "/mapr/a/s", "-replica", "/mapr/b/s"),
    ],
)
def test_cli_master_option_bad_url_is_one_line(command, empty_home):
    out, err = io.StringIO(), io.StringIO()
    assert run([*command, "-master", "spark://127.0.0.1"], out, err) == 1
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "streamrep: error: bad Spark master 'spark://127.0.0.1': expected local, local[N], "
        "local[*], spark://HOST:PORT, yarn or k8s://https://HOST:PORT\n"
    )
    err = io.StringIO()
    assert run([*command, "-master", ""], io.StringIO(), err) == 1
    assert err.getvalue().startswith("streamrep: error: bad Spark master '': expected")


def test_cli_spark_commands_list_the_master_option():
    for command in (["copystream"], ["gateway", "run"], ["stream", "replica", "autosetup"]):
        out = io.StringIO()
        assert run(["help", *command], out, io.StringIO()) == 0
        assert "-master" in out.getvalue() and "local[2]" in out.getvalue()


# -- Airflow: the spark_default connection decides the master ---------------------------------------
@pytest.mark.parametrize(
    "connection",
    [
        json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077}),  # as the UI stores it
        "spark://127.0.0.1:7077",  # as a URI
    ],
)
def test_airflow_spark_default_connection_reaches_spark_submit_master(connection, monkeypatch):
    from streamrep.airflow.spark_operators import StreamCopyOperator, StreamGatewayOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", connection)
    monkeypatch.setenv("STREAMREP_SPARK_MASTER", "local[1]")  # only for when no connection is defined
    for op in (
        StreamCopyOperator(task_id="copy", source="/mapr/a/s", destination="/mapr/b/s"),
        StreamGatewayOperator(task_id="gw", cluster="b"),
    ):
        op._use_local_spark_if_unconfigured()  # what execute() does first: keeps a defined connection
        command = op._get_hook()._build_spark_submit_command("app.py")
        assert command[command.index("--master") + 1] == "spark://127.0.0.1:7077"


def test_airflow_without_spark_default_runs_on_streamrep_spark_master(monkeypatch):
    from streamrep.airflow.spark_operators import StreamCopyOperator

    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    monkeypatch.setenv("STREAMREP_SPARK_MASTER", "spark://127.0.0.1:7078")
    op = StreamCopyOperator(task_id="copy", source="/mapr/a/s", destination="/mapr/b/s")
    op._use_local_spark_if_unconfigured()
    command = op._get_hook()._build_spark_submit_command("app.py")
    assert command[command.index("--master") + 1] == "spark://127.0.0.1:7078"


# -- a job whose Popen another thread holds (the provider's hook): Tether ---------------------------
LEADER_IGNORES_TERM = "trap '' TERM; sleep 60 & wait"  # a shell that ignores SIGTERM, with a child that does too
CHILD_IGNORES_TERM = "(trap '' TERM; exec sleep 60) & wait"  # the shell goes at SIGTERM; its child does not


def _started(script, popen_options):
    """The job running ``script``, once its ``sleep`` runs, and its tree: pid to start time (so
    that a pid given to a later process is not taken for one of the job's)."""
    import subprocess
    import time
    from pathlib import Path

    proc = subprocess.Popen(["bash", "-c", script], **popen_options)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        tree = lifetime.job_processes(proc.pid)
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes() if lifetime._running(pid) else b"" for pid in tree]
        if any(command.startswith(b"sleep\0") for command in commands):
            break
        time.sleep(0.05)
    stats = {pid: lifetime._stat(pid) for pid in tree}
    return proc, {pid: stat[1] for pid, stat in stats.items() if stat}


def _lived_on(tree):
    """The processes of ``tree`` still running (pid, command line, state): none, once stopped."""
    return [lifetime.describe_process(pid) for pid, start in tree.items() if lifetime._running(pid, start)]


def test_a_tethered_job_reports_its_pid_and_stops_with_everything_it_started():
    """What the Airflow operators' on_kill relies on: the job, started with the Tether's Popen
    options by someone else's Popen, reports its pid; ``stop`` ends it and the processes it
    started (a child that ignores SIGTERM is killed after the grace), and returns only when they
    have all ended, leaving the exit status to whoever holds the Popen."""
    tether = lifetime.Tether()
    try:
        proc, tree = _started(LEADER_IGNORES_TERM, tether.popen_options())
        assert tether.pids() == [proc.pid] and tether.running() == [proc.pid] and len(tree) == 2
        assert tether.stop(grace=0.5) == [proc.pid]
        lived_on = _lived_on(tree)  # before anyone reaps the job
        assert not lived_on, f"stop returned while these still ran: {lived_on}"
        assert tether.running() == []
        assert proc.wait(10) != 0
    finally:
        tether.close()


@pytest.mark.parametrize("stopper", ["Tether.stop", "stop_job"])
def test_a_child_that_outlives_its_stopped_job_is_killed_too(stopper):
    """The job's own process ends at SIGTERM, a child of it ignores SIGTERM: after the grace the
    child is killed too, and the stop returns once it has ended."""
    tether, tree = lifetime.Tether(), {}
    try:
        options = tether.popen_options() if stopper == "Tether.stop" else lifetime.tether()
        proc, tree = _started(CHILD_IGNORES_TERM, options)
        assert len(tree) == 2
        if stopper == "Tether.stop":
            assert tether.stop(grace=0.5) == [proc.pid]
        else:
            assert lifetime.stop_job(proc, grace=0.5) == -15  # SIGTERM: the job's own exit status
        lived_on = _lived_on(tree)
        assert not lived_on, f"stop returned while these still ran: {lived_on}"
        assert proc.wait(10) == -15
    finally:
        for pid, start in tree.items():  # without the fix the child would sleep on for a minute
            if lifetime._running(pid, start):
                os.kill(pid, 9)
        tether.close()
