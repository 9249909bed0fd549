"""bench/mirrormaker.py, MirrorMaker 2 beside streamrep in the benchmark: the settings it writes, the kernel's
figures of a child, and the record-by-record check of a replica on a real broker (the benchmark itself times
MM2; tests do not)."""

from __future__ import annotations

import importlib
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def mm2():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("mirrormaker")
    finally:
        sys.path.remove(str(BENCH))


def test_exactly_once_is_set_for_the_target_alias_as_dedicated_mode_needs(mm2, tmp_path):
    eos = mm2.MirrorMaker("127.0.0.1:1", "127.0.0.1:2", ["a", "b"], True, tmp_path, 7)
    lines = [line.strip() for line in eos.properties().splitlines()]
    assert "t7.exactly.once.source.support = enabled" in lines
    assert not any(line.startswith("exactly.once") for line in lines)  # ignored by dedicated mode
    assert "s7->t7.enabled = true" in lines and "s7->t7.topics = a, b" in lines
    assert "t7->s7.enabled = false" in lines and "t7->s7.emit.heartbeats.enabled = false" in lines
    assert eos.replica("a") == "s7.a"  # DefaultReplicationPolicy
    alo = mm2.MirrorMaker("127.0.0.1:1", "127.0.0.1:2", ["a"], False, tmp_path, 8)
    assert "exactly.once" not in alo.properties()


def test_a_secured_cluster_s_settings_become_its_alias_java_client_settings(mm2, tmp_path):
    secured = {
        "bootstrap.servers": "127.0.0.1:3,127.0.0.1:4",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "pw",
        "ssl.ca.location": "/ca.pem",
    }
    mm = mm2.MirrorMaker("127.0.0.1:1", secured, ["a"], True, tmp_path, 9, replication=3)
    lines = [line.strip() for line in mm.properties().splitlines()]
    assert "s9.bootstrap.servers = 127.0.0.1:1" in lines and not any(line.startswith("s9.security") for line in lines)
    assert "t9.bootstrap.servers = 127.0.0.1:3,127.0.0.1:4" in lines
    assert "t9.security.protocol = SASL_SSL" in lines and "t9.sasl.mechanism = SCRAM-SHA-512" in lines
    assert (
        't9.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
        'password="pw";'
    ) in lines
    assert "t9.ssl.truststore.type = PEM" in lines and "t9.ssl.truststore.location = /ca.pem" in lines
    assert "replication.factor = 3" in lines and "offset.storage.replication.factor = 3" in lines
    with pytest.raises(ValueError, match="no Java form for \\['ssl.key.location'\\]"):
        mm2.MirrorMaker({**secured, "ssl.key.location": "/k"}, secured, ["a"], True, tmp_path, 10).properties()


def test_a_child_s_cpu_and_peak_memory_come_from_the_kernel(mm2, tmp_path):
    child = mm2.Measured(
        [sys.executable, "-c", "b = bytearray(96 << 20); sum(range(3_000_000))"], tmp_path / "child.log"
    )
    usage = child.wait(120)
    assert usage.exit == 0
    assert usage.peak_rss_mib >= 96
    assert usage.cpu_s > 0
    failing = mm2.Measured([sys.executable, "-c", "raise SystemExit(3)"], tmp_path / "failing.log")
    assert failing.wait(120).exit == 3


def _topic(admin: AdminClient, partitions: int = 4) -> str:
    name = f"mm2check-{uuid.uuid4().hex}"
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)
    return name


def _copy(bootstrap: str, topic: str, ids: list[int], transactional: bool) -> None:
    settings = {"bootstrap.servers": bootstrap}
    if transactional:
        settings["transactional.id"] = f"mm2check-{uuid.uuid4().hex}"
    producer = Producer(settings)
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    for i in ids:
        producer.produce(topic, value=i.to_bytes(8, "big") + b"x" * 92, partition=i % 4)
    if transactional:
        producer.commit_transaction(30)
    producer.flush(30)


@pytest.mark.kafka
def test_the_replica_check_counts_loss_and_duplicates_and_sees_transactions(mm2, kafka_broker):
    sys.path.insert(0, str(BENCH))
    try:
        from benchlib import kafka_fill
    finally:
        sys.path.remove(str(BENCH))
    admin = AdminClient({"bootstrap.servers": kafka_broker})
    source = _topic(admin)
    kafka_fill(kafka_broker, source, 100, 100)
    src = (kafka_broker, source)

    exact = _topic(admin)
    _copy(kafka_broker, exact, list(range(100)), transactional=True)
    figures = mm2.replica_check("exact", src, (kafka_broker, exact), transactional=True)
    assert (figures["source"], figures["replica"], figures["lost"], figures["duplicated"]) == (100, 100, 0, 0)
    assert figures["markers"] >= 1
    with pytest.raises(RuntimeError, match="no commit marker"):
        plain = _topic(admin)
        _copy(kafka_broker, plain, list(range(100)), transactional=False)
        mm2.replica_check("plain", src, (kafka_broker, plain), transactional=True)
    assert mm2.replica_check("plain", src, (kafka_broker, plain), transactional=False)["markers"] == 0

    wrong = _topic(admin)  # as many records as the source: a count alone would pass it
    _copy(kafka_broker, wrong, [*range(99), 42], transactional=False)
    with pytest.raises(RuntimeError, match="'lost': 1, 'duplicated': 1"):
        mm2.replica_check("wrong", src, (kafka_broker, wrong), transactional=False)
