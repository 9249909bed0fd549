"""Apply lanes on a real broker (``model/lanes.py``, ``KafkaStore._apply_round``): one transaction
per lane and round, a refused apply that leaves the rest of its lane to be retried, and the move from
per-partition transactional ids, which fences a writer from before lanes and is refused by one that
reads only format 1."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, Producer

from streamrep.errors import CorruptStore, RetryNow, StreamrepError
from streamrep.model.lanes import APPLY_LANES, apply_lane
from streamrep.model.message import Message
from streamrep.store.base import PartitionApplies, ReplicaApply
from streamrep.store.kafka import KafkaStore, keys

pytestmark = pytest.mark.kafka


@pytest.fixture
def namespace(kafka_namespace):
    return kafka_namespace()


@pytest.fixture
def stores(kafka_broker, namespace):
    made: list[KafkaStore] = []

    def new() -> KafkaStore:
        made.append(KafkaStore("kc", kafka_broker, {"streamrep.namespace": namespace}))
        return made[-1]

    yield new
    for store in made:
        store.close()


def add_stream(store: KafkaStore, partitions: int, kafka_broker: str | None = None) -> str:
    """A stream of one topic; with ``kafka_broker``, one as a streamrep from before lanes left it: no lanes mark."""
    stream = str(uuid.uuid4())
    store.catalog_update("stream", "/s", lambda _: {"uuid": stream, "path": "/s", "naming": None})
    store.create_topic(stream, "t", partitions)
    if kafka_broker is not None:
        eraser = Producer({"bootstrap.servers": kafka_broker})
        marks = store.internal_prefix + "marks"
        eraser.produce(marks, key=keys.mark_key(stream, keys.LANES_MARK).encode(), value=None)
        assert eraser.flush(30) == 0
        assert lanes_state(store, stream) is None
    return stream


def one_message_each(stream: str, partitions) -> list[PartitionApplies]:
    """An apply of one message to each of ``partitions``, moving its own position mark from nothing to 1."""
    return [
        PartitionApplies(
            "t",
            p,
            f"p|src|t|{p}",
            [ReplicaApply(stream, [Message(b"m%d" % p)], {f"p|src|t|{p}": 1}, {f"p|src|t|{p}": None})],
        )
        for p in partitions
    ]


def open_pre_lane_transaction(store: KafkaStore, kafka_broker: str, stream: str) -> Producer:
    """A writer of partition 0 as streamrep before lanes: its own per-partition id, a record written and
    its transaction left open."""
    old = Producer(
        {
            "bootstrap.servers": kafka_broker,
            "transactional.id": keys.partition_txid(store.internal_prefix, stream, "t", 0),
        }
    )
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(store.native_topic(stream, "t"), b"old", partition=0)
    assert old.flush(30) == 0
    return old


def lanes_state(store: KafkaStore, stream: str) -> int | None:
    """The stream's lanes mark, which ``marks()`` hides."""
    fold = store._marks_fold()  # noqa: SLF001
    fold.catch_up()
    return fold.state.get(stream, {}).get(keys.LANES_MARK)


def test_a_round_is_one_transaction_per_lane(stores):
    """64 partitions applied in one call: 16 transactional ids, one producer each, every apply
    committed once with its mark."""
    store = stores()
    stream = add_stream(store, 64)
    results = store.apply_partitions(one_message_each(stream, range(64)))
    assert results == [[0]] * 64  # each message at offset 0 of its partition
    ids = {txid for txid in store._transactions._producers if ".apply." in txid}  # noqa: SLF001 - one per id
    lanes = {keys.apply_txid(store.internal_prefix, stream, "t", p) for p in range(64)}
    assert len(lanes) == APPLY_LANES and ids == lanes
    assert store.marks(stream) == {f"p|src|t|{p}": 1 for p in range(64)}  # the lanes mark is the store's own
    reader = stores()
    assert all([m.value for m in reader.read(stream, "t", p, 0, 10)] == [b"m%d" % p] for p in range(64))


def test_a_refused_apply_leaves_the_rest_of_its_lane_to_be_retried(stores):
    """Partitions 0 and 16 are in one lane; 16 does not exist. Its apply gets the refusal, the other's
    is aborted with it and told to retry, and nothing of either is committed. Applied again alone, 0
    commits."""
    store = stores()
    stream = add_stream(store, 16)
    assert apply_lane("t", 0) == apply_lane("t", 16)
    [[kept], [refused]] = store.apply_partitions(one_message_each(stream, [0, 16]))
    assert isinstance(refused, StreamrepError) and not isinstance(refused, RetryNow), refused
    assert isinstance(kept, RetryNow) and "aborted with another apply" in str(kept), kept
    assert store.marks(stream) == {} and store.read(stream, "t", 0, 0, 10) == []
    [[first]] = store.apply_partitions(one_message_each(stream, [0]))
    assert isinstance(first, int) and store.marks(stream) == {"p|src|t|0": 1}
    assert [m.value for m in store.read(stream, "t", 0, 0, 10)] == [b"m0"]


def test_a_writer_from_before_lanes_is_fenced_then_refused(stores, kafka_broker, monkeypatch):
    """A streamrep from before lanes has a transaction open on partition 0 under its per-partition id.
    The first apply under lanes fences it (its commit fails) and marks the stream in format 2, which a
    streamrep that reads only format 1 refuses, so it applies there no more."""
    store = stores()
    stream = add_stream(store, 2, kafka_broker)
    old = open_pre_lane_transaction(store, kafka_broker, stream)
    store.apply(stream, "t", 0, [Message(b"new")], {"p|src|t|0": 1}, {"p|src|t|0": None})
    with pytest.raises(KafkaException, match="(?i)fenced|epoch"):
        old.commit_transaction(30)
    assert [m.value for m in stores().read(stream, "t", 0, 0, 10)] == [b"new"]
    assert lanes_state(store, stream) == keys.LANES_FENCED
    monkeypatch.setattr(keys, "FORMAT", 1)  # a streamrep from before lanes, as far as records go
    with pytest.raises(CorruptStore, match=r"replication marks of stream .* newer streamrep \(format 2"):
        stores().marks(stream)


def test_a_move_to_lanes_left_half_done_is_finished_by_the_next_writer(stores, kafka_broker):
    """The writer that marked the stream died before it fenced the old ids: the next one fences them."""
    store = stores()
    stream = add_stream(store, 1, kafka_broker)
    store._write_lanes_mark(stream, keys.LANES_MARKED)  # noqa: SLF001 - the state a kill leaves
    old = open_pre_lane_transaction(store, kafka_broker, stream)
    stores().apply(stream, "t", 0, [Message(b"new")], {"p|src|t|0": 1}, {"p|src|t|0": None})
    with pytest.raises(KafkaException, match="(?i)fenced|epoch"):
        old.commit_transaction(30)
    assert lanes_state(store, stream) == keys.LANES_FENCED


def test_a_stream_created_under_lanes_is_born_fenced(stores, monkeypatch):
    """Its creation writes the lanes mark as done: no streamrep from before lanes knew its UUID, so its
    first apply fences no per-partition id (at 1,024 partitions, 1,024 producers initialised)."""
    store = stores()
    stream = add_stream(store, 8)
    assert lanes_state(store, stream) == keys.LANES_FENCED

    def refuse(_stream: str) -> None:
        raise AssertionError("a stream born under lanes was fenced again")

    writer = stores()
    monkeypatch.setattr(writer, "_fence_partition_writers", refuse)
    assert writer.apply_partitions(one_message_each(stream, range(8))) == [[0]] * 8
    assert writer.marks(stream) == {f"p|src|t|{p}": 1 for p in range(8)}
