"""copystream and gateways as thin subclasses of the Spark provider's ``SparkSubmitOperator``.

They run the package's Spark apps (``spark_apps/copystream.py`` and ``gateway.py``) on the ``spark_default``
connection (e.g. ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``).
If that connection is not defined they run Spark locally (``STREAMREP_SPARK_MASTER``, else
``local[2]``), so the DAGs need no set-up on one machine. What spark-submit needs (the app,
its arguments and conf, this venv's ``spark-submit`` and Python) comes from
``streamrep.spark.submit``; the clusters and identity come from the streamrep hook.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
)

from streamrep.airflow import rows as presented
from streamrep.airflow.assets import REPLICAS_ALIAS, caught_up_extra, emits_caught_up, replica_asset
from streamrep.airflow.hook import LOCAL_SPARK_CONN_ID, StreamrepHook, user_errors
from streamrep.airflow.params import as_bool
from streamrep.airflow.provider import spark_conn_id
from streamrep.errors import InvalidArgument
from streamrep.model import replication as rules
from streamrep.model.replication import gateway_interval, validate_gateway_name
from streamrep.replication import verification
from streamrep.replication.copy import copy_ended, plan_copy, summary
from streamrep.replication.diff import check_diff
from streamrep.replication.flows import flows_into
from streamrep.replication.ops import check_outdir, diff_engine, diff_to_ops
from streamrep.replication.service import stopped_reason
from streamrep.spark.jobs import USER_ERROR_EXIT
from streamrep.spark.submit import (
    LOG_JAVA_OPTIONS,
    Tether,
    application,
    master_url,
    require_java,
    require_matching_pyspark,
    submit_env,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

APP_ERROR_PREFIX = "ERROR: "  # how the spark_apps report an error: one line on stderr
SUBMIT_ENV_KEYS = ("PATH", "SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH", "PYTHONUNBUFFERED")
# Airflow's supervisor sends SIGKILL 5 s after SIGTERM; the job must be stopped before that.
ON_KILL_GRACE_SECONDS = 3.0
# The hook's arguments (its constructor's, which the operator's own mirror, defaults included).
HOOK_ARGUMENTS = frozenset(inspect.signature(SparkSubmitHook.__init__).parameters) - {"self", "args", "kwargs"}
# How the provider's hook reports a failed spark-submit (its exception message).
_EXIT_STATUS = re.compile(r"Error code is: (-?\d+)")


class TetheredSparkSubmitHook(SparkSubmitHook):
    """A SparkSubmitHook whose spark-submit is tied to the task process (``submit.Tether``,
    through ``submit``'s Popen arguments): the job stops when that process dies, SIGKILL
    included, and ``on_kill`` (a timeout, the task marked failed or success) stops the whole
    job, the Python driver and workers with the JVM.

    :param tether: ties the jobs and knows their pids (default: one of its own).
    """

    def __init__(self, *args: Any, tether: Tether | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tether = tether or Tether()

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        self.json_lines: list[str] = []
        return super().submit(application, **{**kwargs, **self.tether.popen_options()})

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        # The apps print their result as one JSON line on stdout, which the provider only logs.
        super()._process_spark_submit_log(self._keep_json_lines(itr))

    def _keep_json_lines(self, itr: Iterator[Any]) -> Iterator[Any]:
        for line in itr:
            if line.lstrip().startswith("{"):
                self.json_lines.append(line.strip())
            yield line

    def on_kill(self) -> None:
        running = self.tether.running()
        if running:
            self.log.info("Stopping the Spark job of pid %s and every process it started", running[0])
            self.tether.stop(grace=ON_KILL_GRACE_SECONDS)
        super().on_kill()


class StreamrepSparkSubmitOperator(SparkSubmitOperator):
    """Base of the streamrep Spark operators: a SparkSubmitOperator whose application, arguments
    and conf are built at run time from ``streamrep.spark.submit``, with the environment that
    lets Spark's Python processes import streamrep and see the same clusters.

    :param streamrep_conn_id: the streamrep connection with settings common to all clusters.
    :param cluster_conn_ids: the Airflow connection of each cluster whose connection is not
        named ``streamrep_<cluster>``, by cluster name (``{"newyork": "ny_prod"}``); the Spark
        app gets those clusters in its registry file. (templated)
    :param conn_id: the Spark connection (default: ``[streamrep] spark_conn_id`` of Airflow's config,
        itself ``spark_default`` unless set).
    :param conf: extra Spark conf, over streamrep's defaults. (templated)
    """

    app = ""
    ui_color = "#fde68a"

    def __init__(
        self,
        *,
        streamrep_conn_id: str = StreamrepHook.default_conn_name,
        cluster_conn_ids: Mapping[str, str] | None = None,
        conn_id: str | None = None,
        **kwargs: Any,
    ):
        kwargs.setdefault("name", f"streamrep-{self.app}")
        spark_conn = conn_id or spark_conn_id()
        super().__init__(conn_id=spark_conn, **kwargs)
        self.spark_conn_id = spark_conn  # the Spark connection the hook is made with (_get_hook)
        self.streamrep_conn_id = streamrep_conn_id
        self.cluster_conn_ids = cluster_conn_ids
        # The hook's settings given here that are not template fields (those are read when the
        # hook is made, rendered); the hook's defaults, which are the operator's, for the rest.
        self.spark_options = {
            k: v for k, v in kwargs.items() if k in HOOK_ARGUMENTS and k not in SparkSubmitOperator.template_fields
        }
        self.tether: Tether | None = None

    # -- what subclasses provide -------------------------------------------------------
    def app_args(self, hook: StreamrepHook) -> list[str]:
        raise NotImplementedError

    def result(self, hook: StreamrepHook, context: Context) -> Any:
        return None

    # -- running --------------------------------------------------------------------------
    def _use_local_spark_if_unconfigured(self) -> None:
        try:
            BaseHook.get_connection(self.spark_conn_id)
        except AirflowNotFoundException:
            master = master_url(None)
            self.log.warning(
                "Spark connection %s is not defined: running Spark locally on %s", self.spark_conn_id, master
            )
            os.environ[f"AIRFLOW_CONN_{LOCAL_SPARK_CONN_ID.upper()}"] = json.dumps(
                {"conn_type": "spark", "host": master}
            )
            self.spark_conn_id = LOCAL_SPARK_CONN_ID

    def _get_hook(self) -> SparkSubmitHook:
        """The operator's hook (the provider's factory, which its execute and on_kill use): a
        TetheredSparkSubmitHook with the operator's settings, as the provider's own would have."""
        rendered = {f: getattr(self, f) for f in SparkSubmitOperator.template_fields if f in HOOK_ARGUMENTS}
        return TetheredSparkSubmitHook(
            tether=self.tether, conn_id=self.spark_conn_id, **{**self.spark_options, **rendered}
        )

    def execute(self, context: Context) -> Any:
        with user_errors():
            hook = StreamrepHook(self.streamrep_conn_id, cluster_conn_ids=self.cluster_conn_ids)
        try:
            with user_errors():
                skip = self.preflight(hook, context)
                if skip is not None:
                    return skip
                path, args, conf = application(self.app, self.app_args(hook), self.conf or None)
                # Spark's own logging as the CLI has it (warnings only): its INFO lines would
                # otherwise fill the task log (the provider logs every line spark-submit prints).
                conf.setdefault("spark.driver.extraJavaOptions", LOG_JAVA_OPTIONS)
                full_env = submit_env()
                require_java(full_env)
                require_matching_pyspark()
                env = {k: v for k, v in full_env.items() if k in SUBMIT_ENV_KEYS}
            env.update(hook.process_env())
            env.update(self.env_vars or {})
            self.application, self.application_args, self.conf, self.env_vars = path, args, conf, env
            self._use_local_spark_if_unconfigured()
            self._hook = None  # the provider's: made by _get_hook from the settings above
            self.tether = Tether()
            self.log.info("spark-submit %s %s", path, " ".join(args))
            try:
                super().execute(context)
            except AirflowException as err:
                status = _EXIT_STATUS.search(str(err))
                if status and int(status.group(1)) == USER_ERROR_EXIT:  # a user error: retrying cannot help
                    raise AirflowFailException(self._failure(err)) from None
                raise AirflowException(self._failure(err)) from None
            return self.result(hook, context)
        finally:
            if self.tether is not None:
                self.tether.close()
            hook.close()

    def preflight(self, hook: StreamrepHook, context: Context) -> Any:
        """Checks before spark-submit; a non-None result ends the task with that result."""
        return None

    def _failure(self, err: Exception) -> str:
        """The app's own one-line error if it printed one (the provider's message ends with
        spark-submit's last lines), else the first line of the provider's message."""
        lines = str(err).splitlines()
        errors = [line[len(APP_ERROR_PREFIX) :] for line in lines if line.startswith(APP_ERROR_PREFIX)]
        if errors:
            return f"streamrep {self.app}: {errors[-1]}"
        return lines[0] if lines else type(err).__name__


class StreamCopyOperator(StreamrepSparkSubmitOperator):
    """``mapr copystream -src <source> -dst <destination>`` as a Spark batch job.

    Copies everything ``source`` holds when the copy starts into ``destination`` (created with
    the source's metadata if missing). The copy stores replication positions with the messages,
    so a retry, or the gateways taking over after ``replica resume``, never duplicates or skips
    a message. Before starting Spark the copy is planned in the task: a user error fails at
    once, and when the destination already holds everything (a retry after a completed copy)
    Spark is not started at all.

    :param source: the source stream. (templated)
    :param destination: the destination stream. (templated)
    :param numthreads: copy threads (the thread count of a local master).
    :return: (XCom) the copy summary: ``source``, ``destination``, ``messages`` written and the
        source ``positions`` reached, by ``topic:partition``.
    """

    app = "copystream"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "cluster_conn_ids",
        "source",
        "destination",
    )

    def __init__(self, *, source: str, destination: str, numthreads: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.source = source
        self.destination = destination
        self.numthreads = numthreads

    def preflight(self, hook: StreamrepHook, context: Context) -> dict[str, Any] | None:
        admin = hook.admin
        plan = plan_copy(admin, self.source, self.destination)
        pending = plan.total(admin)
        if pending:
            self.log.info("copystream %s -> %s: %d messages to copy", plan.source, plan.destination, pending)
            self._plan, self._pending = plan, pending
            return None
        copy_ended(admin, plan)  # a retry after a copy whose end was never recorded
        self.log.info(
            "copystream %s -> %s: the destination already holds every message: nothing to copy",
            plan.source,
            plan.destination,
        )
        return presented.copy_summary_row(summary(plan, 0))

    def app_args(self, hook: StreamrepHook) -> list[str]:
        args = ["--src", self.source, "--dst", self.destination, "--home", hook.registry_home()]
        if self.numthreads:
            args += ["--numthreads", str(self.numthreads)]
        return args

    def result(self, hook: StreamrepHook, context: Context) -> dict[str, Any]:
        """The copy's summary: the copy planned in ``preflight`` (its ends are the positions
        reached), and the messages it wrote: what the destination lacked then and lacks no more."""
        copied = presented.copy_summary_row(summary(self._plan, self._pending - self._plan.total(hook.admin)))
        self.log.info("copied %s messages; source positions reached: %s", copied["messages"], copied["positions"])
        return copied


class StreamGatewayOperator(StreamrepSparkSubmitOperator):
    """A gateway of ``cluster`` as a Spark application (``spark_apps/gateway.py``): a loop of
    passes, each one Spark job, planned in its driver.

    It pulls its share of every source stream that flows into the replicas on ``cluster`` and
    applies it exactly once (positions are stored with the messages). Without ``once`` it runs
    until its cluster's gateways are stopped (``gateway stop``), then the task succeeds; give it retries with a ``retry_delay`` and Airflow restarts a
    gateway that dies, while the other gateways take over its share meanwhile and nothing is
    lost while all are down (data waits at the source).

    :param cluster: the destination cluster. (templated)
    :param gateway_id: the gateway's name, as listed by ``cluster gateway set`` (default: host
        name). (templated)
    :param once: replicate what is available now, then finish. (templated)
    :param interval: seconds between passes when idle.
    :param max_records: source messages per pass at most.
    :param metrics_port: serve the gateway's Prometheus metrics from the Spark driver on this port
        (docs/operations.md, "Lag, metrics and alerts"); one port per gateway task on a host.
    :return: (XCom) ``cluster``, ``gateway`` and ``once``.
    :raises AirflowSkipException: the cluster's gateways are stopped (``gateway stop``) and
        ``once`` is false: the task is skipped, with the reason in its log, and Spark is not started.
    """

    app = "gateway"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "cluster_conn_ids",
        "cluster",
        "gateway_id",
        "once",
    )

    def __init__(
        self,
        *,
        cluster: str,
        gateway_id: str | None = None,
        once: Any = False,
        interval: float | None = None,
        max_records: int | None = None,
        metrics_port: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.gateway_id = gateway_id
        self.once = once
        self.interval = interval
        self.max_records = max_records
        self.metrics_port = metrics_port

    def preflight(self, hook: StreamrepHook, context: Context) -> None:
        # What the app checks first, checked here too: a user error fails in a second, not after
        # Spark's start (43-69 s under load).
        hook.clusters.get(self.cluster)
        hook.admin.require_cluster_admin(self.cluster)
        if self.gateway_id:
            validate_gateway_name(self.gateway_id)
        if self.interval is not None:
            gateway_interval(self.interval)
        # The app's first check too, made before Spark's start (which took 122 s to say "not
        # started"). A drain (once) ignores the desired state, as the app does (spark/jobs.py).
        reason = None if as_bool(self.once) else stopped_reason(hook.admin.clusters.store(self.cluster), self.cluster)
        if reason is not None:
            # Skipped, not failed: a stop is the state that was asked for, and a run whose tasks
            # are all skipped ends as success. Not succeeded either: the grid then shows at a
            # glance that no gateway ran, where success reads as a gateway that replicated.
            raise AirflowSkipException(f"gateway {self.gateway_id or '(host name)'} not started: {reason}")
        flows, blocked = flows_into(hook.admin, self.cluster)  # resolves the source clusters too
        self.log.info(
            "gateway %s of %s: %d replication flows into this cluster (%d paused), %d blocked",
            self.gateway_id or "(host name)",
            self.cluster,
            len(flows),
            sum(f.paused for f in flows),
            len(blocked),
        )
        return None

    def app_args(self, hook: StreamrepHook) -> list[str]:
        args = ["--cluster", self.cluster, "--home", hook.registry_home()]
        if self.gateway_id:
            args += ["--id", str(self.gateway_id)]
        if as_bool(self.once):
            args.append("--once")
        if self.interval is not None:
            args += ["--interval", str(self.interval)]
        if self.max_records:
            args += ["--max-records", str(self.max_records)]
        if self.metrics_port:
            args += ["--metrics-port", str(self.metrics_port)]
        return args

    def result(self, hook: StreamrepHook, context: Context) -> dict[str, Any]:
        return {"cluster": self.cluster, "gateway": self.gateway_id, "once": as_bool(self.once)}


DIFF_ENGINES = ("auto", "local", "spark")


def fresh_outdir(context: Any, command: str) -> Path:
    """A new folder in the worker's temporary space for a task's ops directories, named after the
    task (DAG, task, map index, try) so that its log and result point a person to it."""
    ti = context.get("ti") if hasattr(context, "get") else None
    parts = [getattr(ti, name, None) for name in ("dag_id", "task_id", "map_index", "try_number")]
    name = ".".join(str(p) for p in parts if p is not None and p != -1)
    return Path(tempfile.mkdtemp(prefix=f"streamrep-{command}-{name}-".replace("/", "_")))


class StreamDiffOperator(StreamrepSparkSubmitOperator):
    """``mapr diffstreams -src <source> -dst <destination> -outdir <dir> [-first_exit]`` (or
    ``diffstreamswithcrc`` with ``crc``): compare two streams and write the ops directories
    (``opsForDst``, ``opsForSrc``) that ``importstream`` applies.

    One operator for both engines, as the CLI's ``-engine``: ``spark`` submits
    ``spark_apps/diffstreams.py``; ``local`` compares in the task's process (``replication/diff.py``),
    with no Spark start; ``auto`` chooses by the streams' size (``ops.diff_engine``, as the CLI). The
    rights and the output directory are checked in the task first, so bad input fails in one line
    before Spark starts.

    When ``destination`` is a replica of ``source`` (a replica link), the result is recorded as the
    link's last verification (``replication.verification.record``), which ``replica list`` and the
    Stream replication page show. With ``REPLICAS_ALIAS`` in its outlets, a task that ends well
    emits an asset event for ``destination`` whose extra holds the result (``verification``).

    :param source: the source stream. (templated)
    :param destination: the destination stream, usually a replica of ``source``. (templated)
    :param outdir: a new or empty directory for the ops directories (default: a fresh folder in
        the worker's temporary space, named in the log and the result). (templated)
    :param crc: ``diffstreamswithcrc``: CRCs of runs of messages first. (templated)
    :param first_exit: stop at the first difference. (templated)
    :param engine: ``auto``, ``local`` or ``spark``. (templated)
    :param fail_on_difference: fail the task, with the one-line summary, when the streams differ
        (a difference is a finding: the task is not retried). (templated)
    :param numthreads: Spark parallelism (the thread count of a local master).
    :return: (XCom) the result (``DiffResult.to_dict``): ``same``, the counts by kind,
        ``dstBehind``, ``compared``, ``outdir``, ``summary``; and ``engine``.
    """

    app = "diffstreams"
    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "cluster_conn_ids",
        "source",
        "destination",
        "outdir",
        "crc",
        "first_exit",
        "engine",
        "fail_on_difference",
    )
    ui_color = "#d9f99d"

    def __init__(
        self,
        *,
        source: str,
        destination: str,
        outdir: str | None = None,
        crc: Any = False,
        first_exit: Any = False,
        engine: str = "auto",
        fail_on_difference: Any = True,
        numthreads: int | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.source = source
        self.destination = destination
        self.outdir = outdir
        self.crc = crc
        self.first_exit = first_exit
        self.engine = engine
        self.fail_on_difference = fail_on_difference
        self.numthreads = numthreads

    @property
    def command(self) -> str:
        return "diffstreamswithcrc" if as_bool(self.crc) else "diffstreams"

    def preflight(self, hook: StreamrepHook, context: Context) -> dict[str, Any] | None:
        if self.engine not in DIFF_ENGINES:
            raise InvalidArgument(f"engine must be one of {', '.join(DIFF_ENGINES)}, not {self.engine!r}")
        admin = hook.admin
        check_diff(admin, self.source, self.destination)  # rights and streams, before any folder or Spark
        self._outdir = check_outdir(self.outdir) if self.outdir else fresh_outdir(context, self.command)
        engine = diff_engine(admin, self.source, self.destination) if self.engine == "auto" else self.engine
        self.log.info(
            "%s -src %s -dst %s -outdir %s (engine %s)",
            self.command,
            self.source,
            self.destination,
            self._outdir,
            engine,
        )
        if engine == "spark":
            return None
        outdir = str(self._outdir)
        result = diff_to_ops(admin, self.source, self.destination, outdir, as_bool(self.crc), as_bool(self.first_exit))
        return self._conclude(admin, context, result.to_dict(outdir), "local")

    def app_args(self, hook: StreamrepHook) -> list[str]:
        args = ["--src", self.source, "--dst", self.destination, "--outdir", str(self._outdir)]
        args += ["--home", hook.registry_home()]
        if as_bool(self.crc):
            args.append("--crc")
        if as_bool(self.first_exit):
            args.append("--first-exit")
        if self.numthreads:
            args += ["--numthreads", str(self.numthreads)]
        return args

    def result(self, hook: StreamrepHook, context: Context) -> dict[str, Any]:
        """The app's one JSON line (the last the job printed)."""
        printed = getattr(self._hook, "json_lines", None) or []
        for line in reversed(printed):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "summary" in row:
                with user_errors():
                    return self._conclude(hook.admin, context, row, "spark")
        raise AirflowException(f"streamrep {self.app}: the Spark app ended without printing its result")

    def _conclude(self, admin: Any, context: Context, row: dict[str, Any], engine: str) -> dict[str, Any]:
        """Log and record the result, emit the replica's event, and fail on a difference if asked."""
        row = {**row, "engine": engine}
        self.log.info(
            "%s %s -> %s: %s; ops in %s", self.command, self.source, self.destination, row["summary"], row["outdir"]
        )
        src, dst = admin.path(self.source), admin.path(self.destination)
        linked = rules.agreement(src, admin.entry(src), dst, admin.entry(dst)).link is not None
        if linked:
            done = verification.record(admin, str(src), str(dst), row, engine, command=self.command)
            self.log.info("recorded as the last verification of replica %s of %s (by %s)", dst, src, done.by)
        differs = not row["same"] and as_bool(self.fail_on_difference)
        if differs:
            raise AirflowFailException(
                f"streamrep {self.command}: {src} and {dst} {row['summary']}; ops in {row['outdir']}"
            )
        if emits_caught_up(self):  # the replica's event: its lag now, as a caught-up event's, and the result
            extra = {**caught_up_extra(admin, str(dst), str(src)), "verification": row}
            context["outlet_events"][REPLICAS_ALIAS].add(replica_asset(str(dst)), extra=extra)
        return row
