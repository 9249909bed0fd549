"""Operators for the gateways: which gateways serve a cluster (``GatewayPlanOperator``, for the
``stream_gateways`` DAG), and the gateways as a service (``GatewayServiceOperator``, for
``stream_gateway_service``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streamrep.airflow import supervisor
from streamrep.airflow.operators.base import StreamrepOperator, known_clusters
from streamrep.airflow.supervisor import GATEWAYS_DAG_ID, ServiceAction
from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument
from streamrep.model import replication as rules
from streamrep.replication import service
from streamrep.replication.flows import flows_into
from streamrep.replication.gateway_liveness import default_gateway_id

if TYPE_CHECKING:
    from airflow.sdk import Context


class GatewayPlanOperator(StreamrepOperator):
    """Which gateways serve the replicas on ``cluster``: those that the source clusters list
    for it (``cluster gateway set -dstcluster <cluster>``), or one gateway named after this
    host if no source cluster lists any.

    :param cluster: the destination cluster. (templated)
    :param gateways: explicit gateway names, overriding the lists (space or comma separated,
        or a list). (templated)
    :return: (XCom) the gateway names, sorted.
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "cluster", "gateways")

    def __init__(self, *, cluster: str, gateways: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.cluster = cluster
        self.gateways = gateways

    def run(self, admin: StreamAdmin, context: Context) -> list[str]:
        admin.clusters.get(self.cluster)  # NotFound for an unknown cluster
        if self.gateways:
            given = rules.validate_gateways(self.gateways)
            self.log.info("gateways of %s, as given: %s", self.cluster, " ".join(given))
            return sorted(given)
        flows, blocked = flows_into(admin, self.cluster)
        sources = sorted({f.source.cluster for f in flows} | {b.source.cluster for b in blocked})
        names: set[str] = set()
        for source in sources:
            listed = admin.gateways(source).get(self.cluster)
            self.log.info(
                "cluster %s lists gateways for %s: %s",
                source,
                self.cluster,
                " ".join(listed) if listed else "(none: any gateway)",
            )
            names.update(listed or ())
        for blocked_flow in blocked:
            self.log.warning(
                "%s -> %s does not flow: %s", blocked_flow.source, blocked_flow.replica, blocked_flow.reason
            )
        if not names:
            names = {default_gateway_id()}
            self.log.info(
                "no source cluster lists gateways for %s: running gateway %s", self.cluster, next(iter(names))
            )
        return sorted(names)


class GatewayServiceOperator(StreamrepOperator):
    """The gateways as a service (``streamrep.replication.service``, ``airflow/supervisor.py``):
    ``start`` or ``stop`` a cluster's gateways (``gateway start|stop -cluster C``), or
    ``supervise``: for each cluster whose gateways should run and have no live heartbeat and no
    launch in flight, plan a ``stream_gateways`` run, with a deterministic run id and a doubling
    backoff between launches. ``start`` also supervises its cluster, so the gateways start in
    this run.

    :param action: ``supervise``, ``start`` or ``stop``. (templated)
    :param cluster: the cluster to start or stop; for ``supervise``, only this cluster (default:
        every cluster the hook knows). (templated)
    :param gateways_dag_id: the DAG that runs a cluster's gateways.
    :return: (XCom) the runs to trigger, as ``TriggerDagRunOperator`` kwargs:
        ``trigger_run_id`` and ``conf`` (``cluster``, ``once: false``).
    """

    template_fields: Sequence[str] = (*StreamrepOperator.template_fields, "action", "cluster")

    def __init__(
        self,
        *,
        action: str = "supervise",
        cluster: str | None = None,
        gateways_dag_id: str = GATEWAYS_DAG_ID,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.action = action
        self.cluster = cluster
        self.gateways_dag_id = gateways_dag_id

    def run(self, admin: StreamAdmin, context: Context) -> list[dict[str, Any]]:
        action = ServiceAction.parse(self.action)
        cluster = self.cluster or None
        if action is not ServiceAction.SUPERVISE:
            if cluster is None:
                raise InvalidArgument(f"action {action.value} needs a cluster")
            req = service.request(admin, cluster, action.desired)
            self.log.info(
                "gateways of %s: desired state %s (by %s); live now: %s",
                cluster,
                req.desired.value,
                req.by,
                " ".join(req.live) or "none",
            )
            if action is ServiceAction.STOP:
                if req.live:
                    self.log.info("%s stop after their current batch; their runs end as success", " ".join(req.live))
                return []
        names = [cluster] if cluster is not None else supervisor.managed_clusters(admin, known_clusters(admin))
        ti = context.get("ti") if hasattr(context, "get") else None
        run_state = None
        if ti is not None and hasattr(ti, "get_dagrun_state"):
            run_state = lambda run_id: ti.get_dagrun_state(self.gateways_dag_id, run_id)  # noqa: E731
        return supervisor.launches(admin, names, run_state, self.log)
