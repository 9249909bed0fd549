"""Tests for streamrep.client.producer and streamrep.client.consumer on embedded clusters, and on
Kafka clusters where marked."""

import time
from collections import Counter

import pytest

from streamrep.client import consumer as consumer_module
from streamrep.client.catalog import now_ms
from streamrep.client.consumer import Consumer
from streamrep.client.producer import Producer
from streamrep.client.results import TopicSummary
from streamrep.errors import InvalidArgument, NotFound, PermissionDenied
from streamrep.model.message import Message
from streamrep.model.partitioner import partition_for_key
from streamrep.model.paths import parse_topic_path

# On Kafka clusters too: partitioning, autocreate, permissions, message fields, flush offsets,
# groups, seeks and retention; argument checks made before any store call stay embedded-only.
ON_BOTH = pytest.mark.backends("embedded", "kafka")

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
HOUR_MS = 3600 * 1000


@pytest.fixture
def sf(admin):
    return admin.create_stream(SF)


def consume_all(admin, topic, **kw):
    return Consumer(topic, from_start=True, admin=admin, **kw).poll(max_messages=10_000)


# --- partitioning -------------------------------------------------------------------


@ON_BOTH
def test_key_hash_partitioning_matches_kafka(admin):
    admin.create_stream(SF, defaultpartitions=5)
    keys = [f"user-{i}" for i in range(40)]
    with Producer(admin) as p:
        for k in keys:
            p.send(SF + ":clicks", f"v-{k}", key=k)
    got = consume_all(admin, SF + ":clicks")
    assert len(got) == 40
    for m in got:
        assert m.partition == partition_for_key(m.key, 5)
        assert m.value == b"v-" + m.key
    assert len({m.partition for m in got}) > 1


@ON_BOTH
def test_same_key_keeps_order_in_one_partition(admin):
    admin.create_stream(SF, defaultpartitions=4)
    with Producer(admin) as p:
        for i in range(10):
            p.send(SF + ":t", str(i), key=b"same")
    got = consume_all(admin, SF + ":t")
    assert {m.partition for m in got} == {partition_for_key(b"same", 4)}
    assert [m.value for m in got] == [str(i).encode() for i in range(10)]
    assert [m.offset for m in got] == list(range(10))


def test_explicit_partition_overrides_key(admin):
    admin.create_stream(SF, defaultpartitions=3)
    key = b"k"
    target = (partition_for_key(key, 3) + 1) % 3
    with Producer(admin) as p:
        p.send(SF + ":t", "v", key=key, partition=target)
    (m,) = consume_all(admin, SF + ":t")
    assert m.partition == target


@pytest.mark.parametrize("partition", [3, -1, True, "1"])
def test_bad_partition(admin, partition):
    admin.create_stream(SF, defaultpartitions=3)
    p = Producer(admin)
    with pytest.raises(InvalidArgument, match="has partitions 0 to 2"):
        p.send(SF + ":t", "v", partition=partition)
    p.flush()
    assert consume_all(admin, SF + ":t") == []


@ON_BOTH
def test_round_robin_spreads_keyless_messages(admin):
    admin.create_stream(SF, defaultpartitions=4)
    with Producer(admin) as p:
        for i in range(8):
            p.send(SF + ":t", str(i))
    counts = Counter(m.partition for m in consume_all(admin, SF + ":t"))
    assert counts == {0: 2, 1: 2, 2: 2, 3: 2}


# --- topics and permissions ------------------------------------------------------------


@ON_BOTH
def test_autocreate_uses_defaultpartitions(admin):
    admin.create_stream(SF, defaultpartitions=3)
    with Producer(admin) as p:
        p.send(SF + ":new", "v")
    native = admin.store(admin.path(SF)).native_topic(admin.entry(SF).uuid, "new")  # the Kafka topic, on Kafka
    assert admin.list_topics(SF) == [TopicSummary("new", 3, 1, native)]


def test_existing_topic_keeps_its_partitions(admin, sf):
    admin.create_topic(SF, "t", partitions=2)
    p = Producer(admin)
    assert p.partitions(parse_topic_path(SF + ":t", None)) == 2


@ON_BOTH
def test_autocreate_false_is_not_found(admin):
    admin.create_stream(SF, autocreate=False)
    with pytest.raises(NotFound, match="does not autocreate topics"):
        Producer(admin).send(SF + ":new", "v")
    assert admin.list_topics(SF) == []


def test_autocreate_false_existing_topic_works(admin):
    admin.create_stream(SF, autocreate=False)
    admin.create_topic(SF, "t")
    with Producer(admin) as p:
        p.send(SF + ":t", "v")
    assert len(consume_all(admin, SF + ":t")) == 1


@ON_BOTH
def test_topic_created_after_producer_start_is_seen(admin):
    admin.create_stream(SF, autocreate=False)
    admin.create_topic(SF, "a")
    p = Producer(admin)
    p.send(SF + ":a", "v")
    admin.create_topic(SF, "b", partitions=2)
    p.send(SF + ":b", "w", partition=1)
    p.flush()
    assert [m.partition for m in consume_all(admin, SF + ":b")] == [1]


def test_unknown_stream(admin):
    with pytest.raises(NotFound, match=f"stream {SF} does not exist"):
        Producer(admin).send(SF + ":t", "v")
    with pytest.raises(NotFound, match=f"stream {SF} does not exist"):
        Consumer(SF + ":t", admin=admin)


@ON_BOTH
def test_produceperm_denied(admin, bob, sf):
    with pytest.raises(PermissionDenied, match="user bob does not have produceperm"):
        Producer(bob).send(SF + ":t", "v")
    assert admin.list_topics(SF) == []
    admin.edit_stream(SF, produceperm="p")
    with Producer(bob) as p:
        p.send(SF + ":t", "v")
    assert len(consume_all(admin, SF + ":t")) == 1


@ON_BOTH
def test_consumeperm_denied(admin, bob, sf):
    admin.create_topic(SF, "t")
    with pytest.raises(PermissionDenied, match="user bob does not have consumeperm"):
        Consumer(SF + ":t", admin=bob)
    admin.edit_stream(SF, consumeperm="u:alice | g:sales")
    assert Consumer(SF + ":t", admin=bob).poll() == []


def test_bad_value_type(admin, sf):
    with pytest.raises(InvalidArgument, match="message value must be bytes or str"):
        Producer(admin).send(SF + ":t", 12)


def test_bad_topic_path(admin, sf):
    with pytest.raises(InvalidArgument, match="invalid topic name"):
        Producer(admin).send(SF + ":bad topic", "v")
    with pytest.raises(InvalidArgument, match="expected <stream path>:<topic>"):
        Producer(admin).send(SF, "v")


# --- messages --------------------------------------------------------------------------


@ON_BOTH
def test_headers_and_timestamps_preserved(admin):
    admin.create_stream(SF, ttl=0)
    ts_recent = now_ms() - 5000
    with Producer(admin) as p:
        p.send(
            SF + ":t", b"\x00bin", key="k", headers=[("origin", b"\x00\xff\x80"), ("h", "text")], timestamp=ts_recent
        )
        p.send(SF + ":t", "old", timestamp=123456)
    a, b = consume_all(admin, SF + ":t")
    assert a.value == b"\x00bin" and a.key == b"k"
    assert a.headers == (("origin", b"\x00\xff\x80"), ("h", b"text"))
    assert a.timestamp == ts_recent
    assert b.timestamp == 123456
    assert b.headers == () and b.key is None


def test_default_timestamp_is_now(admin, sf):
    before = now_ms()
    with Producer(admin) as p:
        p.send(SF + ":t", "v")
    (m,) = consume_all(admin, SF + ":t")
    assert before <= m.timestamp <= now_ms()


@ON_BOTH
def test_flush_returns_offsets_and_unflushed_is_invisible(admin):
    admin.create_stream(SF, defaultpartitions=2)
    p = Producer(admin)
    p.send(SF + ":t", "a", partition=0)
    p.send(SF + ":t", "b", partition=0)
    p.send(SF + ":t", "c", partition=1)
    assert consume_all(admin, SF + ":t") == []
    acked = p.flush()
    assert acked == {parse_topic_path(SF + ":t", None): {0: (0, 2), 1: (0, 1)}}
    assert p.flush() == {}
    assert len(consume_all(admin, SF + ":t")) == 3


def test_batch_size_flushes_by_itself(admin, sf):
    p = Producer(admin, batch_size=2)
    p.send(SF + ":t", "a")
    assert consume_all(admin, SF + ":t") == []
    p.send(SF + ":t", "b")
    assert len(consume_all(admin, SF + ":t")) == 2


def test_send_flush_true_acknowledges(admin, sf):
    Producer(admin).send(SF + ":t", "a", flush=True)
    assert [m.value for m in consume_all(admin, SF + ":t")] == [b"a"]


def test_context_manager_does_not_flush_on_error(admin, sf):
    admin.create_topic(SF, "t")
    with pytest.raises(RuntimeError), Producer(admin) as p:
        p.send(SF + ":t", "a")
        raise RuntimeError("stop")
    assert consume_all(admin, SF + ":t") == []


@ON_BOTH
def test_multiple_streams_in_one_producer(admin, sf):
    admin.create_stream(NY)
    with Producer(admin) as p:
        p.send(SF + ":t", "to-sf")
        p.send(NY + ":t", "to-ny")
        p.send("activity:u", "default-cluster")
        acked = p.flush()
    assert set(acked) == {parse_topic_path(t, None) for t in (SF + ":t", NY + ":t", SF + ":u")}
    assert [m.value for m in consume_all(admin, SF + ":t")] == [b"to-sf"]
    assert [m.value for m in consume_all(admin, NY + ":t")] == [b"to-ny"]
    assert [m.value for m in consume_all(admin, SF + ":u")] == [b"default-cluster"]


def test_multiple_streams_flush_reports_each(admin, sf):
    admin.create_stream(NY)
    p = Producer(admin)
    p.send(SF + ":t", "a")
    p.send(NY + ":t", "b")
    p.send(NY + ":t", "c")
    acked = p.flush()
    assert acked[parse_topic_path(SF + ":t", None)] == {0: (0, 1)}
    assert acked[parse_topic_path(NY + ":t", None)] == {0: (0, 2)}


# --- consumer ---------------------------------------------------------------------------


@ON_BOTH
def test_latest_by_default_from_start_on_request(admin, sf):
    with Producer(admin) as p:
        p.send(SF + ":t", "old1")
        p.send(SF + ":t", "old2")
    latest = Consumer(SF + ":t", admin=admin)
    assert latest.poll() == []
    with Producer(admin) as p:
        p.send(SF + ":t", "new")
    assert [m.value for m in latest.poll()] == [b"new"]
    assert [m.value for m in Consumer(SF + ":t", from_start=True, admin=admin).poll()] == [b"old1", b"old2", b"new"]


@ON_BOTH
def test_consumer_group_commit_and_resume(admin, sf):
    with Producer(admin) as p:
        for i in range(5):
            p.send(SF + ":t", str(i))
    first = Consumer(SF + ":t", group="g", from_start=True, admin=admin)
    assert [m.value for m in first.poll(max_messages=3)] == [b"0", b"1", b"2"]
    first.commit()
    assert [m.value for m in first.poll(max_messages=1)] == [b"3"]  # read, not committed
    # A new member resumes at the committed cursor, whatever from_start says.
    second = Consumer(SF + ":t", group="g", from_start=False, admin=admin)
    assert [m.value for m in second.poll()] == [b"3", b"4"]
    second.commit()
    assert Consumer(SF + ":t", group="g", admin=admin).poll() == []
    # Another group has its own cursors.
    assert len(Consumer(SF + ":t", group="other", from_start=True, admin=admin).poll()) == 5


def test_commit_needs_group(admin, sf):
    admin.create_topic(SF, "t")
    with pytest.raises(InvalidArgument, match="commit needs a consumer group"):
        Consumer(SF + ":t", admin=admin).commit()


@pytest.mark.parametrize("group", ["", "   "])
def test_empty_group_refused(admin, sf, group):
    admin.create_topic(SF, "t")
    with pytest.raises(InvalidArgument, match="consumer group name must not be empty"):
        Consumer(SF + ":t", group=group, admin=admin)


def test_consumer_unknown_topic(admin, sf):
    with pytest.raises(NotFound, match=f"topic {SF}:nope does not exist"):
        Consumer(SF + ":nope", admin=admin)


@ON_BOTH
def test_seek_and_lag(admin, sf):
    with Producer(admin) as p:
        for i in range(4):
            p.send(SF + ":t", str(i))
    c = Consumer(SF + ":t", admin=admin)
    assert c.lag() == {0: 0}
    c.seek(0, 1)
    assert c.lag() == {0: 3}
    assert [m.value for m in c.poll()] == [b"1", b"2", b"3"]
    with pytest.raises(InvalidArgument, match="has no partition 7"):
        c.seek(7, 0)


@ON_BOTH
def test_poll_serves_every_partition(admin):
    admin.create_stream(SF, defaultpartitions=2)
    with Producer(admin) as p:
        for i in range(20):
            p.send(SF + ":t", f"a{i}", partition=0)
            p.send(SF + ":t", f"b{i}", partition=1)
    c = Consumer(SF + ":t", from_start=True, admin=admin)
    seen = Counter()
    for _ in range(4):
        seen.update(m.partition for m in c.poll(max_messages=10))
    assert seen == {0: 20, 1: 20}


def test_poll_max_messages(admin, sf):
    with Producer(admin) as p:
        for i in range(7):
            p.send(SF + ":t", str(i))
    c = Consumer(SF + ":t", from_start=True, admin=admin)
    assert len(c.poll(max_messages=3)) == 3
    assert len(c.poll(max_messages=3)) == 3
    assert len(c.poll(max_messages=3)) == 1
    assert c.poll(max_messages=3) == []


def test_poll_timeout_returns_empty(admin, sf):
    admin.create_topic(SF, "t")
    c = Consumer(SF + ":t", admin=admin)
    start = time.monotonic()
    assert c.poll(timeout=0.2) == []
    assert time.monotonic() - start >= 0.2


def test_poll_without_timeout_returns_at_once(admin, sf, monkeypatch):
    admin.create_topic(SF, "t")
    c = Consumer(SF + ":t", admin=admin)
    sleeps = []
    monkeypatch.setattr(consumer_module.time, "sleep", sleeps.append)
    assert c.poll() == []
    assert sleeps == []


# --- ttl ------------------------------------------------------------------------------------


def _old_then_fresh(admin, old=3, fresh=2):
    """With ttl 0 (keep forever), produce ``old`` messages 2 hours old and ``fresh`` new ones,
    then set a 1-hour ttl."""
    admin.create_stream(SF, ttl=0)
    with Producer(admin) as p:
        for i in range(old):
            p.send(SF + ":t", f"old{i}", timestamp=now_ms() - 2 * HOUR_MS)
        for i in range(fresh):
            p.send(SF + ":t", f"fresh{i}")
    admin.edit_stream(SF, ttl=3600)


@ON_BOTH
def test_ttl_expired_messages_are_not_returned(admin):
    _old_then_fresh(admin)
    assert admin.topic_info(SF, "t")[0].first == 3  # retention runs before topic info reports
    got = Consumer(SF + ":t", from_start=True, admin=admin).poll()
    assert [m.value for m in got] == [b"fresh0", b"fresh1"]
    assert [m.offset for m in got] == [3, 4]


def test_ttl_expired_messages_skipped_even_when_a_poll_is_all_expired(admin):
    _old_then_fresh(admin, old=10, fresh=2)
    c = Consumer(SF + ":t", from_start=True, admin=admin)
    # The first messages read are all expired; poll must keep going to the fresh ones.
    assert [m.value for m in c.poll(max_messages=4)] == [b"fresh0", b"fresh1"]


@ON_BOTH
def test_ttl_purges_on_a_later_produce(admin):
    _old_then_fresh(admin)
    with Producer(admin) as p:
        p.send(SF + ":t", "later")
    (row,) = admin.topic_info(SF, "t")
    assert (row.first, row.last, row.messages) == (3, 5, 3)
    # Offsets are never reused: the next message still gets offset 6.
    with Producer(admin) as p:
        p.send(SF + ":t", "next", partition=0)
    assert consume_all(admin, SF + ":t")[-1].offset == 6


def test_ttl_zero_keeps_everything(admin):
    admin.create_stream(SF, ttl=0)
    with Producer(admin) as p:
        p.send(SF + ":t", "ancient", timestamp=1)
        p.send(SF + ":t", "now")
    assert [m.value for m in consume_all(admin, SF + ":t")] == [b"ancient", b"now"]
    assert admin.topic_info(SF, "t")[0].first == 0


@ON_BOTH
def test_ttl_messages_stored_old_are_purged(admin, sf):
    # A message produced already older than the ttl is never returned.
    store = admin.store(admin.path(SF))
    admin.create_topic(SF, "t")
    store.append(sf.uuid, "t", {0: [Message(b"stale", timestamp=now_ms() - 8 * 24 * HOUR_MS)]})
    assert consume_all(admin, SF + ":t") == []
    with Producer(admin) as p:
        p.send(SF + ":t", "fresh")
    assert store.offsets(sf.uuid, "t", 0) == (1, 2)
