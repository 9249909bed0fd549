"""Exactly-once between two secured three-broker Kafka clusters under broker faults, with real processes.

``sanfrancisco`` replicates to ``newyork`` (the ``secure_kafka`` clusters: KRaft, RF 3, min ISR 2,
SASL_SSL as the ``admin`` super user) through a running gateway of either engine: the in-process
gateway (a child process) or the Spark gateway (``spark-submit``, local mode). A writer keeps
producing numbered messages (idempotent, acks=all; only acknowledged ones count as sent) while,
under the running gateway:

1. the leader of a replicated partition (of the source topic, or of the replica topic) is killed
   with SIGKILL, fenced by the quorum, and started again;
2. the broker that coordinates the gateway's apply transactions is killed with SIGKILL and started
   again;
3. the destination's three brokers, then the source's, are restarted one at a time (SIGTERM, start,
   back in every ISR before the next);
4. the destination broker coordinating the apply transactions is frozen with SIGSTOP for longer than
   the brokers' session timeout (the quorum fences it), then continued.

CI runs one engine per fault (``FULL_MATRIX_ONLY`` marks the rest): the in-process gateway meets the
source-side leader kill and the rolling restart (of the destination only: both clusters in the full
matrix), the Spark gateway the replica-side leader kill, the coordinator kill and the pause.
``STREAMREP_FULL_MATRIX=1`` runs both engines through every fault (each passed, 0 lost and 0
duplicated, before the split; it took CI 36 of its 90 minutes). Proven each time: the gateway rides
the fault out, and at the end the replica holds every numbered message once, in order per
partition, as sent (counted: 0 lost, 0 duplicated), with its source offset in its origin header (``assert_exact_replica``). Every test leaves both clusters as it found
them: three brokers running, every partition's ISR back to 3 (the fixture fails loudly otherwise).

Each test prints one ``FAULT`` line (case, engine, messages, lost, duplicated, seconds): run with
``-s`` to see the table.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka_local import SecureCluster
from test_kafka_faults import (
    NY,
    PARTITIONS,
    SF,
    applied,
    assert_exact_replica,
    client_settings,
    committed,
    kafka_topic,
    numbered,
    replicate,
)

from integration.replication_helpers import GATEWAY_CHILD, Child, clean_env, wait_progressing, wait_until
from matrix import full_matrix_only
from streamrep.client import StreamAdmin
from streamrep.errors import StreamrepError
from streamrep.model.ace import Identity
from streamrep.store.kafka import keys

pytestmark = [pytest.mark.kafka, pytest.mark.secure_kafka, pytest.mark.slow]

BACKLOG = 10_000  # before the gateway starts; the writer adds about as many again during a test
WRITE_BATCH, WRITE_PAUSE = 20, 0.1  # the writer's pace: up to ~200 messages/s
HEAL_S = 300  # a restarted broker is back in every ISR within this (over 180 s at load average 40)
DRAIN_S = 240  # the gateway catches up with everything sent after the last fault
# Longer than the brokers' broker.session.timeout.ms (KRaft default 9 s: the controller fences the
# broker and shrinks it out of every ISR) and than the apply transactions' timeout (10 s,
# TRANSACTION_TIMEOUT_MS), so in-flight transactions it coordinates time out meanwhile.
PAUSE_S = 20
ADMIN = Identity(user="admin")  # a secured cluster's caller is the principal its settings authenticate


# ---------------------------------------------------------------- cluster health


@functools.cache  # one client per cluster: each new one authenticates again
def admin_of(cluster: SecureCluster) -> AdminClient:
    return AdminClient({**cluster.settings("admin"), "log_level": 0})


def unhealthy(cluster: SecureCluster) -> str | None:
    """Why ``cluster`` is not at full health (three brokers, every partition led with an ISR of 3), or ``None``."""
    try:
        metadata = admin_of(cluster).list_topics(timeout=10)
    except KafkaException as exc:
        return f"no metadata: {exc}"
    if len(metadata.brokers) != len(cluster.brokers):
        return f"brokers {sorted(metadata.brokers)}"
    short = [
        f"{t.topic}[{p.id}] isr {p.isrs}"
        for t in metadata.topics.values()
        if not t.error
        for p in t.partitions.values()
        if p.leader < 0 or len(p.isrs) != len(cluster.brokers)
    ]
    return f"{len(short)} partitions short, e.g. {short[:3]}" if short else None


def await_healthy(cluster: SecureCluster, timeout: float = HEAL_S) -> None:
    deadline = time.monotonic() + timeout
    while (why := unhealthy(cluster)) is not None:
        assert time.monotonic() < deadline, f"kafka {cluster.name} not back to full health in {timeout} s: {why}"
        time.sleep(0.5)


def restore(cluster: SecureCluster) -> None:
    """Every broker running (a frozen one continued, a stopped one started) and every ISR back to 3."""
    for broker in cluster.brokers:
        pid = kafka_local.running_pid(broker)
        if pid is not None:
            os.kill(pid, signal.SIGCONT)  # harmless unless a test left it stopped
        else:
            kafka_local.start(broker, die_with_parent=True)
    await_healthy(cluster)


def broker_of(cluster: SecureCluster, node_id: int) -> kafka_local.Broker:
    [broker] = [b for b in cluster.brokers if b.node_id == node_id]
    return broker


def await_fenced(cluster: SecureCluster, broker: kafka_local.Broker) -> None:
    """Wait until the quorum has fenced ``broker`` (it is gone from the metadata's brokers)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            if broker.node_id not in admin_of(cluster).list_topics(timeout=5).brokers:
                return
        except KafkaException:
            pass
        assert time.monotonic() < deadline, f"{broker.name} not fenced within 60 s"
        time.sleep(0.25)


def kill9(broker: kafka_local.Broker) -> None:
    os.kill(kafka_local.running_pid(broker), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while kafka_local.running_pid(broker) is not None:
        assert time.monotonic() < deadline, f"{broker.name} survived SIGKILL"
        time.sleep(0.05)


def leader_of(cluster: SecureCluster, topic: str, partition: int = 0) -> int:
    return admin_of(cluster).list_topics(topic, timeout=30).topics[topic].partitions[partition].leader


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, as a signed 32-bit int)."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_by_hash(cluster: SecureCluster, txid: str) -> int:
    """The broker coordinating transactional id ``txid``: the leader of partition
    ``Utils.abs(txid.hashCode()) % partitions`` of ``__transaction_state``, as Kafka's
    ``TransactionStateManager.partitionFor`` places it (the client API has no FindCoordinator)."""
    state = admin_of(cluster).list_topics("__transaction_state", timeout=30).topics["__transaction_state"].partitions
    h = java_hash(txid)
    return state[0 if h == -(1 << 31) else abs(h) % len(state)].leader


def coordinator_asked(cluster: SecureCluster, txid: str) -> int:
    """The broker Kafka names as ``txid``'s coordinator (FindCoordinator), from librdkafka's debug log
    of a producer of that id (``... -> <host>:<port>/<node id>``); initialising it fences that id."""
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"coordinator-probe-{txid}")
    logger.addHandler(Lines())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    producer = Producer({**cluster.settings("admin"), "transactional.id": txid, "debug": "eos", "logger": logger})
    producer.init_transactions(30)
    producer.poll(0)  # serves the log lines
    changes = [found for line in lines if (found := re.search(r"coordinator changed from .* -> \S+/(\d+)", line))]
    assert changes, f"no coordinator in librdkafka's log of {txid}: {lines[-5:]}"
    return int(changes[-1].group(1))


def apply_txids(api: StreamAdmin) -> list[str]:
    """The replica's apply transactional ids (one per partition, as ``KafkaStore.apply`` names them)."""
    store = api.store(api.path(NY))
    replica = api.entry(NY).uuid
    return [keys.partition_txid(store.internal_prefix, replica, "t", partition) for partition in range(PARTITIONS)]


def coordinators(txids: list[str], cluster: SecureCluster) -> Counter:
    """How many of ``txids`` each broker of ``cluster`` coordinates (:func:`coordinator_by_hash`:
    asking Kafka with a producer of the id would fence the gateway)."""
    return Counter(coordinator_by_hash(cluster, txid) for txid in txids)


def busiest_coordinator(txids: list[str], cluster: SecureCluster) -> kafka_local.Broker:
    """The broker of ``cluster`` coordinating the most of ``txids``."""
    [(node, _)] = coordinators(txids, cluster).most_common(1)
    return broker_of(cluster, node)


# ---------------------------------------------------------------- the two engines


class LocalGateway:
    """The in-process gateway (``Gateway.run_once`` in a loop) in a child process."""

    def __init__(self, env: dict[str, str], tmp_path: Path):
        self.child = Child(GATEWAY_CHILD, ["newyork", "g1", 500, 60], env)
        self.child.wait_ready()

    def running(self) -> bool:
        return self.child.proc.poll() is None

    def output(self) -> str:
        return self.child.stderr()

    def stacks(self) -> str:
        """Where the gateway is now: its Python stack (faulthandler, on SIGUSR1)."""
        if self.running():
            self.child.signal(signal.SIGUSR1)
            time.sleep(1)
        return self.child.stderr()

    def stop(self) -> None:
        self.child.kill9()


class SparkGateway:
    """The Spark gateway app through spark-submit (local mode), tethered to this process."""

    def __init__(self, env: dict[str, str], tmp_path: Path):
        from streamrep.spark.submit import start_app

        self.log = tmp_path / "spark-gateway.log"
        args = [
            "--cluster",
            "newyork",
            "--id",
            "g1",
            "--home",
            env["STREAMREP_HOME"],
            "--max-records",
            "2000",
            "--interval",
            "0.2",
        ]
        with open(self.log, "wb") as sink:
            self.proc = start_app("gateway", args, env=env, stdout=sink, stderr=sink)

    def running(self) -> bool:
        return self.proc.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        from streamrep.spark.lifetime import stop_job

        stop_job(self.proc, grace=5)


GATEWAYS = {"local": LocalGateway, "spark": SparkGateway}


# ---------------------------------------------------------------- the writer


class Writer(threading.Thread):
    """Numbered messages (:func:`numbered`, from ``start``) into the source topic until stopped, with an
    idempotent acks=all producer: retried through leader changes, in order per partition. Only
    acknowledged messages count; a message that failed for good fails the test."""

    def __init__(self, api: StreamAdmin, start: int):
        super().__init__(daemon=True)
        self.settings = {
            **client_settings(api, SF),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "message.timeout.ms": 300_000,
            "log_level": 0,
        }
        self.topic = kafka_topic(api, SF, "t")
        self.next = start
        self.acked = 0
        self.failed: list = []
        self.unsent: int | None = None  # set once it has flushed: a writer that crashed never does
        self.halt = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked += 1
        else:
            self.failed.append(err)

    def run(self) -> None:
        producer = Producer(self.settings)
        while not self.halt.is_set():
            for _ in range(WRITE_BATCH):
                producer.produce(self.topic, on_delivery=self._delivered, **numbered(self.next))
                self.next += 1
            producer.poll(0)
            time.sleep(WRITE_PAUSE)
        self.unsent = producer.flush(300)

    def stop(self) -> int:
        """Stop writing; the messages sent (all acknowledged) so far, this writer's."""
        self.halt.set()
        self.join(timeout=330)
        assert not self.is_alive() and self.unsent == 0 and not self.failed, (self.unsent, self.failed[:3])
        return self.acked


# ---------------------------------------------------------------- fixtures and the run


@pytest.fixture
def secure_api(secure_kafka, empty_home) -> StreamAdmin:
    """``sanfrancisco`` and ``newyork`` registered on the secured clusters as ``admin``, in a namespace of
    this test's own; both clusters at full health before, and restored to it after (or the test fails)."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    for name, cluster in secure_kafka.items():
        settings = {k: v for k, v in cluster.settings("admin").items() if k != "bootstrap.servers"}
        empty_home.add(
            name, url=f"kafka://{cluster.bootstrap}", settings={**settings, "streamrep.namespace": namespace}
        )
    try:
        for cluster in secure_kafka.values():
            await_healthy(cluster)
        yield StreamAdmin(empty_home, ADMIN)
    finally:
        for cluster in secure_kafka.values():
            restore(cluster)


def open_ends(api: StreamAdmin) -> list[tuple[str, int, int, int] | str]:
    """The destination's partitions whose last stable offset is below the high watermark (an open
    transaction holds them): ``(Kafka topic, partition, LSO, high watermark)``."""
    store = api.store(api.path(NY))
    named = [(name, 0) for name in store._topics.values()]
    named += [(kafka_topic(api, NY, "t"), p) for p in range(PARTITIONS)]
    ends: list[tuple[str, int, int, int] | str] = []
    for n, p in named:  # each on its own: a replica topic not made yet does not hide the internal ones
        try:
            ends.append((n, p, store._watermarks(n, p, n)[1], store._watermarks(n, p, n, uncommitted=True)[1]))
        except StreamrepError as err:
            ends.append(f"{n}[{p}] unreadable: {err}")
    return [end for end in ends if isinstance(end, str) or end[2] < end[3]]


def wait_applied(api: StreamAdmin, gateway, at_least: int, stall: float, what: str) -> None:
    """Wait until ``at_least`` messages are applied; fail if the gateway exits, or applies nothing
    more for ``stall`` seconds (a loaded machine is slow, not stuck). A stall names this process's
    last failed read of the marks (-1 while the destination cannot answer) and the gateway's log."""
    last_error: list[str] = []

    def progress() -> int:
        assert gateway.running(), f"the gateway exited: {gateway.output()}"
        try:
            return applied(api)
        except StreamrepError as err:
            last_error[:] = [str(err)]
            return -1

    try:
        wait_progressing(progress, at_least, stall, what)
    except AssertionError as stalled:
        try:
            links = [(row.state.name, row.errors) for row in api.list_replicas(SF)]
        except StreamrepError as err:
            links = [f"unreadable: {err}"]
        where = gateway.stacks() if hasattr(gateway, "stacks") else gateway.output()
        links.append(f"held back by open transactions: {open_ends(api)}")
        raise AssertionError(
            f"{stalled}; last read error: {last_error}; replica links: {links}; gateway: {where}"
        ) from None


def count_faults(api: StreamAdmin, total: int) -> tuple[int, int]:
    """``(lost, duplicated)`` of the replica by message number, after checking that the source holds
    exactly messages ``0..total-1``, each in its partition, in order."""
    for partition, records in committed(api, SF).items():
        assert [m.value() for m in records] == [b"m-%d" % i for i in range(partition, total, PARTITIONS)], (
            f"source partition {partition} is not the numbered sequence"
        )
    held = Counter(int(m.value()[2:]) for records in committed(api, NY).values() for m in records)
    return total - len(held.keys() & set(range(total))), sum(held.values()) - len(held.keys() & set(range(total)))


class Run:
    """A test's replication: the backlog, the writer and the gateway of ``engine``, run around the fault."""

    def __init__(self, api: StreamAdmin, engine: str, tmp_path: Path):
        self.api, self.engine, self.began = api, engine, time.monotonic()
        replicate(api, BACKLOG)
        self.writer = Writer(api, BACKLOG)
        self.writer.start()
        self.gateway = None
        try:
            self.gateway = GATEWAYS[engine](clean_env(api.clusters.home, ADMIN.user), tmp_path)
            # The fault comes once the gateway is applying, mid-stream (the writer goes on).
            wait_applied(self.api, self.gateway, 1, 240, "the gateway to apply something")
        except BaseException:
            self.abandon()
            raise

    def finish(self, case: str) -> None:
        """Stop the writer once the gateway has run on after the fault, wait for the replica to catch up,
        stop the gateway and count."""
        try:
            assert self.gateway.running(), f"the gateway exited: {self.gateway.output()}"
            time.sleep(2)  # the gateway works on after the fault while messages keep coming
            total = BACKLOG + self.writer.stop()
            wait_applied(self.api, self.gateway, total, DRAIN_S, f"all {total} messages replicated")
        finally:
            self.writer.halt.set()
            self.gateway.stop()
        assert applied(self.api) == total
        lost, duplicated = count_faults(self.api, total)
        print(
            f"\nFAULT {case} | {self.engine} | {total} messages | {lost} lost | {duplicated} duplicated | "
            f"{time.monotonic() - self.began:.0f} s"
        )
        assert (lost, duplicated) == (0, 0)
        assert_exact_replica(self.api, SF, NY, total)

    def abandon(self) -> None:
        self.writer.halt.set()
        if self.gateway is not None:
            self.gateway.stop()


@pytest.fixture
def run(secure_api, tmp_path):
    runs = []

    def start(engine: str) -> Run:
        """The replication of ``engine``, under way."""
        runs.append(Run(secure_api, engine, tmp_path))
        return runs[-1]

    yield start
    for started in runs:  # a test that failed before finish(): nothing outlives it
        started.abandon()


# ---------------------------------------------------------------- the faults


# Spark on the replica side: where a killed leader ended the Spark gateway (its tasks' Unavailable came
# back wrapped by Spark). The Spark source side passed too; it is left out (each Spark case costs a spark-submit).
@pytest.mark.parametrize(
    "side,engine", [("source", "local"), full_matrix_only("replica", "local"), ("replica", "spark")]
)
def test_partition_leader_killed_under_a_running_gateway(run, secure_kafka, engine, side):
    replication = run(engine)
    api = replication.api
    cluster = secure_kafka["sanfrancisco" if side == "source" else "newyork"]
    topic = kafka_topic(api, SF if side == "source" else NY, "t")
    leader = broker_of(cluster, leader_of(cluster, topic))
    kill9(leader)
    await_fenced(cluster, leader)  # a new leader serves the partition while the gateway runs on
    assert leader_of(cluster, topic) not in (leader.node_id, -1)
    kafka_local.start(leader, die_with_parent=True)
    await_healthy(cluster)
    replication.finish(f"leader of {side} partition killed")


@pytest.mark.parametrize("engine", [full_matrix_only("local"), "spark"])
def test_transaction_coordinator_killed_under_a_running_gateway(run, secure_kafka, engine):
    replication = run(engine)
    api = replication.api
    ny = secure_kafka["newyork"]
    # The placement by hash is Kafka's own: checked against FindCoordinator on ids of the same form.
    for probe in range(3):
        txid = f"{api.store(api.path(NY)).internal_prefix}apply.probe{probe}-{uuid.uuid4().hex[:8]}"
        assert coordinator_asked(ny, txid) == coordinator_by_hash(ny, txid), txid
    txids = apply_txids(api)  # read while every broker is up: this process's own clients meet the kill too
    coordinator = busiest_coordinator(txids, ny)
    kill9(coordinator)
    await_fenced(ny, coordinator)

    # the surviving brokers take its transactions over (metadata may lag the kill for a moment)
    def moved() -> bool:
        try:
            return coordinator.node_id not in coordinators(txids, ny)
        except KafkaException:  # this process's metadata request met the dead broker: ask again
            return False

    wait_until(moved, 60, "the coordinators to move")
    kafka_local.start(coordinator, die_with_parent=True)
    await_healthy(ny)
    replication.finish("transaction coordinator killed")


# CI rolls the destination (the apply transactions' brokers, the case that needs the most care); the
# source's roll (under the writer) only with STREAMREP_FULL_MATRIX: the source-side leader kill covers
# a source broker going away, and the six restarts took CI up to 600 s of its 60-minute budget.
@pytest.mark.parametrize(
    "engine,rolled",
    [
        ("local", ("newyork",)),
        full_matrix_only("local", ("newyork", "sanfrancisco")),
        full_matrix_only("spark", ("newyork", "sanfrancisco")),
    ],
    ids=["local-destination", "local-both", "spark-both"],
)
@pytest.mark.timeout(1500)  # six broker restarts, each up to its 240 s start bound at load 50 (CI: 600 s passed)
def test_rolling_restart_under_a_running_gateway_and_producer(run, secure_kafka, engine, rolled):
    replication = run(engine)
    for name in rolled:  # the destination, then the source under the writer
        cluster = secure_kafka[name]
        for broker in cluster.brokers:
            assert kafka_local.stop(broker), f"{broker.name} was not running"  # SIGTERM: a controlled shutdown
            kafka_local.start(broker, die_with_parent=True)
            await_healthy(cluster)  # back in every ISR before the next one goes
    replication.finish(f"rolling restart of {' then '.join(rolled)}")


@pytest.mark.parametrize("engine", [full_matrix_only("local"), "spark"])
def test_destination_broker_paused_past_its_session_timeout(run, secure_kafka, engine):
    ny = secure_kafka["newyork"]
    replication = run(engine)
    paused = busiest_coordinator(apply_txids(replication.api), ny)  # the gateway's transactions stall on it
    pid = kafka_local.running_pid(paused)
    os.kill(pid, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        await_fenced(ny, paused)
        time.sleep(max(0.0, frozen + PAUSE_S - time.monotonic()))
    finally:
        os.kill(pid, signal.SIGCONT)
    await_healthy(ny)
    replication.finish(f"destination broker paused {PAUSE_S} s")
