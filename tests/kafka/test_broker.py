"""The real Apache Kafka broker and confluent-kafka behave as the Kafka backend will rely on.

Not tests of streamrep code: they pin down the broker semantics of issue 8 (records kept exactly,
transactions across topics, the last stable offset, fencing of a zombie producer, compacted topics),
so the kafka store is built on measured behaviour.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec

pytestmark = pytest.mark.kafka

TIMEOUT_S = 30  # bound of every blocking client call; none is expected to come near it


@pytest.fixture(scope="module")
def admin(kafka_broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": kafka_broker})


@pytest.fixture
def new_topic(admin):
    """Create a topic with a fresh name: ``new_topic(partitions=1, **config) -> name``."""

    def create(partitions: int = 1, **config: str) -> str:
        name = f"smoke-{uuid.uuid4().hex[:10]}"
        admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(TIMEOUT_S)
        # The controller answers before the broker has the topic in its metadata: under load a describe
        # right after was answered "Unknown topic or partition". Wait until each partition has a leader.
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            found = admin.list_topics(name, timeout=TIMEOUT_S).topics.get(name)
            leaders = [] if found is None or found.error else [p.leader for p in found.partitions.values()]
            if len(leaders) == partitions and min(leaders) >= 0:
                return name
            assert time.monotonic() < deadline, f"topic {name} has no leader {TIMEOUT_S} s after its creation"
            time.sleep(0.05)

    return create


class RecordingProducer(Producer):
    """A producer that keeps every record's delivery error, for :func:`deliver` to check."""

    def __init__(self, settings: dict) -> None:
        self.failures: list[KafkaError] = []
        super().__init__(settings)

    def _delivered(self, error: KafkaError | None, _message: Message) -> None:
        if error is not None:
            self.failures.append(error)

    def produce(self, *args, **kwargs) -> None:
        super().produce(*args, on_delivery=self._delivered, **kwargs)


def producer(bootstrap: str, **settings) -> RecordingProducer:
    return RecordingProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})


def deliver(writer: Producer) -> None:
    """Flush ``writer`` and fail on any record the broker did not accept."""
    assert writer.flush(TIMEOUT_S) == 0, "records still queued after the flush"
    assert not writer.failures, writer.failures


def transactional_producer(bootstrap: str, transactional_id: str) -> RecordingProducer:
    made = producer(bootstrap, **{"transactional.id": transactional_id})
    made.init_transactions(TIMEOUT_S)
    return made


def consumer(bootstrap: str, isolation: str = "read_committed") -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )


def wait_for_last_stable_offset(bootstrap: str, topic: str, at_least: int, partition: int = 0) -> int:
    """The partition's last stable offset once it reaches ``at_least`` (or whatever it is after the bound).

    ``commit_transaction`` returns once the coordinator has decided; the markers reach the partitions
    just after, so a read_committed consumer may briefly see the old end.
    """
    reader = consumer(bootstrap)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            _, end = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
            if end >= at_least or time.monotonic() > deadline:
                return end
            time.sleep(0.05)
    finally:
        reader.close()


def read_to_end(bootstrap: str, topic: str, partition: int = 0, isolation: str = "read_committed") -> list[Message]:
    """Every record of one partition that ``isolation`` lets a consumer see, from the start to the end.

    The end is the high watermark under read_uncommitted and the last stable offset under
    read_committed, as the broker reports it to a consumer of that isolation level.
    """
    reader = consumer(bootstrap, isolation)
    try:
        start, end = reader.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)
        reader.assign([TopicPartition(topic, partition, start)])
        records: list[Message] = []
        deadline = time.monotonic() + TIMEOUT_S
        # Before the first fetch the position is invalid (negative): start from the low watermark.
        # A poll can return nothing while the position passes a transaction marker.
        while max(start, reader.position([TopicPartition(topic, partition)])[0].offset) < end:
            assert time.monotonic() < deadline, f"did not reach offset {end} of {topic}[{partition}]"
            message = reader.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                records.append(message)
        return records
    finally:
        reader.close()


def test_keys_headers_timestamps_and_explicit_partitions_are_kept(kafka_broker, new_topic):
    topic = new_topic(partitions=3)
    sent = [
        # (partition, key, value, headers, timestamp in ms). Timestamps in the past: Kafka 4 refuses
        # one more than an hour ahead of the broker's clock (log.message.timestamp.after.max.ms).
        (2, b"user-1", b"first", [("streamrep.origin", b"uuid-a"), ("trace", b"1")], 1_700_000_000_001),
        (0, None, b"no key", [], 1_700_000_000_002),
        (2, b"user-2", None, [("trace", b"2"), ("trace", b"3"), ("empty", None)], 1_600_000_000_000),
        (1, b"\x00binary\xff", b"\xff" * 1000, [("streamrep.origin", b"uuid-b")], 1_000_000_000_000),
    ]
    writer = producer(kafka_broker)
    for partition, key, value, headers, timestamp in sent:
        writer.produce(topic, value=value, key=key, partition=partition, headers=headers, timestamp=timestamp)
    deliver(writer)

    received = [
        (message.partition(), message.key(), message.value(), message.headers() or [], message.timestamp())
        for partition in range(3)
        for message in read_to_end(kafka_broker, topic, partition, "read_uncommitted")
    ]
    expected = [
        (partition, key, value, headers, (TIMESTAMP_CREATE_TIME, timestamp))
        for partition, key, value, headers, timestamp in sorted(sent, key=lambda record: record[0])
    ]
    assert received == expected  # per partition in produce order; repeated headers and their order kept


def test_a_transaction_over_two_topics_is_invisible_when_aborted_and_visible_when_committed(kafka_broker, new_topic):
    # The gateway's unit of work: replicated records and the new source position, in one transaction.
    records, positions = new_topic(partitions=1), new_topic(partitions=1, **{"cleanup.policy": "compact"})
    writer = transactional_producer(kafka_broker, f"smoke-{records}")

    writer.begin_transaction()
    writer.produce(records, b"aborted-1")
    writer.produce(records, b"aborted-2")
    writer.produce(positions, key=b"source-partition-0", value=b"2")
    deliver(writer)  # in the log: without the flush, the abort would drop them before they were sent
    writer.abort_transaction(TIMEOUT_S)

    writer.begin_transaction()
    writer.produce(records, b"committed-1")
    writer.produce(records, b"committed-2")
    writer.produce(positions, key=b"source-partition-0", value=b"4")
    writer.commit_transaction(TIMEOUT_S)
    # Each transaction marker takes an offset (2 after the abort, 5 after the commit; 1 and 3 in
    # positions): replica offsets cannot simply equal source offsets.
    assert wait_for_last_stable_offset(kafka_broker, records, 6) == 6
    assert wait_for_last_stable_offset(kafka_broker, positions, 4) == 4

    committed = read_to_end(kafka_broker, records)
    assert [(m.offset(), m.value()) for m in committed] == [(3, b"committed-1"), (4, b"committed-2")]
    assert [(m.key(), m.value()) for m in read_to_end(kafka_broker, positions)] == [(b"source-partition-0", b"4")]
    everything = read_to_end(kafka_broker, records, isolation="read_uncommitted")
    assert [m.value() for m in everything] == [b"aborted-1", b"aborted-2", b"committed-1", b"committed-2"]
    assert [m.offset() for m in everything] == [0, 1, 3, 4]


def test_the_last_stable_offset_stays_below_an_open_transaction(kafka_broker, admin, new_topic):
    topic = new_topic()
    plain = producer(kafka_broker)
    for n in range(3):
        plain.produce(topic, b"plain-%d" % n)
    deliver(plain)
    writer = transactional_producer(kafka_broker, f"smoke-{topic}")
    writer.begin_transaction()
    writer.produce(topic, b"open-1")
    writer.produce(topic, b"open-2")
    deliver(writer)  # both records are in the log, their transaction still open

    partition = TopicPartition(topic, 0)
    uncommitted_reader, committed_reader = consumer(kafka_broker, "read_uncommitted"), consumer(kafka_broker)

    def latest(isolation: IsolationLevel) -> int:
        answer = admin.list_offsets({partition: OffsetSpec.latest()}, isolation_level=isolation)
        return answer[partition].result(TIMEOUT_S).offset

    # High watermark 5, last stable offset 3: a read_committed consumer's end is the LSO.
    assert uncommitted_reader.get_watermark_offsets(partition, timeout=TIMEOUT_S) == (0, 5)
    assert committed_reader.get_watermark_offsets(partition, timeout=TIMEOUT_S) == (0, 3)
    assert (latest(IsolationLevel.READ_UNCOMMITTED), latest(IsolationLevel.READ_COMMITTED)) == (5, 3)
    assert [m.value() for m in read_to_end(kafka_broker, topic)] == [b"plain-0", b"plain-1", b"plain-2"]

    # The position of a read_committed consumer stops at the LSO, whatever it polls.
    committed_reader.assign([TopicPartition(topic, 0, 0)])
    seen = [committed_reader.poll(TIMEOUT_S) for _ in range(3)]
    assert [m.offset() for m in seen] == [0, 1, 2]
    assert committed_reader.poll(1) is None
    assert committed_reader.position([partition])[0].offset == 3

    writer.commit_transaction(TIMEOUT_S)
    # The commit marker at offset 5 moves both ends to 6, and the consumer's position passes it.
    assert wait_for_last_stable_offset(kafka_broker, topic, 6) == 6
    assert uncommitted_reader.get_watermark_offsets(partition, timeout=TIMEOUT_S) == (0, 6)
    assert [committed_reader.poll(TIMEOUT_S).value() for _ in range(2)] == [b"open-1", b"open-2"]
    while committed_reader.position([partition])[0].offset < 6:
        assert committed_reader.poll(1) is None  # only the marker is left; it is never delivered
    committed_reader.close()
    uncommitted_reader.close()


def test_a_zombie_producer_is_fenced_by_a_new_one_with_the_same_transactional_id(kafka_broker, new_topic):
    topic = new_topic()
    transactional_id = f"smoke-gateway-{topic}"
    zombie = transactional_producer(kafka_broker, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, b"from the zombie")
    deliver(zombie)

    successor = transactional_producer(kafka_broker, transactional_id)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(TIMEOUT_S)
    error = fenced.value.args[0]
    assert error.code() == KafkaError._FENCED and error.fatal()

    successor.begin_transaction()
    successor.produce(topic, b"from the successor")
    successor.commit_transaction(TIMEOUT_S)
    assert [m.value() for m in read_to_end(kafka_broker, topic)] == [b"from the successor"]


def test_a_compacted_topic_reads_back_the_latest_value_of_each_key(kafka_broker, admin, new_topic):
    topic = new_topic(**{"cleanup.policy": "compact"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert configs["cleanup.policy"].value == "compact"

    writer = producer(kafka_broker)
    for key, value in [(b"stream-a", b"v1"), (b"stream-b", b"v1"), (b"stream-a", b"v2"), (b"stream-b", None)]:
        writer.produce(topic, key=key, value=value)
    deliver(writer)

    latest: dict[bytes, bytes] = {}
    for message in read_to_end(kafka_broker, topic):
        if message.value() is None:  # a tombstone deletes the key
            latest.pop(message.key(), None)
        else:
            latest[message.key()] = message.value()
    assert latest == {b"stream-a": b"v2"}

    # A compacted topic refuses a record without a key.
    writer.produce(topic, value=b"no key")
    writer.flush(TIMEOUT_S)
    assert [error.code() for error in writer.failures] == [KafkaError.INVALID_RECORD]
