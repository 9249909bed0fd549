"""The base of the Spark operators: a thin subclass of the Spark provider's ``SparkSubmitOperator``
(``StreamrepSparkSubmitOperator``) and the hook it runs spark-submit with
(``TetheredSparkSubmitHook``). The operators themselves are by area: ``copystream``,
``spark_gateway`` and ``diffstreams``.

They run the package's Spark apps (``spark_apps/*.py``) on the ``spark_default`` connection (e.g.
``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``). If that connection
is not defined they run Spark locally (``STREAMREP_SPARK_MASTER``, else ``local[2]``), so the DAGs
need no set-up on one machine. What spark-submit needs (the app, its arguments and conf, this
venv's ``spark-submit`` and Python) comes from ``streamrep.spark.command``; the clusters and
identity come from the streamrep hook.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowNotFoundException

from streamrep.airflow.hook import LOCAL_SPARK_CONN_ID, StreamrepHook, user_errors
from streamrep.airflow.provider import spark_conn_id
from streamrep.spark.command import (
    LOG_JAVA_OPTIONS,
    USER_ERROR_EXIT,
    application,
    master_url,
    require_java,
    require_matching_pyspark,
    submit_env,
)
from streamrep.spark.lifetime import Tether

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
    """A SparkSubmitHook whose spark-submit is tied to the task process (``lifetime.Tether``,
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
    and conf are built at run time from ``streamrep.spark.command``, with the environment that
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
