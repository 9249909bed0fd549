"""Provider metadata, as Airflow's own providers declare theirs: the integration, its hooks,
operators, sensors and triggers, the ``streamrep`` connection type with its own form, the
``streamrep://`` asset scheme, the ``streamrep`` scheme of common-messaging's
``MessageQueueTrigger`` and the ``[streamrep]`` config section (the UI plugin comes through
its own entry point, see below). Airflow reads
it through the entry point (in pyproject.toml)::

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
# common-messaging's MessageQueueTrigger(scheme="streamrep", stream=..., topic=...)
QUEUE_PROVIDER = "streamrep.airflow.queues.StreamrepMessageQueueProvider"
INTEGRATION = "streamrep"
CONFIG_SECTION = "streamrep"
SPARK_CONN_OPTION = "spark_conn_id"
DEFAULT_SPARK_CONN_ID = "spark_default"

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


def spark_conn_id() -> str:
    """The Spark connection copystream and the gateways use unless an operator names one:
    ``[streamrep] spark_conn_id`` of Airflow's config (``AIRFLOW__STREAMREP__SPARK_CONN_ID``)."""
    from airflow.configuration import conf

    return conf.get(CONFIG_SECTION, SPARK_CONN_OPTION, fallback=DEFAULT_SPARK_CONN_ID) or DEFAULT_SPARK_CONN_ID


def _modules(*names: str) -> list[dict[str, Any]]:
    return [{"integration-name": INTEGRATION, "python-modules": [f"streamrep.airflow.{n}" for n in names]}]


def get_provider_info() -> dict[str, Any]:
    from streamrep import __version__

    return {
        "package-name": "streamrep",
        "name": "streamrep",
        "description": "MapR Event Store style stream replication: clusters, replicas, copystream, gateways.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "tags": ["software"],
            }
        ],
        "hooks": _modules("hook"),
        # one module per area, as Airflow's own providers list theirs
        "operators": _modules(
            "operators.base",
            "operators.streams",
            "operators.links",
            "operators.gateways",
            "operators.monitor",
            "operators.verify",
            "operators.failover",
            "operators.spark_submit",
            "operators.copystream",
            "operators.spark_gateway",
            "operators.diffstreams",
        ),
        "sensors": _modules("sensors"),
        "triggers": _modules("triggers"),
        # No "plugins" entry: the page registers through the airflow.plugins entry point, which Airflow
        # loads in every configuration. Airflow loads provider-info plugins only with
        # lazy_discover_providers off, and then reports the second registration as an import error.
        "config": {
            CONFIG_SECTION: {
                "description": "streamrep, the stream replication provider.",
                "options": {
                    SPARK_CONN_OPTION: {
                        "description": "The Spark connection that copystream and the gateways run on, unless "
                        "an operator's conn_id names another. Its host is the Spark master "
                        "(local[2], spark://host:7077, yarn).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "spark_cluster",
                        "default": DEFAULT_SPARK_CONN_ID,
                    },
                },
            },
        },
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
        # MessageQueueTrigger(scheme="streamrep", ...) of common-messaging, which looks its queue
        # providers up here as the apache-kafka provider's "kafka" (streamrep.airflow.queues)
        "queues": [QUEUE_PROVIDER],
    }
