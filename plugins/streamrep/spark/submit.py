"""Building and running ``spark-submit`` for the two Spark apps (``copystream``, ``gateway``).

``application(app, args)`` gives what Airflow's SparkSubmitOperator needs (application path,
application args, conf); ``spark_submit_command`` the full command and environment for a
local run; ``run_app`` / ``start_app`` run it.

The apps live in ``<repo>/spark_apps/<app>.py`` (``STREAMREP_SPARK_APPS`` overrides the
folder). The master is ``local[2]`` unless ``STREAMREP_SPARK_MASTER`` or ``master`` says
otherwise. Every Python process Spark starts runs this interpreter (the venv that has
streamrep and pyarrow), and ``spark-submit`` is taken from this venv first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from streamrep.errors import InvalidArgument, StreamrepError, Unavailable

APPS = ("copystream", "gateway")
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")  # warnings only, on stderr
LOG_JAVA_OPTIONS = f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"  # the driver JVM's option for it
DEFAULT_MASTER = "local[2]"
DEFAULT_INTERVAL = 0.5
JVM_NOISE = "WARNING: Using incubator modules"  # printed by every Java 17 start; says nothing  # seconds between gateway micro-batches

# Settings for a small local Spark: the Python data source runs in Python workers, which must
# be reused (starting them per task made the pipeline 4x slower), and a batch has no shuffle.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.adaptive.enabled": "false",  # nothing to adapt (no shuffle), and streaming refuses it
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopGracefullyOnShutdown": "false",
}


def python_env() -> dict[str, str]:
    """Environment every Spark process needs so that its Python workers import streamrep:
    this interpreter (the venv's, which has pyarrow and streamrep) for drivers and workers."""
    return {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def spark_conf(conf: Mapping[str, str] | None = None) -> dict[str, str]:
    merged = dict(DEFAULT_CONF)
    merged["spark.pyspark.python"] = sys.executable
    merged["spark.pyspark.driver.python"] = sys.executable
    merged.update(conf or {})
    return merged


def master_url(master: str | None = None) -> str:
    return master or os.environ.get("STREAMREP_SPARK_MASTER") or DEFAULT_MASTER


def apps_dir() -> Path:
    """The folder holding the app scripts."""
    override = os.environ.get("STREAMREP_SPARK_APPS")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[3] / "spark_apps"


def app_path(app: str) -> str:
    if app not in APPS:
        raise InvalidArgument(f"unknown Spark app {app!r}: expected one of {', '.join(APPS)}")
    path = apps_dir() / f"{app}.py"
    if not path.is_file():
        raise Unavailable(f"Spark app {app} not found at {path}; set STREAMREP_SPARK_APPS to the spark_apps folder")
    return str(path)


def application(app: str, args: Sequence[str] = (), conf: Mapping[str, str] | None = None,
                ) -> tuple[str, list[str], dict[str, str]]:
    """``(application path, application args, conf)`` for spark-submit or SparkSubmitOperator."""
    return app_path(app), [str(a) for a in args], spark_conf(conf)


def _numthreads(app: str, args: Sequence[str]) -> int | None:
    """copystream's ``--numthreads N``: the thread count of a local master."""
    args = list(args)
    for i, arg in enumerate(args):
        if app == "copystream" and arg == "--numthreads" and i + 1 < len(args):
            try:
                return max(1, int(args[i + 1]))
            except ValueError:
                return None
        if app == "copystream" and arg.startswith("--numthreads="):
            try:
                return max(1, int(arg.split("=", 1)[1]))
            except ValueError:
                return None
    return None


def submit_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of spark-submit: this venv's bin first on PATH, SPARK_HOME at this
    venv's pyspark, and this interpreter for the driver and the workers."""
    env = dict(os.environ if base is None else base)
    venv_bin = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([venv_bin, *[p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin]])
    try:
        import pyspark

        env["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    except ImportError:
        pass
    env.update(python_env())
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def spark_submit_command(app: str, args: Sequence[str] = (), master: str | None = None,
                         conf: Mapping[str, str] | None = None,
                         env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` running ``app`` with ``args`` through spark-submit.

    :param master: the Spark master; default ``STREAMREP_SPARK_MASTER``, else ``local[N]`` for a
        copystream given ``--numthreads N``, else ``local[2]``.
    :param env: the base environment (default: this process's).
    """
    path, app_args, merged = application(app, args, conf)
    run_env = submit_env(env)
    if master is None and not run_env.get("STREAMREP_SPARK_MASTER"):
        threads = _numthreads(app, app_args)
        master = f"local[{threads}]" if threads else None
    master = master or run_env.get("STREAMREP_SPARK_MASTER") or master_url(None)
    exe = shutil.which("spark-submit", path=run_env["PATH"])
    if exe is None:
        raise Unavailable("spark-submit was not found on PATH; install pyspark in this environment")
    argv = [exe, "--master", master, "--name", f"streamrep-{app}"]
    if "spark.driver.extraJavaOptions" not in merged:
        argv += ["--driver-java-options", LOG_JAVA_OPTIONS]
    for key, value in merged.items():
        argv += ["--conf", f"{key}={value}"]
    argv += [path, *app_args]
    return argv, run_env


@dataclass
class AppResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run_app(app: str, args: Sequence[str] = (), master: str | None = None, conf: Mapping[str, str] | None = None,
            env: Mapping[str, str] | None = None, timeout: float | None = None) -> AppResult:
    """Run ``app`` to completion with spark-submit; its output is captured."""
    argv, run_env = spark_submit_command(app, args, master, conf, env)
    try:
        proc = subprocess.run(argv, env=run_env, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise Unavailable("spark-submit was not found on PATH; install pyspark in this environment") from None
    return AppResult(proc.returncode, proc.stdout, proc.stderr)


def start_app(app: str, args: Sequence[str] = (), master: str | None = None, conf: Mapping[str, str] | None = None,
              env: Mapping[str, str] | None = None, **popen) -> subprocess.Popen:
    """Start ``app`` with spark-submit in the background; ``popen`` goes to subprocess.Popen
    (``start_new_session=True`` puts Spark's JVM and Python workers in one process group)."""
    argv, run_env = spark_submit_command(app, args, master, conf, env)
    try:
        return subprocess.Popen(argv, env=run_env, **popen)
    except FileNotFoundError:
        raise Unavailable("spark-submit was not found on PATH; install pyspark in this environment") from None


def _failure(app: str, result: AppResult) -> StreamrepError:
    """The app's own one-line error (``ERROR: ...``; spark-submit may pass the driver's stderr
    to stdout), or its exit status."""
    lines = [line for line in (result.stdout + "\n" + result.stderr).splitlines() if line.startswith("ERROR: ")]
    message = lines[-1][len("ERROR: "):] if lines else f"exited with status {result.returncode}"
    return StreamrepError(f"{app} on Spark failed: {message}")


def run_copystream(src: str, dst: str, home: str | None = None, numthreads: int | None = None) -> dict:
    """Run the copystream app through spark-submit; returns its summary (``copy.summary``)."""
    args = ["--src", src, "--dst", dst]
    args += ["--home", home] if home else []
    args += ["--numthreads", str(numthreads)] if numthreads else []
    result = run_app("copystream", args)
    if not result.ok:
        raise _failure("copystream", result)
    summary = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if not summary:
        raise StreamrepError("copystream on Spark printed no summary")
    return json.loads(summary[-1])


def run_gateway(cluster: str, gateway_id: str | None = None, once: bool = False, home: str | None = None,
                interval: float = DEFAULT_INTERVAL) -> None:
    """Run the gateway app through spark-submit in the foreground, its output passed through."""
    args = ["--cluster", cluster, "--interval", str(interval)]
    args += ["--id", gateway_id] if gateway_id else []
    args += ["--home", home] if home else []
    args += ["--once"] if once else []
    argv, run_env = spark_submit_command("gateway", args)
    errors = []
    with subprocess.Popen(argv, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:  # passed through as it comes; the app's own error line is kept
            if not line.startswith(JVM_NOISE):
                sys.stderr.write(line)
            if line.startswith("ERROR: "):
                errors.append(line.rstrip("\n"))
    if proc.returncode != 0:
        raise _failure("gateway", AppResult(proc.returncode, "\n".join(errors), ""))
