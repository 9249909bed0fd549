"""Operators for the ``maprcli stream`` steps of replication setup and control, one module per area
(as Airflow's providers keep theirs):

- ``base``: ``StreamrepOperator``, the base of them all, and ``NetworkOptionsMixin``;
- ``streams``: ``stream create``;
- ``links``: replica and upstream links (add, verify, resume, pause, edit, remove, status) and
  autosetup's precondition;
- ``gateways``: which gateways serve a cluster, and the gateways as a service;
- ``monitor``: the replicas' lag alerts;
- ``verify``: the replica links to compare, and ``importstream``;
- ``failover``: the failover and failback plans and procedures;
- the Spark ones, on the Spark provider's ``SparkSubmitOperator``: ``spark_submit`` (their base),
  ``copystream``, ``spark_gateway`` (a gateway as a Spark application) and ``diffstreams``.

Each operator is one maprcli step and a thin call into ``streamrep.client`` /
``streamrep.replication``; the rules (paths, permissions, limits, states) live there. Every
operator is safe to retry: a retry finds the state it wanted and succeeds. Anything else fails the
task with streamrep's one-line message. A user error (bad path, missing stream or permission,
limit) fails at once with no retry; a cluster that cannot be reached fails and is retried.

The operators are imported from here (``from streamrep.airflow.operators import
ReplicaAddOperator``), the path users' DAGs and docs/airflow.md use; the Spark ones from
``streamrep.airflow.spark_operators``.
"""

from streamrep.airflow.operators.base import NetworkOptionsMixin, StreamrepOperator
from streamrep.airflow.operators.failover import FailbackOperator, FailoverOperator, FailoverPlanOperator
from streamrep.airflow.operators.gateways import GatewayPlanOperator, GatewayServiceOperator
from streamrep.airflow.operators.links import (
    AutosetupCheckOperator,
    ReplicaAddOperator,
    ReplicaEditOperator,
    ReplicaPauseOperator,
    ReplicaRemoveOperator,
    ReplicaResumeOperator,
    ReplicaStatusOperator,
    ReplicaVerifyOperator,
    UpstreamAddOperator,
    UpstreamVerifyOperator,
)
from streamrep.airflow.operators.monitor import ReplicaLagMonitorOperator
from streamrep.airflow.operators.streams import StreamCreateOperator
from streamrep.airflow.operators.verify import ReplicaLinksOperator, StreamImportOperator

__all__ = [
    "AutosetupCheckOperator",
    "FailbackOperator",
    "FailoverOperator",
    "FailoverPlanOperator",
    "GatewayPlanOperator",
    "GatewayServiceOperator",
    "NetworkOptionsMixin",
    "ReplicaAddOperator",
    "ReplicaEditOperator",
    "ReplicaLagMonitorOperator",
    "ReplicaLinksOperator",
    "ReplicaPauseOperator",
    "ReplicaRemoveOperator",
    "ReplicaResumeOperator",
    "ReplicaStatusOperator",
    "ReplicaVerifyOperator",
    "StreamCreateOperator",
    "StreamImportOperator",
    "StreamrepOperator",
    "UpstreamAddOperator",
    "UpstreamVerifyOperator",
]
