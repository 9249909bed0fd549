"""The Kafka side of ``./run demo kafka`` (``scripts/demo.sh kafka``): the two local clusters of
``./run kafka``, and a namespace of their own for each demo run.

    python scripts/demo_kafka.py brokers        # start sanfrancisco and newyork unless they answer
    python scripts/demo_kafka.py clean <home>   # delete the Kafka topics and groups of the demo run
                                                # whose registry is <home>/clusters.json

A broker that already answers on a local cluster's port is used as it is, whichever checkout
started it. Each demo run registers its clusters under a new ``streamrep.namespace``
(``demo-<UTC time>``), so a rerun never meets the streams of the last one; ``clean`` deletes the
last run's topics and consumer groups, and only those of a ``demo-`` namespace.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kafka_local  # noqa: E402 - the one copy of the local brokers' logic, beside this script

from streamrep.client.config import Clusters, kafka_bootstrap  # noqa: E402
from streamrep.errors import StreamrepError  # noqa: E402
from streamrep.model.naming import INTERNAL_PREFIX  # noqa: E402
from streamrep.store.kafka import NAMESPACE_SETTING, TIMEOUT_SECONDS  # noqa: E402

DEMO_NAMESPACE_PREFIX = "demo-"


def brokers() -> None:
    """Start each local cluster that does not answer yet (both at once), then wait for them."""
    started = {}
    for name in kafka_local.LOCAL_CLUSTERS:
        broker = kafka_local.local_broker(name)
        if kafka_local._accepts_clients(broker):
            print(f"kafka {name}: running on {broker.bootstrap}")
        else:
            started[name] = (broker, kafka_local.launch(broker))
    for name, (broker, process) in started.items():
        kafka_local.wait_ready(broker, process)
        print(f"kafka {name}: started on {broker.bootstrap} (data and logs in {os.path.relpath(broker.home)}/)")


def clean(home: str) -> None:
    """Delete the topics (the streams' and streamrep's internal ones) and the consumer groups of
    the namespaces that the demo registry in ``home`` used."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    if not (Path(home) / "clusters.json").is_file():
        return
    for info in Clusters(home).list():
        namespace = str(info.settings.get(NAMESPACE_SETTING) or "")
        if info.kind != "kafka" or not namespace.startswith(DEMO_NAMESPACE_PREFIX):
            continue  # not a demo namespace: never delete anything else
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap(info.url), "log_level": 0})
        prefixes = (f"{namespace}.", f"{INTERNAL_PREFIX}.{namespace}.")
        try:
            topics = [t for t in admin.list_topics(timeout=TIMEOUT_SECONDS).topics if t.startswith(prefixes)]
            groups = [
                g.group_id
                for g in admin.list_consumer_groups(request_timeout=TIMEOUT_SECONDS).result().valid
                if g.group_id.startswith(prefixes)
            ]
            for future in (admin.delete_topics(topics, request_timeout=TIMEOUT_SECONDS) if topics else {}).values():
                future.result()
            for future in (
                admin.delete_consumer_groups(groups, request_timeout=TIMEOUT_SECONDS) if groups else {}
            ).values():
                future.result()
        except KafkaException as err:
            print(
                f"demo: could not delete the last demo run's namespace {namespace} on {info.name}: {err}",
                file=sys.stderr,
            )  # the new run has a namespace of its own: it goes on
            continue
        print(
            f"kafka {info.name}: deleted the last demo run's namespace {namespace} "
            f"({len(topics)} topics, {len(groups)} consumer groups)"
        )


def main(argv: list[str]) -> int:
    if argv == ["brokers"]:
        brokers()
    elif len(argv) == 2 and argv[0] == "clean":
        clean(argv[1])
    else:
        print("usage: demo_kafka.py brokers | clean <streamrep home>", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except StreamrepError as err:
        print(f"demo: {err}", file=sys.stderr)
        sys.exit(1)
