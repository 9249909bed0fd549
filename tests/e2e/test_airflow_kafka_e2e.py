"""End to end through Airflow between two Kafka clusters (issue 8), with real Spark.

The clusters ``sanfrancisco`` and ``newyork`` are two namespaces on the session's Apache Kafka
broker. The Airflow processes know them only through their connections ``streamrep_<cluster>``
(a ``kafka://`` URL, the client settings in ``extra.kafka``): their own STREAMREP_HOME is empty.
Two DAGs, unchanged: ``stream_replica_manual_setup`` (the seeds' seven steps, copystream on
Spark), then ``stream_gateways`` (a Spark gateway, ``once``): the replica holds every message
exactly once and is up to date. What the autosetup and control DAGs add runs through the same
operators and hook, covered on Kafka without a DAG run (each DAG run costs minutes here):
test_airflow_hardening.py's ``test_kafka_connections_run_the_setup_tasks_on_kafka_with_their_settings``
(autosetup check, create, add, upstream, resume, pause, status through Kafka connections),
test_autosetup_recovery.py's tests marked ``backends("embedded", "kafka")`` (the autosetup itself),
and the DAGs' wiring on embedded clusters (test_airflow_e2e.py, test_autosetup_recovery.py, and
test_airflow_hardening.py's control-DAG tests).
"""

from __future__ import annotations

import json

import pytest
from test_airflow_e2e import USER, contents, expect, succeeded

from streamrep.client import Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.replication.status import replica_status

pytestmark = [pytest.mark.slow, pytest.mark.backends("kafka")]

SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
SEVEN_STEPS = (
    "create_replica",
    "add_replica_paused",
    "verify_replica",
    "add_upstream",
    "verify_upstream",
    "copystream",
    "resume_replica",
)


def produce(admin: StreamAdmin, values_by_topic: dict[str, list[str]]) -> None:
    with Producer(admin) as producer:
        for topic, values in values_by_topic.items():
            for value in values:
                producer.send(f"{SF}:{topic}", value.encode(), key=value.split("-")[-1].encode())


def test_the_dags_run_unchanged_between_two_kafka_clusters(e2e, empty_home, add_cluster, tmp_path):
    clusters = {name: add_cluster(empty_home, name) for name in ("sanfrancisco", "newyork")}
    admin = StreamAdmin(empty_home, Identity(USER))  # the test's own view of the two clusters
    admin.create_stream(SF, defaultpartitions=3)
    admin.create_topic(SF, "clicks")
    admin.create_topic(SF, "orders", partitions=2)
    sent = {"clicks": [f"click-{i}" for i in range(200)], "orders": [f"order-{i}" for i in range(30)]}
    produce(admin, sent)

    airflow_home_of_streamrep = tmp_path / "streamrep-home-of-airflow"
    env = {**e2e.env, "STREAMREP_HOME": str(airflow_home_of_streamrep)}
    for name, info in clusters.items():
        env[f"AIRFLOW_CONN_STREAMREP_{name.upper()}"] = json.dumps(
            {"conn_type": "streamrep", "host": info.url, "extra": {"kafka": dict(info.settings)}}
        )

    manual = e2e.dags_test(
        "stream_replica_manual_setup",
        {"path": SF, "replica": NY},
        "dags test stream_replica_manual_setup (kafka)",
        env=env,
    ).wait()
    succeeded(manual, "stream_replica_manual_setup")
    for task in SEVEN_STEPS:
        assert f"[DAG TEST] end task task_id={task} " in manual.output, task
    assert "Spark-Submit cmd: spark-submit --master local[2]" in manual.output
    assert contents(admin, NY) == expect(sent)  # copied exactly once
    assert admin.entry(NY).meta == admin.entry(SF).meta  # -copymetafrom
    (row,) = admin.list_replicas(SF)
    assert row.replica_path == NY and row.paused is False

    later = {"clicks": [f"late-click-{i}" for i in range(40)], "orders": [f"late-order-{i}" for i in range(5)]}
    produce(admin, later)
    admin.set_gateways("newyork", "gw1", cluster="sanfrancisco")
    gateways = e2e.dags_test(
        "stream_gateways",
        {"cluster": "newyork", "once": True},
        "dags test stream_gateways newyork (kafka, once)",
        env=env,
    ).wait()
    succeeded(gateways, "stream_gateways")
    assert "Spark-Submit cmd: spark-submit" in gateways.output
    everything = {topic: sent[topic] + later[topic] for topic in sent}
    assert contents(admin, NY) == contents(admin, SF) == expect(everything)
    (row,) = replica_status(admin, SF)
    assert row.is_uptodate and row.pending_messages == 0, row
    # the Airflow processes found both clusters through their connections, never through a registry
    assert not (airflow_home_of_streamrep / "clusters.json").exists()
    admin.clusters.close()
