"""Building and running ``spark-submit`` for the Spark apps (``copystream``, ``gateway``, ``diffstreams``).

``application(app, args)`` gives what Airflow's SparkSubmitOperator needs (application path,
application args, conf); ``spark_submit_command`` the full command and environment for a
local run; ``run_app`` / ``start_app`` run it.

A job never outlives the process that started it: ``tether()`` gives the ``subprocess.Popen``
options every launch uses (the CLI's and the Airflow operators'), and ``stop_job`` stops a job
with everything it started. See "the job's lifetime" below for why these mechanisms.

The apps' one source is the repository's ``spark_apps/`` folder. The wheel carries it as package
data (``streamrep/spark_apps/``); a folder deployment has it beside the folder that holds the
package (``plugins/`` and ``spark_apps/``); ``STREAMREP_SPARK_APPS`` overrides both. The master is ``local[2]`` unless ``STREAMREP_SPARK_MASTER`` or ``master`` says
otherwise (``spark://host:port`` for a standalone cluster). Every Python process Spark starts runs
this interpreter (the venv that has streamrep and pyarrow) unless ``STREAMREP_SPARK_PYTHON`` names
the Python of the cluster's workers, and ``spark-submit`` is taken from this venv first.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from streamrep.client.identity import LAUNCHER_USER, current_identity, named_user
from streamrep.errors import InvalidArgument, Misinstalled, StreamrepError
from streamrep.replication.copy import CopySummary


class Terminated(StreamrepError):
    """The launcher was asked to stop (SIGTERM, SIGHUP) while its Spark job ran; the job was
    stopped first."""


APPS = ("copystream", "gateway", "diffstreams")
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # warnings only, on stderr
LOG_JAVA_OPTIONS = f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"  # the driver JVM's option for it
DEFAULT_MASTER = "local[2]"
# The masters spark-submit accepts (Spark 4 has no Mesos): local[N], local[*], local[N,F]
# (F task failures allowed), local-cluster[W,C,M], spark://host:port[,host:port] (standby
# masters), yarn, k8s://[http[s]://]host[:port].
MASTER_FORMS = "local, local[N], local[*], spark://HOST:PORT, yarn or k8s://https://HOST:PORT"
_HOST_PORT = r"[A-Za-z0-9._\-]+:\d{1,5}"
_MASTER = re.compile(
    r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]"
    rf"|spark://{_HOST_PORT}(,{_HOST_PORT})*|yarn|k8s://(https?://)?[A-Za-z0-9._\-]+(:\d{{1,5}})?(/\S*)?"
)
DEFAULT_INTERVAL = 0.5  # seconds between gateway micro-batches
JVM_NOISE = "WARNING: Using incubator modules"  # printed by every Java 17 start; says nothing

# Settings for a small local Spark: the Python data source runs in Python workers, which must
# be reused (starting them per task made the pipeline 4x slower), and a batch has no shuffle.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",  # nothing to adapt (no shuffle), and streaming refuses it
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "false",
    # How long the JVM waits for the Python driver to connect to it (collect, parallelize,
    # broadcast: SocketAuthServer) and a Python worker waits to connect and authenticate
    # (SPARK_AUTH_SOCKET_TIMEOUT). The default, 15 s, is short for a loaded machine, where a
    # Python process may get no CPU for seconds. (The 10 s Spark gives a new simple worker,
    # such as a streaming source's, to connect back is fixed: no setting changes it.)
    "spark.python.authenticate.socketTimeout": "120s",
}


# Per app, under the caller's conf. copystream's JVM only plans and schedules (its tasks read and
# apply in Python workers), so its start dominates: the C1 compiler alone and the serial GC cut
# the JVM's CPU for a copy about 40% (27 s to 15 s, measured on a loaded 2-core machine). The
# long-running gateway keeps the default JIT, as its JVM moves every row. diffstreams' JVM, as
# copystream's, only schedules tasks that read in Python workers.
_PLANNING_JVM = {"spark.driver.defaultJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
APP_CONF: dict[str, dict[str, str]] = {"copystream": _PLANNING_JVM, "diffstreams": _PLANNING_JVM}
THREADED_APPS = ("copystream", "diffstreams")  # their --numthreads N is a local master's thread count


def executor_python() -> str:
    """The Python the executors run, on every worker: ``STREAMREP_SPARK_PYTHON``, else this
    interpreter (on a cluster, the same path must then exist on the workers)."""
    return os.environ.get("STREAMREP_SPARK_PYTHON") or sys.executable


def python_env() -> dict[str, str]:
    """Environment every Spark process needs so that its Python workers import streamrep:
    this interpreter (the venv's, which has pyarrow and streamrep) for drivers and workers."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def spark_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    merged = dict(DEFAULT_CONF)
    merged["spark.pyspark.python"] = executor_python()
    merged["spark.pyspark.driver.python"] = sys.executable
    # Executors check permissions too (each copy task, each gateway): as the launching caller,
    # not as whatever OS user a cluster's workers run as.
    identity = current_identity()
    # A named user stays named; the OS user stands in for the executor's OS user without naming
    # anyone, so a cluster that authenticates its own principal is not refused.
    merged[f"spark.executorEnv.{'STREAMREP_USER' if named_user() else LAUNCHER_USER}"] = identity.user
    merged["spark.executorEnv.STREAMREP_GROUPS"] = " ".join(sorted(identity.groups))
    for key, value in package_path().items():
        merged[f"spark.executorEnv.{key}"] = value
    merged.update(conf or {})
    return merged


def check_master(master: str) -> str:
    """``master`` if spark-submit would accept it as ``--master``, else InvalidArgument (before
    Spark starts: spark-submit's own message is a JVM stack trace)."""
    if not _MASTER.fullmatch(master):
        raise InvalidArgument(f"bad Spark master {master!r}: expected {MASTER_FORMS}")
    return master


def master_url(master: str | None = None) -> str:
    """The Spark master: ``master``, else ``STREAMREP_SPARK_MASTER``, else ``local[2]``; checked."""
    return check_master(master or os.environ.get("STREAMREP_SPARK_MASTER") or DEFAULT_MASTER)


PACKAGE_DIR = Path(__file__).resolve().parent.parent  # streamrep/
PACKAGE_ROOT = PACKAGE_DIR.parent  # the folder that holds it: site-packages, or a plugins folder


def apps_dirs() -> list[Path]:
    """Where the app scripts are looked for, in order: ``STREAMREP_SPARK_APPS`` alone if set;
    else the wheel's package data, then ``spark_apps/`` beside the package's folder (a folder
    deployment, and this repository)."""
    override = os.environ.get("STREAMREP_SPARK_APPS")
    if override:
        return [Path(override)]
    return [PACKAGE_DIR / "spark_apps", PACKAGE_ROOT.parent / "spark_apps"]


def app_path(app: str) -> str:
    if app not in APPS:
        raise InvalidArgument(f"unknown Spark app {app!r}: expected one of {', '.join(APPS)}")
    dirs = apps_dirs()
    for folder in dirs:
        if (folder / f"{app}.py").is_file():
            return str(folder / f"{app}.py")
    fix = (
        f"point STREAMREP_SPARK_APPS at a folder holding {', '.join(f'{a}.py' for a in APPS)}"
        if os.environ.get("STREAMREP_SPARK_APPS")
        else "mount spark_apps/ beside plugins/, set STREAMREP_SPARK_APPS, or pip install --force-reinstall streamrep"
    )
    raise Misinstalled(f"Spark app {app}.py not found in {' or '.join(map(str, dirs))}: {fix}")


def installed_as_package() -> bool:
    """Whether the package is where every Python of this interpreter finds it anyway
    (site-packages), as opposed to a plugins folder Airflow added to ``sys.path`` itself."""
    import site

    roots = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return PACKAGE_ROOT in roots


def package_path(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``PYTHONPATH`` for a driver and executors that must import a package that is not installed
    (a folder deployment), with what ``env`` already has after it; empty when it is installed."""
    if installed_as_package():
        return {}
    existing = (os.environ if env is None else env).get("PYTHONPATH", "")
    return {"PYTHONPATH": os.pathsep.join(p for p in [str(PACKAGE_ROOT), existing] if p)}


def application(
    app: str,
    args: Sequence[str] = (),
    conf: Mapping[str, str] | None = None,
) -> tuple[str, list[str], dict[str, str]]:
    """``(application path, application args, conf)`` for spark-submit or SparkSubmitOperator
    (``conf`` over the app's ``APP_CONF`` over ``spark_conf``'s)."""
    path = app_path(app)
    return path, [str(a) for a in args], spark_conf({**APP_CONF.get(app, {}), **(conf or {})})


def _numthreads(app: str, args: Sequence[str]) -> int | None:
    """copystream's and diffstreams' ``--numthreads N``: the thread count of a local master."""
    args = list(args)
    for i, arg in enumerate(args):
        if app in THREADED_APPS and arg == "--numthreads" and i + 1 < len(args):
            try:
                return max(1, int(args[i + 1]))
            except ValueError:
                return None
        if app in THREADED_APPS and arg.startswith("--numthreads="):
            try:
                return max(1, int(arg.split("=", 1)[1]))
            except ValueError:
                return None
    return None


def require_java(env: Mapping[str, str] | None = None) -> str:
    """The ``java`` spark-submit will run (``JAVA_HOME/bin/java``, else ``java`` on PATH), or
    Misinstalled naming the fix: without it spark-submit fails with a shell error, not this line."""
    env = os.environ if env is None else env
    java_home = env.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java", path=env.get("PATH", ""))
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={java_home} has no bin/java" if java_home else "no java on PATH"
        raise Misinstalled(
            f"Spark needs Java on this worker ({where}): install a JRE 17 or 21 "
            f"(apt-get install default-jre-headless) or set JAVA_HOME"
        )
    return java


def require_matching_pyspark(package_dir: str | None = None, version: str | None = None) -> None:
    """Misinstalled when pyspark's Python files are not the release of its jars: the Spark
    provider's dependency pyspark-client installs an older copy of the same files over pyspark's,
    and jobs then fail in Spark's Python workers far from the cause."""
    if package_dir is None:
        import pyspark

        package_dir, version = os.path.dirname(pyspark.__file__), pyspark.__version__
    cores = sorted(Path(package_dir, "jars").glob("spark-core_*.jar"))
    if not cores:
        return  # pyspark-client alone (Spark Connect): no local Spark to compare with
    jars = cores[0].stem.rsplit("-", 1)[-1]
    if jars != version:
        raise Misinstalled(
            f"pyspark's Python files are {version} but its jars are {jars} (pyspark-client, which the "
            f"Spark provider requires, overwrote them): pip install --force-reinstall --no-deps "
            f"pyspark=={jars}"
        )


def submit_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of spark-submit: this venv's bin first on PATH, SPARK_HOME at this
    venv's pyspark, and this interpreter for the driver and the workers."""
    env = dict(os.environ if base is None else base)
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join(
        [venv_bin, *[p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]]
    )
    try:
        import pyspark

        env["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    except ImportError:
        pass
    env.update(python_env())
    env.update(package_path(env))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def spark_submit_command(
    app: str,
    args: Sequence[str] = (),
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` running ``app`` with ``args`` through spark-submit.

    :param master: the Spark master; default ``STREAMREP_SPARK_MASTER``, else ``local[N]`` for a
        copystream or diffstreams given ``--numthreads N``, else ``local[2]``.
    :param env: the base environment (default: this process's).
    """
    path, app_args, merged = application(app, args, conf)
    run_env = submit_env(env)
    if master is None and not run_env.get("STREAMREP_SPARK_MASTER"):
        threads = _numthreads(app, app_args)
        master = f"local[{threads}]" if threads else None
    master = check_master(master or run_env.get("STREAMREP_SPARK_MASTER") or DEFAULT_MASTER)
    exe = shutil.which("spark-submit", path=run_env["PATH"])
    if exe is None:
        raise Misinstalled("spark-submit was not found on PATH: pip install pyspark in this environment")
    require_java(run_env)
    require_matching_pyspark()
    argv = [exe, "--master", master, "--name", f"streamrep-{app}"]
    if "spark.driver.extraJavaOptions" not in merged:
        argv += ["--driver-java-options", LOG_JAVA_OPTIONS]
    for key, value in merged.items():
        argv += ["--conf", f"{key}={value}"]
    argv += [path, *app_args]
    return argv, run_env


# -- the job's lifetime: it never outlives its launcher -----------------------------------
# A job is spark-submit's JVM. In local mode the JVM starts the Python driver (the app), and
# pyspark's daemon, which forks the Python workers and makes its own process group. Why these
# mechanisms (all set by ``tether()``, used by every launcher: the CLI, the tests, the operators):
# * The kernel ends the job when its launcher dies: PR_SET_PDEATHSIG on the JVM. Unlike a
#   watchdog polling a pid, it fires on every death, SIGKILL included, at once, with no pid
#   reuse race and no code in the job. The rest follows the JVM: the driver's next py4j call
#   fails (it exits through its ``finally``, withdrawing the gateway's heartbeat), and the
#   daemon exits and kills its workers when its stdin, a pipe from the JVM, closes.
#   The signal is SIGTERM, so the JVM's shutdown hooks stop the SparkContext and delete its
#   temporary folders. It fires when the *thread* that started the job ends: each launcher
#   waits for its job in that thread.
# * The job is a session of its own: a terminal's Ctrl-C reaches the launcher alone, which stops
#   the job in order (``stop_job``: SIGTERM to the JVM and the driver, which stops its query),
#   and escalates to SIGKILL for the whole tree if that takes too long.
# Positions are committed with the messages, so wherever a stop lands, a restart is exact.
PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 15.0  # for the driver to stop its query and the JVM its SparkContext
_prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)  # looked up before any fork


def _die_with(launcher: int, report: int | None = None) -> None:
    """Runs in the job's process between fork and exec: SIGTERM when ``launcher`` dies, and
    no start at all if it died before this. With ``report`` (a pipe's write end), writes the
    job's pid there."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != launcher:
        os._exit(1)
    if report is not None:
        os.write(report, b"%d\n" % os.getpid())


def tether() -> dict:
    """``subprocess.Popen`` options that tie a job to this process (see above)."""
    return {"start_new_session": True, "preexec_fn": functools.partial(_die_with, os.getpid())}


class Tether:
    """``tether()`` for a launcher that does not hold the job's ``Popen`` (the Spark provider's
    hook starts and reaps it): each job started with ``popen_options()`` reports its pid, so
    that ``stop()`` can stop it with everything it started, as ``stop_job`` does."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        self._pids: list[int] = []

    def popen_options(self) -> dict:
        return {"start_new_session": True, "preexec_fn": functools.partial(_die_with, os.getpid(), self._write)}

    def pids(self) -> list[int]:
        """The jobs started so far (live or not)."""
        if self._read < 0:
            return list(self._pids)  # closed: what was reported before
        try:
            while chunk := os.read(self._read, 4096):
                self._pids += [int(pid) for pid in chunk.split()]
        except (BlockingIOError, OSError):
            pass
        return list(self._pids)

    def running(self) -> list[int]:
        return [pid for pid in self.pids() if _running(pid)]

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> list[int]:
        """Stop every running job with everything it started (``stop_tree``): it returns when
        they are all gone, within ``grace`` + ``KILL_WAIT_SECONDS``. Returns the jobs it stopped.
        (Their exit status is their launcher's to collect.)"""
        jobs = self.running()
        stop_tree(jobs, grace)
        return jobs

    def close(self) -> None:
        """Close the pipe (the pids reported so far are kept)."""
        self.pids()
        for fd in (self._read, self._write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._read = self._write = -1


def _stat(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and start time (clock ticks after boot), or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _running(pid: int, start: int | None = None) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its launcher's wait is left); with
    ``start``, whether the process that started then does (not a later one given its pid)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z" and start in (None, stat[1])


def describe_process(pid: int) -> str:
    """``pid``, its command line and state, for a message about a process that should be gone."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        command = ""
    stat = _stat(pid)
    return f"pid {pid} ({command or '?'}, state {stat[0] if stat else 'gone'})"


def _parents() -> dict[int, list[int]]:
    """Each process's children, from /proc (plain reads: a stop polls this)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                ppid = int(stat.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    return children


def _below(pids: Sequence[int], children: Mapping[int, list[int]]) -> list[int]:
    found, todo = list(pids), list(pids)
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def job_processes(pid: int) -> list[int]:
    """``pid`` and every process below it: the JVM, the Python driver, pyspark's daemons
    and workers (read from /proc)."""
    return _below([pid], _parents())


def _signal(pids: Sequence[int], sig: int) -> None:
    """``sig`` to ``pids`` and to the process groups they lead (pyspark's daemons lead theirs)."""
    for pid in pids:
        for send in (os.killpg, os.kill):
            try:
                send(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


KILL_WAIT_SECONDS = 2.0  # for SIGKILLed processes to exit: it takes CPU time, scarce on a loaded machine


def _live(tree: Mapping[int, int]) -> dict[int, int]:
    """The processes of ``tree`` (pid: start time) still running, with every process started
    below them since: a process started late is part of the job too."""
    live = {pid: start for pid, start in tree.items() if _running(pid, start)}
    for pid in _below(list(live), _parents()):
        if pid not in live and (stat := _stat(pid)) is not None and stat[0] != "Z":
            live[pid] = stat[1]
    return live


def _wait_gone(tree: Mapping[int, int], deadline: float) -> dict[int, int]:
    """Wait until no process of ``tree`` runs, or ``deadline``; the ones still running."""
    live = _live(tree)
    while live and time.monotonic() < deadline:
        time.sleep(0.05)
        live = _live(live)
    return live


def stop_tree(jobs: Sequence[int], grace: float = STOP_GRACE_SECONDS) -> None:
    """Stop tethered ``jobs`` (session leaders) and everything they started: SIGTERM to each
    job's session group (the JVM, and the driver, which stops its query and withdraws its
    heartbeat); SIGKILL to every process of their trees still running after ``grace`` seconds,
    the jobs' own and those a job left behind (a child that ignores SIGTERM, pyspark's daemons);
    then returns once every one has ended (a zombie has: only its parent's wait is left).
    Returns within ``grace`` + ``KILL_WAIT_SECONDS``, or raises StreamrepError naming the
    processes still running then."""
    # Taken before a job goes and its children are reparented; by start time, so that a pid
    # given to a later process is neither waited for nor killed.
    tree = {pid: stat[1] for pid in _below(list(jobs), _parents()) if (stat := _stat(pid))}
    for pid in jobs:
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    live = _wait_gone(tree, time.monotonic() + grace)
    if live:
        _signal(list(live), signal.SIGKILL)
        # SIGKILL is delivered when the process next runs: until then it still runs.
        live = _wait_gone(live, time.monotonic() + KILL_WAIT_SECONDS)
    if live:
        raise StreamrepError(
            f"stopping a Spark job: {', '.join(map(describe_process, live))} still running "
            f"{KILL_WAIT_SECONDS:g} s after SIGKILL"
        )


def stop_job(proc: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> int:
    """Stop a tethered job and all it started (``stop_tree``), and reap it. Returns the job's
    exit status."""
    stop_tree([proc.pid], grace)
    return proc.wait()


class _TerminatedBySignal:
    """While a job runs in the foreground of the main thread, SIGTERM and SIGHUP raise
    ``Terminated`` (SIGINT already raises KeyboardInterrupt), so the launcher stops the job
    before it goes."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __enter__(self):
        self.saved = {}
        if threading.current_thread() is threading.main_thread():
            self.saved = {sig: signal.signal(sig, self._raise) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)

    @staticmethod
    def _raise(signum, frame):
        raise Terminated(f"stopped by {signal.Signals(signum).name}")


@contextmanager
def foreground_job(argv: Sequence[str], env: Mapping[str, str], **popen) -> Iterator[subprocess.Popen]:
    """Start a tethered job and yield it; if the block ends with an exception (Ctrl-C, SIGTERM
    or SIGHUP of this process, a timeout) the job is stopped with ``stop_job`` first."""
    with _TerminatedBySignal():
        try:
            proc = subprocess.Popen(argv, env=env, **{**popen, **tether()})
        except FileNotFoundError:
            raise Misinstalled("spark-submit was not found on PATH: pip install pyspark in this environment") from None
        with proc:
            try:
                yield proc
            except BaseException:
                stop_job(proc)
                raise


@dataclass
class AppResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_app(
    app: str,
    args: Sequence[str] = (),
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> AppResult:
    """Run ``app`` to completion with spark-submit, tethered to this process; its output is
    captured. A timeout stops the job and raises ``subprocess.TimeoutExpired``."""
    argv, run_env = spark_submit_command(app, args, master, conf, env)
    with foreground_job(argv, run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        stdout, stderr = proc.communicate(timeout=timeout)
    return AppResult(proc.returncode, stdout, stderr)


def start_app(
    app: str,
    args: Sequence[str] = (),
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    **popen,
) -> subprocess.Popen:
    """Start ``app`` with spark-submit in the background, tethered to this process (it stops
    when this process dies; ``stop_job`` stops it); ``popen`` goes to subprocess.Popen."""
    argv, run_env = spark_submit_command(app, args, master, conf, env)
    try:
        return subprocess.Popen(argv, env=run_env, **{**popen, **tether()})
    except FileNotFoundError:
        raise Misinstalled("spark-submit was not found on PATH: pip install pyspark in this environment") from None


def _failure(app: str, result: AppResult) -> StreamrepError:
    """The app's own one-line error (``ERROR: ...``; spark-submit may pass the driver's stderr
    to stdout), or its exit status."""
    lines = [line for line in (result.stdout + "\n" + result.stderr).splitlines() if line.startswith("ERROR: ")]
    message = lines[-1][len("ERROR: ") :] if lines else f"exited with status {result.returncode}"
    return StreamrepError(f"{app} on Spark failed: {message}")


def submit_copystream(
    src: str, dst: str, home: str | None = None, numthreads: int | None = None, master: str | None = None
) -> CopySummary:
    """Run the copystream app through spark-submit; returns its summary.

    :param master: the Spark master (see ``spark_submit_command``)."""
    args = ["--src", src, "--dst", dst]
    args += ["--home", home] if home else []
    args += ["--numthreads", str(numthreads)] if numthreads else []
    return CopySummary.from_dict(_json_line("copystream", run_app("copystream", args, master)))


def submit_diff(
    src: str,
    dst: str,
    outdir: str,
    *,
    crc: bool = False,
    first_exit: bool = False,
    home: str | None = None,
    numthreads: int | None = None,
    master: str | None = None,
) -> dict[str, Any]:
    """Run the diffstreams app (diffstreamswithcrc with ``crc``) through spark-submit; it writes
    the ops directories into ``outdir``. Returns its JSON line (``DiffResult.to_dict``: ``same``,
    the counts, ``summary``), whether the streams are the same or not; raises on an error.

    :param master: the Spark master (see ``spark_submit_command``)."""
    args = ["--src", src, "--dst", dst, "--outdir", outdir]
    args += ["--crc"] if crc else []
    args += ["--first-exit"] if first_exit else []
    args += ["--home", home] if home else []
    args += ["--numthreads", str(numthreads)] if numthreads else []
    return _json_line("diffstreams", run_app("diffstreams", args, master))


def _json_line(app: str, result: AppResult) -> dict[str, Any]:
    """The last JSON line an app printed on stdout (its result), or its error."""
    if not result.ok:
        raise _failure(app, result)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise StreamrepError(f"{app} on Spark printed no summary")
    return json.loads(lines[-1])


def submit_gateway(
    cluster: str,
    gateway_id: str | None = None,
    once: bool = False,
    home: str | None = None,
    interval: float = DEFAULT_INTERVAL,
    master: str | None = None,
    metrics_port: int | None = None,
) -> None:
    """Run the gateway app through spark-submit in the foreground, its output passed through.

    :param master: the Spark master (see ``spark_submit_command``).
    :param metrics_port: serve the gateway's Prometheus metrics from the Spark driver on this port."""
    args = ["--cluster", cluster, "--interval", str(interval)]
    args += ["--metrics-port", str(metrics_port)] if metrics_port else []
    args += ["--id", gateway_id] if gateway_id else []
    args += ["--home", home] if home else []
    args += ["--once"] if once else []
    argv, run_env = spark_submit_command("gateway", args, master)
    errors = []
    with foreground_job(argv, run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        lines = cast("IO[str]", proc.stdout)  # stdout=PIPE
        for line in lines:  # passed through as it comes; the app's own error line is kept
            if not line.startswith(JVM_NOISE):
                sys.stderr.write(line)
            if line.startswith("ERROR: "):
                errors.append(line.rstrip("\n"))
        proc.wait()
    if proc.returncode != 0:
        raise _failure("gateway", AppResult(proc.returncode, "\n".join(errors), ""))
