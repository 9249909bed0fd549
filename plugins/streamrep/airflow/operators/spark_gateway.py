"""A gateway of a cluster as a Spark application (``StreamGatewayOperator``, for the
``stream_gateways`` DAG); the other gateway operators are in ``gateways``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk.exceptions import AirflowSkipException

from streamrep.airflow.hook import StreamrepHook
from streamrep.airflow.operators.spark_submit import StreamrepSparkSubmitOperator
from streamrep.airflow.params import as_bool
from streamrep.model.replication import gateway_interval, validate_gateway_name
from streamrep.replication.flows import flows_into
from streamrep.replication.service import stopped_reason

if TYPE_CHECKING:
    from airflow.sdk import Context


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
