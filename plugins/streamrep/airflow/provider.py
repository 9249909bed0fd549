"""Provider metadata, so that Airflow's connection form offers the ``streamrep`` connection
type with its own form. Airflow reads it through the entry point (in pyproject.toml)::

    [project.entry-points.apache_airflow_provider]
    provider_info = "streamrep.airflow.provider:get_provider_info"

The form is declared here (``hook-name``, ``ui-field-behaviour``): Airflow 3 builds the
connection form from the provider info and consults the hook's ``get_ui_field_behaviour()``
only when ``wtforms`` is installed, so this is the one place the form is defined; the hook
returns the same.

Without the entry point everything still works: connections of type ``streamrep`` can be
defined by environment variable, CLI or API; only the UI's form does not list the type.
"""

from __future__ import annotations

from typing import Any

CONN_TYPE = "streamrep"
HOOK_CLASS_NAME = "streamrep.airflow.hook.StreamrepHook"
HOOK_NAME = "Streamrep cluster"
ASSET_SCHEME = "streamrep"
ASSET_URI_HANDLER = "streamrep.airflow.assets.normalize_uri"

# The form of a streamrep connection: host is the cluster URL (embedded:<file> or
# kafka://host:port,...), login the identity the tasks act as; a Kafka cluster's client settings
# (security, SASL, SSL, streamrep.namespace) are the object extra.kafka, passed to confluent-kafka
# unchanged. Port, schema and password mean nothing to a streamrep cluster.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["port", "schema", "password"],
    "relabeling": {"host": "Cluster URL", "login": "Act as user"},
    "placeholders": {
        "host": "embedded:/var/lib/streamrep/clusters/newyork.db or kafka://kafka1:9092,kafka2:9092",
        "login": "the streamrep user the tasks act as (default: the worker's OS user)",
        "extra": '{"kafka": {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "streamrep", '
                 '"sasl.password": "...", "streamrep.namespace": "prod"}, "groups": "eng ops", '
                 '"home": "/var/lib/streamrep"}',
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "streamrep",
        "name": "streamrep",
        "description": "MapR Event Store style stream replication: clusters, replicas, copystream, gateways.",
        "connection-types": [
            {
                "connection-type": CONN_TYPE,
                "hook-class-name": HOOK_CLASS_NAME,
                "hook-name": HOOK_NAME,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            },
        ],
        # streamrep://<cluster>/<stream path>[:<topic>]: streams (replicas) and topics as Assets,
        # written one way by the handler (streamrep.airflow.assets)
        "asset-uris": [{"schemes": [ASSET_SCHEME], "handler": ASSET_URI_HANDLER}],
    }
