"""What a Spark app is started with: spark-submit's command line, the app's script, its Spark conf
and master, and the environment of every Spark process (driver and Python workers).

``application(app, args)`` gives what Airflow's SparkSubmitOperator needs (application path,
application args, conf); ``spark_submit_command`` the full command and environment for a local
run (``submit.py`` runs it, ``lifetime.py`` keeps it tethered).

The apps' one source is the repository's ``spark_apps/`` folder. The wheel carries it as package
data (``streamrep/spark_apps/``); a folder deployment has it beside the folder that holds the
package (``plugins/`` and ``spark_apps/``); ``STREAMREP_SPARK_APPS`` overrides both. The master is
``local[2]`` unless ``STREAMREP_SPARK_MASTER`` or ``master`` says otherwise (``spark://host:port``
for a standalone cluster). Every Python process Spark starts runs this interpreter (the venv that
has streamrep and pyarrow) unless ``STREAMREP_SPARK_PYTHON`` names the Python of the cluster's
workers, and ``spark-submit`` is taken from this venv first.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from streamrep.client.identity import LAUNCHER_USER, current_identity, named_user
from streamrep.errors import InvalidArgument, Misinstalled

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
# The exit status of an app stopped by a user error: a retry cannot help. sysexits' EX_DATAERR,
# distinct from spark-submit's own failures (1) and from the CLI's internal error (3).
USER_ERROR_EXIT = 65
DEFAULT_INTERVAL = 0.5  # the gateway app's --interval: seconds an idle gateway waits between passes
NO_SPARK_SUBMIT = "spark-submit was not found on PATH: pip install pyspark in this environment"

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
        raise Misinstalled(NO_SPARK_SUBMIT)
    require_java(run_env)
    require_matching_pyspark()
    argv = [exe, "--master", master, "--name", f"streamrep-{app}"]
    if "spark.driver.extraJavaOptions" not in merged:
        argv += ["--driver-java-options", LOG_JAVA_OPTIONS]
    for key, value in merged.items():
        argv += ["--conf", f"{key}={value}"]
    argv += [path, *app_args]
    return argv, run_env
