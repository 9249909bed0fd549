"""Replication between an embedded cluster and a Kafka cluster, both ways, through the same core calls
the CLI and the DAGs make: autosetup, gateways, multi-master with producers on both sides, and
consumer cursors translated for a move from one to the other (the migration path of docs/kafka.md)."""

from __future__ import annotations

from collections import Counter

import pytest

from streamrep.client import Consumer, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.replication import setup
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.replication.gateway import Gateway
from streamrep.replication.status import replica_status
from streamrep.replication.translate import translate_cursors

pytestmark = pytest.mark.kafka

EMB = "/mapr/emb/activity"
KAF = "/mapr/kaf/activity"


@pytest.fixture
def mixed(empty_home, kafka_broker, kafka_namespace):
    """An embedded cluster ``emb`` and a Kafka cluster ``kaf`` (a namespace on the session broker)."""
    empty_home.add("emb")
    empty_home.add("kaf", url=f"kafka://{kafka_broker}", settings={"streamrep.namespace": kafka_namespace()})
    return StreamAdmin(empty_home, Identity(user="alice", groups=frozenset({"eng"})))


def send(api: StreamAdmin, topic: str, tag: str, n: int) -> list[tuple]:
    """Produce ``n`` messages with keys, headers and timestamps; returns what a consumer should see."""
    sent = []
    with Producer(api, batch_size=1 << 30) as producer:
        for i in range(n):
            value, key, headers, ts = f"{tag}-{i}", f"k{i % 5}", [("h", f"{tag}{i}")], 1_700_000_000_000 + i
            producer.send(topic, value, key=key, headers=headers, timestamp=ts)
            sent.append((value.encode(), key.encode(), (("h", f"{tag}{i}".encode()),), ts))
    return sent


def seen(api: StreamAdmin, topic: str) -> list[tuple]:
    """Every message of ``topic`` as a consumer sees it (without the replication header)."""
    consumer = Consumer(topic, from_start=True, admin=api)
    out = []
    while batch := consumer.poll(1000):
        out.extend((m.value, m.key, tuple(h for h in m.headers if h[0] != ORIGIN_HEADER), m.timestamp) for m in batch)
    return out


def drain(*gateways: Gateway) -> int:
    total = 0
    for _ in range(50):
        moved = sum(g.run_once() for g in gateways)
        total += moved
        if not moved:
            return total
    raise AssertionError("gateways never went idle")


@pytest.mark.parametrize("source,replica", [(EMB, KAF), (KAF, EMB)], ids=["embedded-to-kafka", "kafka-to-embedded"])
def test_autosetup_and_gateway_between_backends(mixed, source, replica):
    api = mixed
    api.create_stream(source, ttl=0)
    api.create_topic(source, "clicks", 2)
    before = send(api, f"{source}:clicks", "before", 40)
    assert setup.autosetup(api, source, replica).copied == len(before)
    after = send(api, f"{source}:clicks", "after", 40)
    gateway = Gateway(api, api.path(replica).cluster, "g1")
    assert drain(gateway) == len(after)
    assert Counter(seen(api, f"{replica}:clicks")) == Counter(before + after)  # keys, headers, timestamps kept
    for partition in range(2):  # partitions and their order kept
        src = Consumer(f"{source}:clicks", from_start=True, admin=api)
        dst = Consumer(f"{replica}:clicks", from_start=True, admin=api)
        assert [m.value for m in src.poll(1000) if m.partition == partition] == [
            m.value for m in dst.poll(1000) if m.partition == partition
        ]
    [row] = replica_status(api, source)
    assert row.is_uptodate is True and row.pending_messages == 0
    assert drain(gateway) == 0  # nothing applied twice


def test_multimaster_between_backends_with_producers_on_both_sides(mixed):
    api = mixed
    api.create_stream(EMB, ttl=0)
    api.create_topic(EMB, "events", 2)
    expected = send(api, f"{EMB}:events", "seed", 10)
    setup.autosetup(api, EMB, KAF, multimaster=True)
    gateways = Gateway(api, "emb", "g1"), Gateway(api, "kaf", "g1")
    for round_ in range(3):
        expected += send(api, f"{EMB}:events", f"emb{round_}", 15)
        expected += send(api, f"{KAF}:events", f"kaf{round_}", 15)
        drain(*gateways)
    for stream in (EMB, KAF):
        assert Counter(seen(api, f"{stream}:events")) == Counter(expected), stream
    assert drain(*gateways) == 0  # no loops


@pytest.mark.parametrize("source,replica", [(EMB, KAF), (KAF, EMB)], ids=["embedded-to-kafka", "kafka-to-embedded"])
def test_consumers_move_with_translated_cursors(mixed, source, replica):
    """The last step of a migration: a consumer group's cursors, translated, resume on the replica
    at the same message although the replica's offsets differ (Kafka's transaction markers)."""
    api = mixed
    api.create_stream(source, ttl=0)
    api.create_topic(source, "orders", 1)
    send(api, f"{source}:orders", "a", 30)
    setup.autosetup(api, source, replica)
    send(api, f"{source}:orders", "b", 30)
    drain(Gateway(api, api.path(replica).cluster, "g1"))
    consumer = Consumer(f"{source}:orders", group="billing", from_start=True, admin=api)
    assert len(consumer.poll(45)) == 45
    consumer.commit()
    rest_at_source = seen_from(api, f"{source}:orders", group="billing")
    translate_cursors(api, source, replica, "billing", commit=True)
    assert seen_from(api, f"{replica}:orders", group="billing") == rest_at_source
    assert len(rest_at_source) == 15


def seen_from(api: StreamAdmin, topic: str, group: str) -> list[bytes]:
    consumer = Consumer(topic, group=group, admin=api)
    out = []
    while batch := consumer.poll(1000):
        out.extend(m.value for m in batch)
    return out
