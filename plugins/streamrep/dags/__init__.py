"""streamrep's DAGs, shipped in the package. A dags folder gets all of them with one file::

    # dags/streamrep_dags.py: the DAGs of the installed streamrep provider
    from airflow.sdk import DAG  # noqa: F401 - Airflow's safe mode needs "airflow" and "dag" in the file

    from streamrep.dags import *  # noqa: F401,F403

Airflow registers each DAG as defined in that file (its ``fileloc``), so the scheduler, the
workers and ``airflow dags test`` all find them through it. Each module holds one DAG, named
after the module, but ``common``: what they share (how a replica DAG and a scheduled DAG run).
"""

from streamrep.dags.stream_gateway_service import dag as stream_gateway_service
from streamrep.dags.stream_gateways import dag as stream_gateways
from streamrep.dags.stream_replica_autosetup import dag as stream_replica_autosetup
from streamrep.dags.stream_replica_control import dag as stream_replica_control
from streamrep.dags.stream_replica_failback import dag as stream_replica_failback
from streamrep.dags.stream_replica_failover import dag as stream_replica_failover
from streamrep.dags.stream_replica_manual_setup import dag as stream_replica_manual_setup
from streamrep.dags.stream_replica_monitor import dag as stream_replica_monitor
from streamrep.dags.stream_replica_verify import dag as stream_replica_verify

__all__ = [
    "stream_gateway_service",
    "stream_gateways",
    "stream_replica_autosetup",
    "stream_replica_control",
    "stream_replica_failback",
    "stream_replica_failover",
    "stream_replica_manual_setup",
    "stream_replica_monitor",
    "stream_replica_verify",
]
