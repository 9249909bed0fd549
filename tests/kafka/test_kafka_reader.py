"""The Kafka store's reads against a real broker (``store/kafka/reader.py``): one consumer serves every
partition a store object reads, keeps what it fetched past a read's end for the next read, seeks only
when a read does not continue the last one, passes transaction markers, and bounds what it holds."""

from __future__ import annotations

import time
import uuid

import pytest

import streamrep.store.kafka.reader as reader
from streamrep.errors import StreamrepError
from streamrep.model.message import Message
from streamrep.store.base import SpanRead
from streamrep.store.kafka import KafkaStore

pytestmark = pytest.mark.kafka


@pytest.fixture
def store(kafka_broker, kafka_namespace):
    store = KafkaStore("kc", kafka_broker, {"streamrep.namespace": kafka_namespace()})
    yield store
    store.close()


def new_stream(store: KafkaStore, partitions: int) -> str:
    stream = str(uuid.uuid4())
    store.catalog_update("stream", f"/{stream}", lambda _: {"uuid": stream, "path": f"/{stream}"})
    store.create_topic(stream, "t", partitions)
    return stream


def values(messages: list[Message]) -> list[bytes]:
    return [m.value for m in messages]


def test_one_consumer_reads_every_partition_in_one_call(store):
    stream = new_stream(store, 40)
    sent = {p: [b"%d-%d" % (p, i) for i in range(p % 4 + 1)] for p in range(40)}
    store.append(stream, "t", {p: [Message(v) for v in vs] for p, vs in sent.items()})
    found = store.read_spans([SpanRead(stream, "t", p, 0, 100) for p in range(40)])
    for p, got in enumerate(found):
        assert not isinstance(got, StreamrepError), got
        messages, next_offset = got
        assert values(messages) == sent[p] and next_offset == len(sent[p])
        assert {(m.topic, m.partition) for m in messages} == {("t", p)}
    assert len(store._reader._parts) == 40
    consumer = store._reader._consumer
    store.append(stream, "t", {7: [Message(b"late")]})
    [(late, _)] = store.read_spans([SpanRead(stream, "t", 7, len(sent[7]), 100)])
    assert values(late) == [b"late"] and store._reader._consumer is consumer


def test_a_read_stops_at_its_end_and_limit_and_the_next_read_continues_or_seeks(store):
    stream = new_stream(store, 1)
    store.append(stream, "t", {0: [Message(b"m%d" % i) for i in range(100)]})
    expect = [b"m%d" % i for i in range(100)]
    assert store.read_span(stream, "t", 0, 0, 10, 50) == (store.read(stream, "t", 0, 0, 10), 10)
    messages, next_offset = store.read_span(stream, "t", 0, 10, 100, 50)
    assert values(messages) == expect[10:50] and next_offset == 50
    messages, next_offset = store.read_span(stream, "t", 0, 50, 1000)
    assert values(messages) == expect[50:] and next_offset == 100
    # Back to an earlier offset, then ahead of the last one: each a seek, each exact.
    assert values(store.read_span(stream, "t", 0, 20, 5)[0]) == expect[20:25]
    assert values(store.read_span(stream, "t", 0, 90, 100)[0]) == expect[90:]
    assert store.read_span(stream, "t", 0, 100, 100) == ([], 100)


def test_reads_pass_the_transaction_markers_of_every_partition(store):
    stream = new_stream(store, 3)
    for p in range(3):
        for n in range(2):  # two transactions: a marker after each
            batch = [Message(b"%d-%d-%d" % (p, n, i)) for i in range(3)]
            mark = f"src|t|{p}"
            store.apply(stream, "t", p, batch, {mark: 3 * n + 3}, {mark: 3 * n if n else None}, source=mark)
    found = store.read_spans([SpanRead(stream, "t", p, 0, 100) for p in range(3)])
    for p, (messages, next_offset) in enumerate(found):  # type: ignore[misc]
        assert [m.offset for m in messages] == [0, 1, 2, 4, 5, 6]
        assert next_offset == store.offsets(stream, "t", p)[1] == 8


def test_a_span_that_cannot_be_read_gets_its_error_and_the_others_are_read(store):
    stream = new_stream(store, 2)
    store.append(stream, "t", {1: [Message(b"x")]})
    found = store.read_spans([SpanRead(stream, "gone", 0, 0, 10), SpanRead(stream, "t", 1, 0, 10)])
    assert isinstance(found[0], StreamrepError) and "\n" not in str(found[0])
    assert not isinstance(found[1], StreamrepError) and values(found[1][0]) == [b"x"]


@pytest.mark.parametrize("bound", ["BUFFERED_MESSAGES", "BUFFERED_BYTES"])
def test_idle_partitions_are_unassigned_and_unasked_ones_pause_while_too_much_waits(store, monkeypatch, bound):
    stream = new_stream(store, 2)
    store.append(stream, "t", {0: [Message(b"a%d" % i) for i in range(200)], 1: [Message(b"b")]})
    name = store.native_topic(stream, "t")
    monkeypatch.setattr(reader, bound, 10)  # messages, or bytes (each value here is 2-4 bytes)
    store.prepare_read(stream, "t", 0, 0)  # assigned and fetching; nobody asks for it yet
    deadline = time.monotonic() + 30
    while not store._reader._parts[(name, 0)].paused and time.monotonic() < deadline:
        assert values(store.read_span(stream, "t", 1, 0, 10)[0]) == [b"b"]
    assert store._reader._parts[(name, 0)].paused, "partition 0 fetched past the bound and was not paused"
    held = len(store._reader._parts[(name, 0)].buf)
    assert held > 10
    messages, next_offset = store.read_span(stream, "t", 0, 0, 1000)  # resumes: every message, in order
    assert values(messages) == [b"a%d" % i for i in range(200)] and next_offset == 200
    monkeypatch.setattr(reader, "IDLE_SECONDS", 0.0)
    time.sleep(0.01)
    store.read_span(stream, "t", 1, 1, 10)
    assert (name, 0) not in store._reader._parts


def test_a_wait_ends_with_a_message_that_the_next_read_returns(store):
    stream = new_stream(store, 2)
    assert store.await_messages(0.1) is None  # nothing read yet: the caller waits by its own clock
    store.append(stream, "t", {0: [Message(b"old")]})
    [(old, _)] = store.read_spans([SpanRead(stream, "t", 0, 0, 10)])
    store.prepare_read(stream, "t", 1, 0)
    assert values(old) == [b"old"]
    assert store.await_messages(0.2) is False  # every assigned partition read to its end
    store.append(stream, "t", {1: [Message(b"new-1")], 0: [Message(b"new-0")]})
    deadline = time.monotonic() + 30
    while not store.await_messages(0.5):
        assert time.monotonic() < deadline, "no message came in 30 s"
    found = store.read_spans([SpanRead(stream, "t", 0, 1, 10), SpanRead(stream, "t", 1, 0, 10)])
    assert [values(messages) for messages, _ in found] == [[b"new-0"], [b"new-1"]]  # type: ignore[misc]
    assert store.read_span(stream, "t", 1, 1, 10) == ([], 1)  # nothing twice
