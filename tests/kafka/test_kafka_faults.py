"""Exactly-once between two Kafka clusters under faults, with real processes: gateways and copystream
killed with SIGKILL at random moments, a gateway frozen inside its transaction while another takes
over (the zombie is fenced), a writer killed inside a transaction while another takes its partition
over, and a broker stopped and started again under a running gateway.

Every check reads the replica as a Kafka consumer does (read_committed, to the last stable offset)
and compares it with the source partition by partition: every source message once, in order, with
its key, headers and timestamp, and an origin header naming its source offset.

The random seed is printed (shown by pytest on failure); ``STREAMREP_TEST_SEED=<seed>`` replays the
same kill moments and batch sizes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

import streamrep.store.kafka.transactions as kafka_transactions
from integration.replication_helpers import (
    COPY_CHILD,
    GATEWAY_CHILD,
    Child,
    clean_env,
    json_rows,
    wait_progressing,
    wait_until,
)
from streamrep.client import StreamAdmin
from streamrep.errors import RetryNow, Unavailable
from streamrep.model.ace import Identity
from streamrep.model.message import Message
from streamrep.model.naming import naming_for
from streamrep.model.replication import position_key
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.store.kafka import KafkaStore
from streamrep.store.kafka.client import TRANSIENT

ALICE = Identity(user="alice", groups=frozenset({"eng"}))

pytestmark = pytest.mark.backends("kafka")

SEED = int(os.environ.get("STREAMREP_TEST_SEED", random.randrange(1 << 30)))
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
PARTITIONS = 4
BACKLOG = 200_000
STREAMREP_EXE = os.path.join(os.path.dirname(sys.executable), "streamrep")

# GATEWAY_CHILD, frozen (SIGSTOP to itself) the first time it is about to commit an apply transaction:
# its records are written but not committed, as in a long GC pause or a hung VM. Says FROZEN then;
# once continued, says whether its commit went through.
FREEZING_GATEWAY_CHILD = (
    textwrap.dedent("""
    import os, signal
    from confluent_kafka import Producer
    import streamrep.store.kafka.transactions as kafka_transactions

    class Freezing(Producer):
        frozen = False

        def __init__(self, config):
            super().__init__(config)
            self.applies = ".apply." in config.get("transactional.id", "")

        def commit_transaction(self, *args):
            if not self.applies or Freezing.frozen:
                return super().commit_transaction(*args)
            Freezing.frozen = True
            print("FROZEN", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            try:
                super().commit_transaction(*args)
            except Exception as exc:
                print("ZOMBIE COMMIT FAILED", exc, flush=True)
                raise
            print("ZOMBIE COMMITTED", flush=True)

    kafka_transactions.Producer = Freezing  # the transactional producers are made there
""")
    + GATEWAY_CHILD
)


# A store that dies inside an apply transaction on partition 1 of stream argv[3]: its records (a message
# and a mark) are written, never committed. Says FROZEN once they are in the log.
DEAD_WRITER_CHILD = textwrap.dedent("""
    import os, signal, sys
    from confluent_kafka import Producer
    import streamrep.store.kafka.transactions as kafka_transactions
    from streamrep.store.kafka import KafkaStore
    from streamrep.model.message import Message

    class Freezing(Producer):
        def commit_transaction(self, *args):
            print("FROZEN", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)

    kafka_transactions.Producer = Freezing
    store = KafkaStore("dead", sys.argv[1], {"streamrep.namespace": sys.argv[2]})
    print("READY", flush=True)
    store.apply(sys.argv[3], "t", 1, [Message(b"dead")], {"dead": 1}, {"dead": None})
""")


def kafka_topic(api: StreamAdmin, stream: str, topic: str) -> str:
    """The Kafka topic that holds ``topic`` of ``stream`` (the stream's naming policy)."""
    sp = api.path(stream)
    entry = api.entry(sp)
    return naming_for(entry.naming, entry.path, api.store(sp).namespace).kafka_topic(topic)


def bootstrap_of(api: StreamAdmin, stream: str) -> str:
    return api.store(api.path(stream)).bootstrap


def client_settings(api: StreamAdmin, stream: str) -> dict:
    """The librdkafka settings of the stream's cluster as registered: its url's servers and its own
    settings (SASL, TLS on a secured cluster), without streamrep's."""
    sp = api.path(stream)
    own = {k: v for k, v in api.clusters.get(sp.cluster).settings.items() if not k.startswith("streamrep.")}
    return {**own, "bootstrap.servers": bootstrap_of(api, stream)}


def numbered(i: int, partitions: int = PARTITIONS) -> dict:
    """Message ``i`` of a test's sequence, as ``Producer.produce`` arguments: value ``m-<i>``, partition
    ``i % partitions``, keys on odd ones, headers on partition 0's (so both of the apply's paths run),
    distinct timestamps."""
    partition = i % partitions
    return {
        "value": b"m-%d" % i,
        "key": b"k%d" % (i % 13) if i % 2 else None,
        "partition": partition,
        "headers": [("h", b"%d" % i)] if partition == 0 else None,
        "timestamp": 1_700_000_000_000 + i,
    }


def produce_backlog(api: StreamAdmin, stream: str, count: int, partitions: int = PARTITIONS, start: int = 0) -> None:
    """``count`` messages (:func:`numbered`, from ``start`` on) straight into the source's Kafka topic
    with a plain idempotent producer."""
    producer = Producer(
        {**client_settings(api, stream), "enable.idempotence": True, "linger.ms": 20, "batch.size": 1 << 20}
    )
    name = kafka_topic(api, stream, "t")
    for i in range(start, start + count):
        while True:
            try:
                producer.produce(name, **numbered(i, partitions))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def stable_watermarks(consumer: Consumer, partition: TopicPartition, bound: float = 120) -> tuple[int, int]:
    """The partition's watermarks, asked again while its leadership settles (a broker just restarted:
    the client's metadata can still name the old leader, which answers NOT_LEADER_FOR_PARTITION)."""
    deadline = time.monotonic() + bound
    while True:
        try:
            return consumer.get_watermark_offsets(partition, timeout=30, cached=False)
        except KafkaException as exc:
            if exc.args[0].code() not in TRANSIENT or time.monotonic() > deadline:
                raise
            time.sleep(1)


def committed(
    api: StreamAdmin, stream: str, isolation: str = "read_committed", partitions: int = PARTITIONS
) -> dict[int, list]:
    """Every record of each partition of the stream's topic ``t``, as a plain Kafka consumer reads it
    (``read_committed``: to the last stable offset; ``read_uncommitted``: aborted records too)."""
    name = kafka_topic(api, stream, "t")
    consumer = Consumer(
        {
            **client_settings(api, stream),
            "group.id": f"check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "error",
        }
    )
    try:
        bounds = {p: stable_watermarks(consumer, TopicPartition(name, p)) for p in range(partitions)}
        held: dict[int, list] = {p: [] for p in range(partitions)}
        consumer.assign(
            [TopicPartition(name, p, low) for p, (low, _) in bounds.items()]
        )  # all at once: fetched together
        left = {p for p, (low, high) in bounds.items() if low < high}
        while left:
            for msg in consumer.consume(10000, timeout=0.1):  # short: the last records may be all aborted
                if msg.error() is not None and msg.error().retriable():
                    continue  # a connection to a just-restarted broker; the client asks again
                assert msg.error() is None, f"{name} [{msg.partition()}]: {msg.error()}"
                held[msg.partition()].append(msg)
            for p in list(left):  # the position passes transaction markers too
                if consumer.position([TopicPartition(name, p)])[0].offset >= bounds[p][1]:
                    left.discard(p)
        return held
    finally:
        consumer.close()


def assert_exact_replica(
    api: StreamAdmin, source: str, replica: str, expected: int, partitions: int = PARTITIONS
) -> None:
    """The replica holds each source message once, in source order per partition, as sent."""
    source_uuid = api.entry(source).uuid
    src = committed(api, source, partitions=partitions)
    dst = committed(api, replica, partitions=partitions)
    assert sum(len(r) for r in src.values()) == expected
    for partition, records in src.items():
        sent = [(m.value(), m.key(), m.headers() or [], m.timestamp()[1]) for m in records]
        got = [
            (m.value(), m.key(), [h for h in m.headers() or [] if h[0] != ORIGIN_HEADER], m.timestamp()[1])
            for m in dst[partition]
        ]
        origins = [dict(m.headers())[ORIGIN_HEADER].decode() for m in dst[partition]]
        assert len(got) == len(sent), (
            f"partition {partition}: {len(got)} replicated of {len(sent)} (STREAMREP_TEST_SEED={SEED})"
        )
        assert origins == [f"{source_uuid}/{partition}/{m.offset()}" for m in records], (
            f"partition {partition}: a message lost, duplicated or out of order (STREAMREP_TEST_SEED={SEED})"
        )
        assert got == sent, f"partition {partition}: a message changed (STREAMREP_TEST_SEED={SEED})"


def applied(api: StreamAdmin, partitions: int = PARTITIONS) -> int:
    """Source messages the replica's stored positions say were applied (they commit with the messages)."""
    source_uuid = api.entry(SF).uuid
    marks = api.store(api.path(NY)).marks(api.entry(NY).uuid)
    return sum(marks.get(position_key(source_uuid, "t", p), 0) for p in range(partitions))


def replicate(api: StreamAdmin, backlog: int, partitions: int = PARTITIONS) -> StreamAdmin:
    """SF (``partitions`` partitions, ``backlog`` messages) replicating to NY, agreed on both sides."""
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", partitions)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    produce_backlog(api, SF, backlog, partitions)
    return api


def cli(env: dict[str, str], *argv: str) -> dict:
    result = subprocess.run(
        [STREAMREP_EXE, *argv, "-engine", "local", "-json"], capture_output=True, text=True, env=env, timeout=300
    )
    [row] = json_rows((result.returncode, result.stdout, result.stderr))
    return row


def test_stream_topics_keep_old_messages(api):
    """A stream's ttl is streamrep's (0: forever). Kafka's default time retention (7 days by message
    timestamp) must not drop what a replica or a copy writes: replicated messages keep their source
    timestamps, so a backlog older than a week would vanish from the replica."""
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", 1)
    name = kafka_topic(api, SF, "t")
    resource = ConfigResource("topic", name)
    kafka_admin = AdminClient({"bootstrap.servers": bootstrap_of(api, SF)})
    configs = kafka_admin.describe_configs([resource])[resource].result()
    assert configs["retention.ms"].value == "-1"
    assert configs["retention.bytes"].value == "-1"


@pytest.mark.slow
def test_a_new_writer_sees_the_last_commit_behind_a_dead_transaction(api, child_env):
    """A writer killed inside a transaction holds the marks' last stable offset back until Kafka aborts
    it. A gateway that takes a partition over in that time must still see the last commit of the
    writer it fenced (its mark moved: RetryNow), or it would apply the same batch again."""
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", 2)
    store = api.store(api.path(SF))
    stream = api.entry(SF).uuid
    settings = {"streamrep.namespace": store.namespace}
    first, second = KafkaStore("first", store.bootstrap, settings), KafkaStore("second", store.bootstrap, settings)
    try:
        first.apply(stream, "t", 0, [], {"ready": 1}, {"ready": None})  # holds partition 0's transactional id
        dead = Child(DEAD_WRITER_CHILD, [store.bootstrap, store.namespace, stream], child_env)
        try:
            dead.wait_ready()
            wait_until(lambda: "FROZEN" in dead.lines, 60, "the dead writer's transaction to open")
        finally:
            dead.kill9()
        marks_topic = f"_streamrep.{store.namespace}.marks"
        probe = Consumer(
            {
                "bootstrap.servers": store.bootstrap,
                "group.id": f"probe-{uuid.uuid4().hex}",
                "isolation.level": "read_uncommitted",
            }
        )  # its high mark is the high watermark
        written = probe.get_watermark_offsets(TopicPartition(marks_topic, 0), timeout=30, cached=False)[1]
        outcome: dict[str, object] = {}

        def apply_first() -> None:  # commits, then waits for its write to be readable
            try:
                outcome["first"] = first.apply(stream, "t", 0, [Message(b"once")], {"pos": 1}, {"pos": None})
            except Exception as exc:  # noqa: BLE001 - asserted below
                outcome["first"] = exc

        thread = threading.Thread(target=apply_first)
        thread.start()
        # its mark and commit marker are in the log, behind the dead writer's open transaction
        wait_until(
            lambda: (
                probe.get_watermark_offsets(TopicPartition(marks_topic, 0), timeout=30, cached=False)[1] >= written + 2
            ),
            60,
            "the first commit",
        )
        probe.close()
        with pytest.raises(RetryNow, match="moved"):
            second.apply(stream, "t", 0, [Message(b"once")], {"pos": 1}, {"pos": None})
        thread.join(timeout=120)
        assert isinstance(outcome["first"], int), outcome
    finally:
        first.close()
        second.close()
    assert [m.value() for m in committed(api, SF, partitions=1)[0]] == [b"once"]


@pytest.mark.slow
def test_a_commit_not_yet_readable_is_never_built_upon(api, child_env, monkeypatch):
    """Kafka writes a transaction's commit markers after the commit returns (after a broker restart,
    once the coordinator has reloaded it); until then the last stable offset stops before the commit.
    Here a writer killed inside a transaction holds it there. An apply whose commit does not become
    readable in time fails, and the retry of the same batch by the same store must not plan against
    the marks from before its own commit: it waits for them, sees its mark moved, and writes nothing."""
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", 2)
    store = api.store(api.path(SF))
    stream = api.entry(SF).uuid
    writer = KafkaStore("writer", store.bootstrap, {"streamrep.namespace": store.namespace})
    try:
        writer.apply(stream, "t", 0, [Message(b"first")], {"pos": 1}, {"pos": None})
        dead = Child(DEAD_WRITER_CHILD, [store.bootstrap, store.namespace, stream], child_env)
        try:
            dead.wait_ready()
            wait_until(lambda: "FROZEN" in dead.lines, 60, "the dead writer's transaction to open")
        finally:
            dead.kill9()
        monkeypatch.setattr(kafka_transactions, "VISIBLE_WITHIN_SECONDS", 1.0)
        with pytest.raises(Unavailable, match="did not become readable"):
            writer.apply(stream, "t", 0, [Message(b"once")], {"pos": 2}, {"pos": 1})
        monkeypatch.setattr(kafka_transactions, "VISIBLE_WITHIN_SECONDS", 60.0)  # outlasts the dead transaction
        with pytest.raises(RetryNow, match="moved"):
            writer.apply(stream, "t", 0, [Message(b"once")], {"pos": 2}, {"pos": 1})
        assert writer.marks(stream)["pos"] == 2
    finally:
        writer.close()
    assert [m.value() for m in committed(api, SF, partitions=1)[0]] == [b"first", b"once"]


@pytest.mark.slow
def test_gateway_killed_at_random_moments_then_restarted(api, child_env):
    gateway_killed_then_restarted(api, child_env, BACKLOG)


def gateway_killed_then_restarted(api: StreamAdmin, child_env: dict[str, str], backlog: int) -> None:
    """SF's ``backlog`` replicated to NY by gateway processes killed with SIGKILL at random moments (the
    first in the middle of the backlog), then finished by the real CLI: every message once, in order.
    Also run on each Kafka release by ``test_kafka_releases.py``."""
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED)
    replicate(api, backlog)
    transactions = api.store(api.path(NY))._transactions
    first = None
    for kill in range(rng.randint(3, 5)):
        child = Child(GATEWAY_CHILD, ["newyork", "g1", rng.choice([500, 2000, 5000]), 10], child_env)
        try:
            child.wait_ready()
            if kill == 0:  # the first kill lands in the middle of the backlog
                before = applied(api)
                wait_until(lambda: applied(api) > before, 60, "the gateway to apply something")
            time.sleep(rng.uniform(0.05, 1.0))
        finally:
            child.kill9()
        if kill == 0:
            # Read only once the killed transactions are decided: a read_committed reader of the marks
            # cannot pass an aborted batch above a still-open one until that one is aborted too
            # (docs/platform.md, "Kafka releases"), and the next gateway fences them at its start.
            transactions.await_decided("marks")
            first = applied(api)
    assert first is not None and 0 < first < backlog, (
        f"the first kill did not interrupt the backlog: {first} (seed {SEED})"
    )

    # The killed gateway's last round may have left transactions open (their marks interleave with
    # the committed ones' in the marks topic, so the last stable offset stops before those too) until
    # Kafka aborts them: count what is applied once every transaction is decided, as a new writer does.
    transactions.await_decided("marks")
    # the real CLI finishes the job, under the same gateway id
    already = applied(api)
    ran = cli(child_env, "gateway", "run", "-cluster", "newyork", "-id", "g1", "-once", "true")
    assert ran["messages"] == backlog - already
    assert applied(api) == backlog
    assert_exact_replica(api, SF, NY, backlog)


@pytest.mark.slow
@pytest.mark.parametrize("zombie", ["killed", "resumed"])
def test_frozen_gateway_is_taken_over_and_fenced(api, child_env, zombie):
    """g1 freezes inside an apply transaction; g2 takes its share once g1's heartbeat expires. The
    frozen transaction never becomes readable: killed, it is aborted; resumed, its commit fails."""
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 1)
    backlog = 50_000
    replicate(api, backlog)
    api.set_gateways("newyork", "g1 g2", cluster="sanfrancisco")
    expiry = 1.0
    g1 = Child(FREEZING_GATEWAY_CHILD, ["newyork", "g1", rng.choice([500, 2000]), expiry], child_env)
    g2 = None
    try:
        g1.wait_ready()
        wait_until(lambda: "FROZEN" in g1.lines, 60, "g1 to freeze inside a transaction")
        g2 = Child(GATEWAY_CHILD, ["newyork", "g2", rng.choice([500, 2000]), expiry], child_env)
        g2.wait_ready()
        if zombie == "killed":
            g1.kill9()
        wait_progressing(lambda: applied(api), backlog, 120, "g2 to take over and replicate everything")
        if zombie == "resumed":
            g1.signal(signal.SIGCONT)
            wait_until(lambda: any(line.startswith("ZOMBIE") for line in g1.lines), 60, "the zombie's commit")
            [outcome] = [line for line in g1.lines if line.startswith("ZOMBIE")]
            assert outcome.startswith("ZOMBIE COMMIT FAILED") and "fenced" in outcome.lower(), outcome
            time.sleep(0.5)  # both run on: neither may write anything more
    finally:
        g1.kill9()
        if g2 is not None:
            g2.kill9()
    assert applied(api) == backlog
    assert_exact_replica(api, SF, NY, backlog)
    # the frozen transaction's records are in the log, and were never committed
    everything = committed(api, NY, "read_uncommitted")
    assert sum(len(r) for r in everything.values()) > backlog


@pytest.mark.slow
def test_copystream_killed_then_rerun(api, child_env):
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 2)
    replicate(api, BACKLOG)
    api.pause_replica(SF, NY)  # the manual steps: registered paused, copied, then resumed
    held = []
    for _ in range(rng.randint(2, 3)):
        before = applied(api)
        child = Child(COPY_CHILD, [SF, NY, rng.choice([2000, 5000, 10000])], child_env)
        try:
            child.wait_ready()
            wait_until(lambda: applied(api) > before or child.proc.poll() is not None, 60, "the copy to progress")
            time.sleep(rng.uniform(0, 0.3))
        finally:
            code = child.kill9()
        if code == 0:
            break  # it finished first: nothing left to interrupt
        held.append(applied(api))
    assert held and 0 < held[0] < BACKLOG, f"no kill interrupted the copy: {held} (seed {SEED})"

    already = applied(api)
    copied = cli(child_env, "copystream", "-src", SF, "-dst", NY)
    assert copied["messages"] == BACKLOG - already
    assert_exact_replica(api, SF, NY, BACKLOG)


@pytest.mark.slow
@pytest.mark.kafka  # on a broker of its own: no backend parameter to mark it
def test_broker_restarted_under_a_running_gateway(on_own_broker, own_broker, empty_home):
    """The broker stops (a clean SIGTERM or a SIGKILL, by the seed) and starts again on the same data
    while a gateway runs: the gateway waits and retries, and the replica ends exact."""
    api = on_own_broker
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 3)
    stop = rng.choice(["SIGTERM", "SIGKILL"])
    print(f"broker stopped by {stop}")
    backlog = 100_000
    replicate(api, backlog)
    env = clean_env(empty_home.home)
    gateway = Child(GATEWAY_CHILD, ["newyork", "g1", rng.choice([500, 2000]), 60], env)
    try:
        gateway.wait_ready()
        wait_until(lambda: applied(api) > 0, 60, "the gateway to apply something")
        time.sleep(rng.uniform(0, 0.5))
        assert applied(api) < backlog, f"the gateway finished before the broker stopped (seed {SEED})"
        api.clusters.close()  # this process's clients would only retry meanwhile
        pid = kafka_local.running_pid(own_broker)
        os.kill(pid, getattr(signal, stop))
        wait_until(lambda: kafka_local.running_pid(own_broker) is None, 60, "the broker to stop")
        time.sleep(rng.uniform(0.5, 3))  # the gateway runs on against a cluster that is down
        assert gateway.proc.poll() is None, f"the gateway died with the broker: {gateway.stderr()}"
        kafka_local.start(own_broker, die_with_parent=True)
        try:
            wait_progressing(lambda: applied(api), backlog, 180, "the gateway to replicate everything")
        except AssertionError as stalled:  # say what the gateway was doing (a rehearsal's stall said nothing)
            raise AssertionError(f"{stalled}; the gateway: {gateway.where()}") from None
        assert gateway.proc.poll() is None, f"the gateway exited: {gateway.stderr()}"
    finally:
        gateway.kill9()
    assert_exact_replica(api, SF, NY, backlog)
