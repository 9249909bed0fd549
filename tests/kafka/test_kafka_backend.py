"""Kafka-only behaviour found while running the behavioural tests on Kafka clusters: the fixes
each comes with, against the real broker."""

from __future__ import annotations

import uuid

import pytest

from streamrep.model.message import Message
from streamrep.store.kafka import KafkaStore

pytestmark = pytest.mark.backends("kafka")


@pytest.fixture
def store(empty_home, add_cluster) -> KafkaStore:
    """The store of a Kafka cluster of its own (a namespace on the session's broker, deleted after the test)."""
    add_cluster(empty_home, "kc")
    return empty_home.store("kc")


def test_marks_are_dropped_by_a_store_whose_producer_another_store_fenced(store):
    """Two store objects (an acknowledging CLI and a gateway, say) write one replica partition:
    each fences the other's transactional producer. ``drop_marks`` has no RetryNow in its
    contract (the embedded store never raises one), so the fenced store reads again and drops."""
    other = KafkaStore("kc", store.bootstrap, {"streamrep.namespace": store.namespace})
    try:
        stream = str(uuid.uuid4())
        store.catalog_update("stream", "/s", lambda _: {"uuid": stream, "path": "/s"})
        store.create_topic(stream, "t", 1)
        key = "l|source|t|0|1"
        store.apply(stream, "t", 0, [Message(b"a")], {key: 3}, {key: None})
        other.apply(stream, "t", 0, [Message(b"b")], {key: 4}, {key: 3})  # fences the first store's producer
        assert store.drop_marks(stream, {key: 3}) == 0  # changed meanwhile: kept
        assert store.drop_marks(stream, {key: 4}) == 1
        assert other.marks(stream) == {}
    finally:
        other.close()


def test_a_store_writes_to_partitions_another_store_added(store):
    """A producer's metadata is cached for minutes: partitions added meanwhile (by another store
    object, process or admin) are written to, by append and by the transactional apply."""
    other = KafkaStore("kc", store.bootstrap, {"streamrep.namespace": store.namespace})
    try:
        stream = str(uuid.uuid4())
        store.catalog_update("stream", "/s", lambda _: {"uuid": stream, "path": "/s"})
        store.create_topic(stream, "t", 1)
        store.append(stream, "t", {0: [Message(b"a")]})
        store.apply(stream, "t", 0, [Message(b"b")], {"p|s|t|0": 1}, {"p|s|t|0": None})
        other.add_partitions(stream, "t", 3)
        assert store.append(stream, "t", {2: [Message(b"c")]}) == {2: 0}
        store.apply(stream, "t", 1, [Message(b"d")], {"p|s|t|1": 1}, {"p|s|t|1": None})
        assert [m.value for m in other.read(stream, "t", 2, 0, 10)] == [b"c"]
        assert [m.value for m in other.read(stream, "t", 1, 0, 10)] == [b"d"]
    finally:
        other.close()


def test_a_store_reads_partitions_another_store_added(store):
    """Offsets and reads of partitions added after the store's clients read metadata (a gateway
    picking up a source's new partitions) are answered at once, not after a 15 s timeout."""
    other = KafkaStore("kc", store.bootstrap, {"streamrep.namespace": store.namespace})
    try:
        stream = str(uuid.uuid4())
        store.catalog_update("stream", "/s", lambda _: {"uuid": stream, "path": "/s"})
        store.create_topic(stream, "t", 1)
        assert store.offsets(stream, "t", 0) == (0, 0)
        other.add_partitions(stream, "t", 3)
        other.append(stream, "t", {2: [Message(b"c")]})
        assert store.offsets(stream, "t", 2) == (0, 1)
        assert [m.value for m in store.read(stream, "t", 2, 0, 10)] == [b"c"]
    finally:
        other.close()


FENCING_CHILD = """
import sys, uuid
from streamrep.errors import RetryNow
from streamrep.model.message import Message
from streamrep.store.kafka import KafkaStore

bootstrap, namespace = sys.argv[1], sys.argv[2]
first, second = (KafkaStore("kc", bootstrap, {"streamrep.namespace": namespace}) for _ in range(2))
stream = str(uuid.uuid4())
first.catalog_update("stream", "/s", lambda _: {"uuid": stream, "path": "/s"})
first.create_topic(stream, "t", 1)
key = "p|source|t|0"
first.apply(stream, "t", 0, [Message(b"a")], {key: 1}, {key: None})
second.apply(stream, "t", 0, [Message(b"b")], {key: 2}, {key: 1})  # fences the first store's producer
try:
    first.apply(stream, "t", 0, [Message(b"c")], {key: 3}, {key: 2})
except RetryNow:  # fenced: as every caller of apply does, retry (with a new producer)
    first.apply(stream, "t", 0, [Message(b"c")], {key: 3}, {key: 2})
print(sorted(first.marks(stream).items()))
first.close(); second.close()
"""


def test_routine_fencing_prints_nothing_on_stderr(store):
    """A failover or failback fences the gateways' transactional producers (and they its): that is
    how exactly-once works, so librdkafka's ``FATAL ... fenced`` log lines stay out of the user's output."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", FENCING_CHILD, store.bootstrap, store.namespace],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[('p|source|t|0', 3)]"
    assert "fenced" not in done.stderr.lower() and "FATAL" not in done.stderr, done.stderr
