"""Provider metadata, so that Airflow's connection form offers the ``streamrep`` connection
type. Airflow reads it through the entry point (in pyproject.toml)::

    [project.entry-points.apache_airflow_provider]
    provider_info = "streamrep.airflow.provider:get_provider_info"

Without the entry point everything still works: connections of type ``streamrep`` can be
defined by environment variable, CLI or API; only the UI's form does not list the type.
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "streamrep",
        "name": "streamrep",
        "description": "MapR Event Store style stream replication: clusters, replicas, copystream, gateways.",
        "connection-types": [
            {"connection-type": "streamrep", "hook-class-name": "streamrep.airflow.hook.StreamrepHook"},
        ],
    }
