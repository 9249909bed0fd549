"""A local Spark standalone cluster (one master, one worker) for tests and demos: start, stop, status.

The one copy of that logic. ``./run spark [start|stop|status]`` calls the command line below; the
test fixture ``spark_cluster`` in ``tests/conftest.py`` imports :func:`start` and :func:`stop`. Both
daemons run from pyspark's own ``bin/spark-class`` and jars (pyspark ships no ``sbin/start-*.sh``),
bound to 127.0.0.1, with everything they write under one folder.

    python scripts/spark_local.py start | stop | status
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from streamrep.errors import StreamrepError

# The process helpers are kafka_local's (this folder is on sys.path when a script runs; the test
# fixture loads kafka_local first).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_local import _alive, _die_with_parent, _port_open, _relative, _stop_pid  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
LOCAL_HOME = REPO / ".spark-local"
# ./run spark: master port, master web UI, worker web UI
LOCAL_PORTS = (17077, 18080, 18081)

START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
DAEMON_HEAP = "512m"  # each daemon; executors get their own JVMs (spark.executor.memory)
# The daemons' environment never carries these from the caller: what the executors import must
# come from the Python they run (its installed packages), not from the shell that started the worker.
SCRUBBED_ENV = ("PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_CONF_DIR")


class SparkLocalError(StreamrepError):
    """A local Spark master or worker could not be started or stopped."""


@dataclass(frozen=True)
class Cluster:
    """A standalone master and one worker on loopback, everything they write under ``home``.

    :param port: the master's port (``spark://127.0.0.1:<port>``)
    :param webui_port: the master's web UI (its JSON status at ``/json/``)
    :param worker_webui_port: the worker's web UI
    :param home: folder for ``spark-defaults.conf``, ``logs/``, ``work/`` (the executors' folders) and pid files
    :param cores: cores the worker offers
    :param memory: memory the worker offers to executors
    """

    port: int
    webui_port: int
    worker_webui_port: int
    home: Path
    cores: int = 2
    memory: str = "2g"

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    @property
    def properties_file(self) -> Path:
        return self.home / "spark-defaults.conf"

    @property
    def work_dir(self) -> Path:
        return self.home / "work"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    def pid_file(self, role: str) -> Path:
        return self.home / f"{role}.pid"

    def log_file(self, role: str) -> Path:
        return self.log_dir / f"{role}.log"


def local_cluster() -> Cluster:
    """``./run spark``'s cluster."""
    port, webui, worker_webui = LOCAL_PORTS
    return Cluster(port, webui, worker_webui, LOCAL_HOME)


def spark_home() -> Path:
    """pyspark's folder: its ``bin/spark-class`` and ``jars/`` are a whole Spark distribution."""
    try:
        import pyspark
    except ImportError:
        raise SparkLocalError("pyspark is not installed in this Python: run ./run spark, which installs it") from None
    return Path(pyspark.__file__).parent


def _properties(cluster: Cluster) -> str:
    return "\n".join(
        [
            # The master's REST submission server would take the fixed port 6066: not needed (spark-submit
            # uses the master's RPC port in client mode), and two clusters on one machine would clash.
            "spark.master.rest.enabled false",
            "",
        ]
    )


def daemon_env(cluster: Cluster, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the master and the worker: the caller's, without the Python settings of
    ``SCRUBBED_ENV``, with SPARK_HOME at pyspark and every address on loopback."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in SCRUBBED_ENV}
    env["SPARK_HOME"] = str(spark_home())
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    env["SPARK_DAEMON_MEMORY"] = DAEMON_HEAP
    env["SPARK_LOG_DIR"] = str(cluster.log_dir)
    return env


def _command(cluster: Cluster, role: str) -> list[str]:
    spark_class = str(spark_home() / "bin" / "spark-class")
    common = ["--host", "127.0.0.1", "--properties-file", str(cluster.properties_file)]
    if role == "master":
        return [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            *common,
            "--port",
            str(cluster.port),
            "--webui-port",
            str(cluster.webui_port),
        ]
    return [
        spark_class,
        "org.apache.spark.deploy.worker.Worker",
        *common,
        "--cores",
        str(cluster.cores),
        "--memory",
        cluster.memory,
        "--webui-port",
        str(cluster.worker_webui_port),
        "--work-dir",
        str(cluster.work_dir),
        cluster.master_url,
    ]


def running_pid(cluster: Cluster, role: str) -> int | None:
    """The pid of ``cluster``'s ``role`` (master or worker) JVM while it runs, else ``None``.

    A pid counts only while its command line names this cluster's properties file, so a reused
    pid is never signalled."""
    try:
        pid = int(cluster.pid_file(role).read_text().strip())
    except (OSError, ValueError):
        return None
    if not _alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if str(cluster.properties_file).encode() in cmdline else None


def master_status(cluster: Cluster, timeout: float = 2.0) -> dict | None:
    """The master's JSON status (workers, active and completed applications), or ``None`` while it
    does not answer."""
    if not _port_open(cluster.webui_port):
        return None
    try:
        with urllib.request.urlopen(f"{cluster.webui}/json/", timeout=timeout) as response:
            return json.load(response)
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _worker_alive(status: dict | None, cluster: Cluster) -> bool:
    return bool(status) and any(
        w.get("state") == "ALIVE" and w.get("webuiaddress", "").endswith(f":{cluster.worker_webui_port}")
        for w in status.get("workers", [])
    )


def _launch(cluster: Cluster, role: str, env: Mapping[str, str], die_with_parent: bool) -> subprocess.Popen | None:
    if running_pid(cluster, role) is not None:
        return None
    with cluster.log_file(role).open("ab") as log:
        process = subprocess.Popen(
            _command(cluster, role),
            env=dict(env),
            cwd=cluster.home,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    cluster.pid_file(role).write_text(f"{process.pid}\n")
    return process


def _last_error_line(cluster: Cluster, role: str) -> str:
    try:
        lines = [
            line
            for line in cluster.log_file(role).read_text(errors="replace").splitlines()
            if " ERROR " in line or "Exception" in line
        ]
    except OSError:
        return ""
    return f": {lines[-1].strip()[:300]}" if lines else ""


def _wait(cluster: Cluster, role: str, process: subprocess.Popen | None, ready, deadline: float) -> None:
    while not ready():
        exited = process.poll() if process is not None else (None if running_pid(cluster, role) else "?")
        if exited is not None:
            raise SparkLocalError(
                f"spark {role} exited while starting (status {exited})"
                f"{_last_error_line(cluster, role)}; see {_relative(cluster.log_file(role))}"
            )
        if time.monotonic() > deadline:
            raise SparkLocalError(
                f"spark {role} not ready after {START_TIMEOUT_S:.0f} s; see {_relative(cluster.log_file(role))}"
            )
        time.sleep(0.25)


def start(
    cluster: Cluster,
    *,
    env: Mapping[str, str] | None = None,
    die_with_parent: bool = False,
    timeout: float = START_TIMEOUT_S,
) -> bool:
    """Start the master, then the worker, and wait until the worker is registered and alive.

    :param env: the daemons' environment (default :func:`daemon_env` of this process's)
    :param die_with_parent: kill both daemons when the calling process dies (test sessions)
    :returns: ``True`` if anything was started now, ``False`` if both were already running
    :raises SparkLocalError: no java, a port taken by another process, or a daemon that did not come up
        (whatever this call started is stopped again)
    """
    if shutil.which("java", path=(env or os.environ).get("PATH")) is None:
        raise SparkLocalError("java (17 or newer) is not on PATH")
    env = daemon_env(cluster) if env is None else dict(env)
    cluster.home.mkdir(parents=True, exist_ok=True)
    cluster.log_dir.mkdir(parents=True, exist_ok=True)
    cluster.work_dir.mkdir(parents=True, exist_ok=True)
    cluster.properties_file.write_text(_properties(cluster))
    started: list[tuple[str, subprocess.Popen]] = []
    deadline = time.monotonic() + timeout
    try:
        for role, ports, ready in (
            ("master", (cluster.port, cluster.webui_port), lambda: master_status(cluster) is not None),
            ("worker", (cluster.worker_webui_port,), lambda: _worker_alive(master_status(cluster), cluster)),
        ):
            if running_pid(cluster, role) is None:
                taken = [p for p in ports if _port_open(p)]
                if taken:
                    raise SparkLocalError(f"spark {role}: port {taken[0]} is already in use by another process")
            process = _launch(cluster, role, env, die_with_parent)
            if process is not None:
                started.append((role, process))
            _wait(cluster, role, process, ready, deadline)
    except BaseException:
        for role, process in reversed(started):
            _stop_pid(process.pid, process)
            cluster.pid_file(role).unlink(missing_ok=True)
        raise
    return bool(started)


def stop(cluster: Cluster, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop the worker, then the master, if they run.

    :returns: ``True`` if either was running
    """
    was_running = False
    for role in ("worker", "master"):
        pid = running_pid(cluster, role)
        if pid is not None:
            was_running = True
            _stop_pid(pid, timeout=timeout)
        cluster.pid_file(role).unlink(missing_ok=True)
    return was_running


# ---------------------------------------------------------------- ./run spark


def _main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    cluster = local_cluster()
    if command == "start":
        started = start(cluster)
        print(
            f"spark: {'started' if started else 'already running'}: master {cluster.master_url}, "
            f"web UI {cluster.webui}, one worker ({cluster.cores} cores, {cluster.memory}); "
            f"logs and executors' folders in {_relative(cluster.home)}/"
        )
        print(f"use it with: streamrep copystream ... -engine spark -master {cluster.master_url}")
        return 0
    if command == "stop":
        print(f"spark: {'stopped' if stop(cluster) else 'was not running'}")
        return 0
    if command == "status":
        pids = {role: running_pid(cluster, role) for role in ("master", "worker")}
        status = master_status(cluster)
        for role, pid in pids.items():
            if pid is None:
                print(f"spark {role}: down")
            elif role == "master":
                print(
                    f"spark master: {'up' if status else 'starting or not answering'} at {cluster.master_url} "
                    f"(web UI {cluster.webui}, pid {pid})"
                )
            else:
                state = "up" if _worker_alive(status, cluster) else "not registered with the master"
                print(f"spark worker: {state} (pid {pid})")
        if status:
            print(
                f"applications: {len(status.get('activeapps', []))} running, "
                f"{len(status.get('completedapps', []))} completed"
            )
        return 0 if all(pids.values()) and _worker_alive(status, cluster) else 3
    print("usage: ./run spark [start|stop|status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(_main(sys.argv[1:]))
    except SparkLocalError as err:
        print(f"run: {err}", file=sys.stderr)
        sys.exit(1)
