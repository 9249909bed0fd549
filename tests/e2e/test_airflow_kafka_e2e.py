"""End to end through Airflow between two Kafka clusters (issue 8), with real Spark.

The clusters ``sanfrancisco`` and ``newyork`` are two namespaces on the session's Apache Kafka
broker. The Airflow processes know them only through their connections ``streamrep_<cluster>``
(a ``kafka://`` URL, the client settings in ``extra.kafka``): their own STREAMREP_HOME is empty.
The four DAGs, unchanged: ``stream_replica_manual_setup`` (the seeds' seven steps, copystream on
Spark) and ``stream_replica_autosetup`` side by side for two streams, then ``stream_gateways``
(a Spark gateway, ``once``): each replica holds every message exactly once and is up to date;
then ``stream_replica_control`` pauses one replica.
"""

from __future__ import annotations

import json

import pytest
from streamrep.client import Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.replication.status import replica_status
from test_airflow_e2e import USER, contents, expect, succeeded

pytestmark = [pytest.mark.slow, pytest.mark.backends("kafka")]

SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
SF_METRICS, NY_METRICS = "/mapr/sanfrancisco/metrics", "/mapr/newyork/metrics"
SEVEN_STEPS = ("create_replica", "add_replica_paused", "verify_replica", "add_upstream", "verify_upstream",
               "copystream", "resume_replica")


def produce(admin: StreamAdmin, values_by_topic: dict[str, list[str]], stream: str = SF) -> None:
    with Producer(admin) as producer:
        for topic, values in values_by_topic.items():
            for value in values:
                producer.send(f"{stream}:{topic}", value.encode(), key=value.split("-")[-1].encode())


def test_the_dags_run_unchanged_between_two_kafka_clusters(e2e, empty_home, add_cluster, tmp_path):
    clusters = {name: add_cluster(empty_home, name) for name in ("sanfrancisco", "newyork")}
    admin = StreamAdmin(empty_home, Identity(USER))  # the test's own view of the two clusters
    admin.create_stream(SF, defaultpartitions=3)
    admin.create_topic(SF, "clicks")
    admin.create_topic(SF, "orders", partitions=2)
    sent = {"clicks": [f"click-{i}" for i in range(200)], "orders": [f"order-{i}" for i in range(30)]}
    produce(admin, sent)
    admin.create_stream(SF_METRICS, defaultpartitions=2)
    admin.create_topic(SF_METRICS, "cpu")
    metrics = {"cpu": [f"cpu-{i}" for i in range(50)]}
    produce(admin, metrics, SF_METRICS)

    airflow_home_of_streamrep = tmp_path / "streamrep-home-of-airflow"
    env = {**e2e.env, "STREAMREP_HOME": str(airflow_home_of_streamrep)}
    for name, info in clusters.items():
        env[f"AIRFLOW_CONN_STREAMREP_{name.upper()}"] = json.dumps(
            {"conn_type": "streamrep", "host": info.url, "extra": {"kafka": dict(info.settings)}})

    # two Airflow homes (copies of one migrated database), so the two setups run side by side
    other = {**env, "AIRFLOW_HOME": str(e2e.copy_airflow_home("airflow-home-kafka"))}
    manual = e2e.dags_test("stream_replica_manual_setup", {"path": SF, "replica": NY},
                           "dags test stream_replica_manual_setup (kafka)", env=env)
    auto = e2e.dags_test("stream_replica_autosetup", {"path": SF_METRICS, "replica": NY_METRICS},
                           "dags test stream_replica_autosetup (kafka)", env=other)
    manual, auto = manual.wait(), auto.wait()
    succeeded(manual, "stream_replica_manual_setup")
    succeeded(auto, "stream_replica_autosetup")
    assert contents(admin, NY_METRICS) == expect(metrics)
    for task in SEVEN_STEPS:
        assert f"[DAG TEST] end task task_id={task} " in manual.output, task
    assert "Spark-Submit cmd: spark-submit --master local[2]" in manual.output
    assert contents(admin, NY) == expect(sent)  # copied exactly once
    assert admin.entry(NY).meta == admin.entry(SF).meta  # -copymetafrom
    (row,) = admin.list_replicas(SF)
    assert row["replicaPath"] == NY and row["paused"] is False

    later = {"clicks": [f"late-click-{i}" for i in range(40)], "orders": [f"late-order-{i}" for i in range(5)]}
    produce(admin, later)
    admin.set_gateways("newyork", "gw1", cluster="sanfrancisco")
    metrics_later = {"cpu": [f"late-cpu-{i}" for i in range(10)]}
    produce(admin, metrics_later, SF_METRICS)
    gateways = e2e.dags_test("stream_gateways", {"cluster": "newyork", "once": True},
                           "dags test stream_gateways newyork (kafka, once)", env=env).wait()
    succeeded(gateways, "stream_gateways")
    assert "Spark-Submit cmd: spark-submit" in gateways.output
    everything = {topic: sent[topic] + later[topic] for topic in sent}
    assert contents(admin, NY) == contents(admin, SF) == expect(everything)
    assert contents(admin, NY_METRICS) == expect({"cpu": metrics["cpu"] + metrics_later["cpu"]})
    for source in (SF, SF_METRICS):
        (row,) = replica_status(admin, source)
        assert row["isUptodate"] and row["pendingMessages"] == 0, row

    control = e2e.dags_test("stream_replica_control", {"path": SF, "replica": NY, "action": "pause"},
                           "dags test stream_replica_control pause (kafka)", env=env).wait()
    succeeded(control, "stream_replica_control")
    assert [r["paused"] for r in admin.list_replicas(SF)] == [True]
    # the Airflow processes found both clusters through their connections, never through a registry
    assert not (airflow_home_of_streamrep / "clusters.json").exists()
    admin.clusters.close()
