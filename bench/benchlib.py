"""What the replication benchmarks share: clusters, data, the baselines and the ways of measuring.

``bench_replication.py``, ``kafka_replication.py`` and ``scale.py`` import from here (the scripts run
with ``bench/`` on ``sys.path``), so each baseline and each measuring loop exists once.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import psutil
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka import Producer as KafkaProducer
from confluent_kafka.admin import AdminClient

from streamrep.client import Clusters, StreamAdmin
from streamrep.client.config import kafka_bootstrap
from streamrep.client.producer import Producer
from streamrep.errors import StreamrepError
from streamrep.model.ace import Identity
from streamrep.model.message import Message
from streamrep.model.naming import naming_for
from streamrep.replication.gateway import Gateway
from streamrep.store.kafka.client import fetched

REPO = Path(__file__).resolve().parents[1]
BATCH = 10_000
# Partitions of every stream a measure makes; bench_replication.py --partitions runs one process per count
# with it set (so that the producers and gateways it spawns see the same count).
PARTITIONS_ENV = "STREAMREP_BENCH_PARTITIONS"
PARTITIONS = int(os.environ.get(PARTITIONS_ENV, "4"))
TOPIC = "t"
# Topics of the mm2 case's backlog stream (--topics): 1 is ``TOPIC``; more are t0, t1, ... each of
# ``PARTITIONS`` partitions (64 x 16 is where MapR users' streams are).
TOPICS_ENV = "STREAMREP_BENCH_TOPICS"
TOPICS = int(os.environ.get(TOPICS_ENV, "1"))


def bulk_topics() -> list[str]:
    """The topics of the mm2 case's backlog stream (``TOPICS``)."""
    return [TOPIC] if TOPICS == 1 else [f"{TOPIC}{i}" for i in range(TOPICS)]


IDENTITY = Identity(user="bench")


# -- measuring ---------------------------------------------------------------------------------
def median(values: list[float]) -> float:
    return statistics.median(values)


def interleaved(points: dict, run: Callable[[object], float], repeats: int, warmup: bool = False) -> dict:
    """``run(point)`` ``repeats`` times for each point, round-robin; the times by point.

    :param warmup: one round first, not counted (first calls pay for imports and caches).
    """
    times: dict = {p: [] for p in points}
    if warmup:
        for p in points:
            run(p)
    for _ in range(repeats):
        for p in points:
            times[p].append(run(p))
    return times


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) of ``values`` by rank, as the benchmarks have always taken it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * q) - 1)] if q < 1 else ordered[-1]


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and every process below it (a Spark job is a launcher, a JVM,
    a Python driver and pyspark's daemon and workers); 0 once it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


class PeakRss(threading.Thread):
    """Samples ``tree_rss(pid)`` every ``every`` seconds until stopped; ``peak`` is the largest."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.every, self.peak = pid, every, 0
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self.halt.wait(self.every)

    def stop(self) -> int:
        self.halt.set()
        self.join(timeout=5)
        return self.peak


# -- embedded clusters -------------------------------------------------------------------------
def fresh_home(clusters=("sf", "ny", "la")) -> tuple[str, StreamAdmin]:
    home = tempfile.mkdtemp(prefix="streamrep-bench-")
    os.environ["STREAMREP_HOME"] = home
    reg = Clusters(home)
    for name in clusters:
        reg.add(name)
    return home, StreamAdmin(reg, IDENTITY)


def fill(admin: StreamAdmin, path: str, count: int, size: int, topic: str = TOPIC) -> None:
    """A new stream of ``PARTITIONS`` holding ``count`` messages of ``size`` bytes, written
    straight to the store (fast: the data, not the producer, is what the cases need)."""
    entry = admin.create_stream(path, defaultpartitions=PARTITIONS, ttl=0)
    admin.create_topic(path, topic)
    store = admin.store(admin.path(path))
    value = os.urandom(size)
    per = count // PARTITIONS
    for p in range(PARTITIONS):
        for i in range(0, per, BATCH):
            n = min(BATCH, per - i)
            store.append(entry.uuid, topic, {p: [Message(value, None, (), 1, p)] * n})


def baseline_copy(admin: StreamAdmin, src: str, dst: str, topic: str = TOPIC) -> int:
    """The plain loop: read a batch, append it. Returns messages copied."""
    s_entry, d_entry = admin.entry(src), admin.create_stream(dst, defaultpartitions=PARTITIONS, ttl=0)
    admin.create_topic(dst, topic)
    s_store, d_store = admin.store(admin.path(src)), admin.store(admin.path(dst))
    copied = 0
    for p in range(PARTITIONS):
        offset = 0
        while True:
            batch = s_store.read(s_entry.uuid, topic, p, offset, BATCH)
            if not batch:
                break
            d_store.append(d_entry.uuid, topic, {p: batch})
            offset = batch[-1].offset + 1
            copied += len(batch)
    return copied


def new_stream(admin: StreamAdmin, path: str, partitions: int) -> None:
    admin.create_stream(path, defaultpartitions=partitions, ttl=0)
    admin.create_topic(path, TOPIC)


def produce(admin: StreamAdmin, path: str, count: int, size: int = 100) -> None:
    """``count`` messages of ``size`` bytes through the project's producer, round-robin over the
    stream's partitions."""
    value = os.urandom(size)
    with Producer(admin, batch_size=10_000) as producer:
        for _ in range(count):
            producer.send(f"{path}:{TOPIC}", value)


def link(admin: StreamAdmin, source: str, replica: str, alone: bool = False) -> None:
    """Create ``replica`` (the source's metadata) with both links; with ``alone`` the source's
    other replicas are removed first, so that a gateway serves only this one."""
    if alone:
        for old in list(admin.entry(source).replicas):
            admin.remove_replica(source, old.path)
    admin.create_stream(replica, copymetafrom=source)
    admin.add_replica(source, replica)
    admin.add_upstream(replica, source)


def held(admin: StreamAdmin, path: str) -> int:
    """Messages a stream on an embedded cluster holds (0 while it does not exist)."""
    try:
        entry = admin.entry(path)
    except StreamrepError:
        return 0
    store = admin.store(admin.path(path))
    return sum(
        store.offsets(entry.uuid, topic, p)[1] - store.offsets(entry.uuid, topic, p)[0]
        for topic, count in store.topics(entry.uuid).items()
        for p in range(count)
    )


def gateway_loop(home: str, seconds: float, interval: float, cluster: str = "ny") -> None:
    """A gateway process: the in-process ``Gateway`` into ``cluster`` for ``seconds``, ``interval`` s idle sleep."""
    clusters = Clusters(home)
    Gateway(StreamAdmin(clusters, acting(clusters)), cluster, "bench").run(interval=interval, stop_after=seconds)


def drain(gateway: Gateway) -> int:
    moved = 0
    while step := gateway.run_once(max_messages=10_000):
        moved += step
    return moved


class Watch(threading.Thread):
    """Polls a destination stream every 50 ms: when its first message and its ``expected``-th
    arrived (the moving time of a Spark job, without Spark's start)."""

    def __init__(self, home: str, path: str, expected: int):
        super().__init__(daemon=True)
        self.home, self.path, self.expected = home, path, expected
        self.first = self.last = None
        self.halt = threading.Event()

    def run(self) -> None:
        admin = StreamAdmin(Clusters(self.home), IDENTITY)  # its own connections, in this thread
        while not self.halt.is_set():
            n = held(admin, self.path)
            now = time.perf_counter()
            if n and self.first is None:
                self.first = now
            if n >= self.expected:
                self.last = now
                return
            time.sleep(0.05)

    def moving(self) -> float | None:
        return None if self.first is None or self.last is None else max(self.last - self.first, 0.05)


def produce_steadily(home: str, path: str, rate: int, seconds: float, size: int, topic: str = TOPIC) -> None:
    """A producer process writing ``rate`` messages/s for ``seconds`` to an embedded stream, timestamps
    = send time, batches of 10 ms round-robin over the partitions."""
    admin = StreamAdmin(Clusters(home), IDENTITY)
    entry = admin.entry(path)
    store = admin.store(admin.path(path))
    value = b"x" * size
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    start = time.time()
    sent = 0
    while time.time() - start < seconds:
        now = int(time.time() * 1000)
        batch = [Message(value, None, (), now, 0)] * per_tick
        store.append(entry.uuid, topic, {sent // per_tick % PARTITIONS: batch})
        sent += per_tick
        delay = start + sent / rate - time.time()
        if delay > 0:
            time.sleep(delay)


def _done(until: float | Callable[[], bool]) -> Callable[[], bool]:
    return until if callable(until) else lambda: time.time() >= until


class AfterExit:
    """``until`` for the readers: true ``grace`` seconds after ``proc`` (a producer) has ended, or at
    ``limit`` seconds from now whatever happens."""

    def __init__(self, proc, grace: float, limit: float):
        self.proc, self.grace, self.limit = proc, grace, time.time() + limit
        self.ended: float | None = None

    def __call__(self) -> bool:
        if self.ended is None and self.proc.exitcode is not None:
            self.ended = time.time()
        return time.time() >= self.limit or (self.ended is not None and time.time() >= self.ended + self.grace)


def replica_latencies(
    admin: StreamAdmin,
    path: str,
    until: float | Callable[[], bool],
    poll: float = 0.02,
    topic: str = TOPIC,
    pairs: list | None = None,
) -> list[float]:
    """Read an embedded replica as it fills; latency (ms) = first seen - produce timestamp.

    :param until: a ``time.time()`` to stop at, or a function that says when to stop
    :param pairs: if given, also gets (latency ms, first seen ms) per message."""
    entry = admin.entry(path)
    store = admin.store(admin.path(path))
    positions: dict[int, int] = {}
    latencies: list[float] = []
    done = _done(until)
    while not done():
        topics = store.topics(entry.uuid)
        for p in range(topics.get(topic, 0)):
            batch = store.read(entry.uuid, topic, p, positions.get(p, 0), 50_000)
            if batch:
                now = time.time() * 1000
                latencies.extend(now - m.timestamp for m in batch)
                if pairs is not None:
                    pairs.extend((now - m.timestamp, now) for m in batch)
                positions[p] = batch[-1].offset + 1
        time.sleep(poll)
    return latencies


def baseline_loop(home: str, src: str, dst: str, seconds: float, interval: float, topic: str = TOPIC) -> None:
    """The plain loop, continuous: read what is new in each partition, append it; sleep when idle."""
    admin = StreamAdmin(Clusters(home), IDENTITY)
    s_entry, d_entry = admin.entry(src), admin.entry(dst)
    s_store, d_store = admin.store(admin.path(src)), admin.store(admin.path(dst))
    positions: dict[int, int] = {}
    deadline = time.time() + seconds
    while time.time() < deadline:
        moved = 0
        for p in range(PARTITIONS):
            batch = s_store.read(s_entry.uuid, topic, p, positions.get(p, 0), BATCH)
            if batch:
                d_store.append(d_entry.uuid, topic, {p: batch})
                positions[p] = batch[-1].offset + 1
                moved += len(batch)
        if not moved:
            time.sleep(interval)


# -- Kafka clusters ----------------------------------------------------------------------------
def load_kafka_local():
    """``scripts/kafka_local.py`` as the module ``kafka_local`` (it is a script, not a package)."""
    if "kafka_local" in sys.modules:
        return sys.modules["kafka_local"]
    spec = importlib.util.spec_from_file_location("kafka_local", REPO / "scripts" / "kafka_local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_local"] = module
    spec.loader.exec_module(module)
    return module


def start_broker(prefix: str = "kbench-"):
    """A single-node broker on free loopback ports in a temp folder, dying with this process."""
    kafka_local = load_kafka_local()
    broker = kafka_local.Broker("bench", *kafka_local.free_ports(2), Path(tempfile.mkdtemp(prefix=prefix)))
    kafka_local.start(broker, die_with_parent=True)
    return broker


def stop_broker(broker) -> None:
    load_kafka_local().stop(broker, timeout=30)
    shutil.rmtree(broker.home, ignore_errors=True)


def start_secure_cluster(name: str, prefix: str = "kbench-secure-"):
    """A secured three-broker cluster (``kafka_local.SecureCluster``: SASL_SSL SCRAM, ACLs, RF 3 / min ISR 2)
    on free loopback ports in a temp folder, dying with this process."""
    kafka_local = load_kafka_local()
    cluster = kafka_local.secure_cluster(name, kafka_local.free_ports(6), Path(tempfile.mkdtemp(prefix=prefix)) / name)
    kafka_local.start_secure(cluster, die_with_parent=True)
    return cluster


def start_plain_quorum(name: str, prefix: str = "kbench-plain3-"):
    """Three PLAINTEXT brokers replicated as the secured clusters are (RF 3 / min ISR 2: the replication lines
    of ``kafka/secure.properties``, same heap) with no TLS, SASL or ACLs: it separates the cost of replication
    from that of security. A ``SecureCluster`` whose brokers are plaintext (only its brokers and bootstrap
    are used: no principal settings); stop it with ``stop_secure_cluster``."""
    kafka_local = load_kafka_local()
    home = Path(tempfile.mkdtemp(prefix=prefix))
    secure = kafka_local.secure_cluster(name, kafka_local.free_ports(6), home / name)  # ports, voters, folders
    replication = home / "replication.properties"
    replication.write_text(
        "".join(
            f"{line}\n"
            for line in kafka_local.SECURE_PROPERTIES.read_text().splitlines()
            if "replication.factor" in line or "min.i" in line
        )
    )
    brokers = tuple(
        dataclasses.replace(
            b, protocol="PLAINTEXT", controller_protocol="PLAINTEXT", overrides=(replication,), client_file=None
        )
        for b in secure.brokers
    )
    cluster = dataclasses.replace(secure, brokers=brokers)
    kafka_local.start_quorum(brokers, die_with_parent=True)
    return cluster


def stop_secure_cluster(cluster) -> None:
    load_kafka_local().stop_secure(cluster)
    shutil.rmtree(cluster.home.parent, ignore_errors=True)  # the temp folder: the cluster and its settings files


Conn = str | Mapping[str, str]  # a bootstrap ("host:port,...") or librdkafka settings with bootstrap.servers


def kafka_conf(conn: Conn) -> dict:
    """librdkafka settings from a plaintext cluster's bootstrap or a secured cluster's settings (SASL_SSL, CA)."""
    return {"bootstrap.servers": conn} if isinstance(conn, str) else dict(conn)


COORDINATOR_SETTLING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
}


def warm_coordinators(conn: Conn) -> None:
    """Have a fresh cluster create its transaction and group coordinators' topics now (``__transaction_state``
    and ``__consumer_offsets``, 50 partitions each), before any timed run: otherwise the first run pays for
    it, whichever replicator that is (a first streamrep drain at 1,024 partitions took 55 s against 8-13 s)."""
    producer = KafkaProducer({**kafka_conf(conn), "transactional.id": f"bench-warm-{uuid.uuid4().hex}"})
    producer.init_transactions(120)
    consumer = Consumer({**kafka_conf(conn), "group.id": f"bench-warm-{uuid.uuid4().hex}"})
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                consumer.committed([TopicPartition("bench-warm", 0)], timeout=30)
                return
            except KafkaException as exc:  # the coordinator is being made, or moves
                if exc.args[0].code() not in COORDINATOR_SETTLING or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    finally:
        consumer.close()


def kafka_home(source: Conn, replica: Conn | None = None) -> tuple[str, StreamAdmin]:
    """A STREAMREP_HOME with clusters ``sf`` (on ``source``) and ``ny`` (on ``replica``, else on ``source``
    too), each a new namespace. A secured cluster's settings are registered as the cluster's client settings,
    their servers as its url."""
    home = tempfile.mkdtemp(prefix="streamrep-kbench-")
    os.environ["STREAMREP_HOME"] = home
    reg = Clusters(home)
    run = uuid.uuid4().hex[:8]
    for name, conn in (("sf", source), ("ny", replica or source)):
        settings = kafka_conf(conn)
        bootstrap = settings.pop("bootstrap.servers")
        reg.add(name, url=f"kafka://{bootstrap}", settings={**settings, "streamrep.namespace": f"bench{run}-{name}"})
    return home, StreamAdmin(reg, acting(reg))


def acting(clusters: Clusters) -> Identity:
    """Who the benchmark acts as: a secured cluster's authenticated principal (streamrep refuses any
    other caller there), else ``IDENTITY``."""
    principal = clusters.get("sf").principal if "sf" in {c.name for c in clusters.list()} else None
    return Identity(user=principal) if principal else IDENTITY


def cluster_conf(admin: StreamAdmin, name: str) -> dict:
    """The librdkafka settings of registered Kafka cluster ``name``: its url's servers and its client settings."""
    info = admin.clusters.get(name)
    settings = {k: v for k, v in info.settings.items() if not k.startswith("streamrep.")}
    return {**settings, "bootstrap.servers": kafka_bootstrap(info.url)}


def drop(admin: StreamAdmin, home: str, topics: list[str] = ()) -> None:
    """Delete the run's Kafka topics (both namespaces, and ``topics``) and its STREAMREP_HOME."""
    clusters = {name: (cluster_conf(admin, name), admin.clusters.store(name).namespace) for name in ("sf", "ny")}
    admin.clusters.close()
    for conf, namespace in clusters.values():  # sf and ny may be one Kafka cluster or two
        kafka_admin = AdminClient(conf)
        names = [
            t
            for t in kafka_admin.list_topics(timeout=30).topics
            if t in topics or t.startswith((f"{namespace}.", f"_streamrep.{namespace}."))
        ]
        if names:
            for future in kafka_admin.delete_topics(names, request_timeout=60).values():
                future.result()
    shutil.rmtree(home, ignore_errors=True)


def kafka_topic(admin: StreamAdmin, path: str, topic: str = TOPIC) -> str:
    """The Kafka topic behind ``path:topic``."""
    sp = admin.path(path)
    entry = admin.entry(sp)
    return naming_for(entry.naming, entry.path, admin.store(sp).namespace).kafka_topic(topic)


def kafka_send(producer: KafkaProducer, name: str, partition: int, value: bytes, timestamp: int = 0) -> None:
    while True:
        try:
            producer.produce(name, value=value, partition=partition, timestamp=timestamp)
            return
        except BufferError:
            producer.poll(0.05)


def kafka_fill(bootstrap: Conn, name: str, count: int, size: int) -> None:
    """``count`` records of ``size`` bytes round-robin over the partitions; value = sequence number (8 bytes,
    big-endian) + the same random bytes."""
    producer = KafkaProducer(
        {**kafka_conf(bootstrap), "enable.idempotence": True, "linger.ms": 5, "batch.size": 1 << 20}
    )
    pad = os.urandom(max(0, size - 8))
    for i in range(count):  # each value starts with its sequence number: a replica's copies can be told apart
        kafka_send(producer, name, i % PARTITIONS, i.to_bytes(8, "big") + pad)
    producer.flush(120)


def kafka_baseline_copy(bootstrap: Conn, src: str, dst: str, count: int, stop_at: float | None = None) -> int:
    """The plain Kafka loop: consume the source partitions, produce each record to the same partition
    of ``dst``, flush. No transactions. Stops after ``count`` records (or at ``stop_at``, a ``time.time()``)."""
    consumer = Consumer(
        {
            **kafka_conf(bootstrap),
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 20,
        }
    )
    consumer.assign([TopicPartition(src, p, 0) for p in range(PARTITIONS)])
    producer = KafkaProducer({**kafka_conf(bootstrap), "linger.ms": 5, "batch.size": 1 << 20})
    copied = 0
    try:
        while copied < count and (stop_at is None or time.time() < stop_at):
            for msg in fetched(consumer, 10000):
                if msg.error() is not None:
                    continue
                while True:
                    try:
                        producer.produce(
                            dst,
                            value=msg.value(),
                            key=msg.key(),
                            partition=msg.partition(),
                            headers=msg.headers(),
                            timestamp=msg.timestamp()[1],
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                copied += 1
            producer.poll(0)
        producer.flush(120)
    finally:
        consumer.close()
    return copied


def kafka_baseline_loop(bootstrap: Conn, src: str, dst: str, seconds: float) -> None:
    kafka_baseline_copy(bootstrap, src, dst, sys.maxsize, stop_at=time.time() + seconds)


def kafka_produce_steadily(bootstrap: Conn, name: str, rate: int, seconds: float, size: int) -> None:
    """A producer process writing ``rate`` messages/s for ``seconds``; timestamps are send times."""
    producer = KafkaProducer({**kafka_conf(bootstrap), "enable.idempotence": True, "linger.ms": 5})
    pad = b"x" * max(0, size - 8)
    # Connected, with its producer id, before the clock: else the first records wait for that in the
    # client's queue, stamped with their send time, and every side's p99 measures the producer's start.
    producer.list_topics(name, timeout=30)
    producer.poll(0.5)
    tick = 0.01
    per_tick = max(1, int(rate * tick))
    start = time.time()
    sent = 0
    while time.time() - start < seconds:
        now = int(time.time() * 1000)
        for _ in range(per_tick):  # the value starts with the sequence number, as kafka_fill's
            kafka_send(producer, name, sent % PARTITIONS, sent.to_bytes(8, "big") + pad, now)
            sent += 1
        producer.poll(0)
        delay = start + sent / rate - time.time()
        if delay > 0:
            time.sleep(delay)
    producer.flush(60)


def kafka_replica_latencies(
    bootstrap: Conn, name: str, until: float | Callable[[], bool], pairs: list | None = None
) -> list[float]:
    """Read ``name`` (read_committed) as it fills; latency (ms) = read time - produce timestamp.

    :param pairs: if given, also gets (latency ms, read time ms) per record."""
    consumer = Consumer(
        {
            **kafka_conf(bootstrap),
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    consumer.assign([TopicPartition(name, p, 0) for p in range(PARTITIONS)])
    latencies: list[float] = []
    done = _done(until)
    try:
        while not done():
            batch = fetched(consumer, 10000)
            now = time.time() * 1000
            latencies.extend(now - m.timestamp()[1] for m in batch if m.error() is None)
            if pairs is not None:
                pairs.extend((now - m.timestamp()[1], now) for m in batch if m.error() is None)
    finally:
        consumer.close()
    return latencies


def kafka_count(bootstrap: Conn, name: str, target: int | None, timeout: float, idle: float = 2.0) -> int:
    """Records a read_committed consumer reads from ``name``'s partitions: until ``target``, ``timeout`` s,
    or ``idle`` s without a new record once some were read (a producer that fell short of ``target``).
    With ``target`` None: every record up to each partition's end, exactly (a topic nothing writes to now);
    not reaching every end within ``timeout`` raises."""
    consumer = Consumer(
        {
            **kafka_conf(bootstrap),
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(name, p, 0) for p in range(PARTITIONS)])
    count = 0
    ended: set[int] = set()
    deadline = time.time() + timeout
    last = time.time()
    try:
        while time.time() < deadline:
            if target is None and len(ended) == PARTITIONS:
                return count
            if target is not None and (count >= target or (count and time.time() - last > idle)):
                break
            for m in fetched(consumer, 10000, wait=0.1):
                if m.error() is None:
                    count, last = count + 1, time.time()
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(m.partition())
    finally:
        consumer.close()
    if target is None:
        raise RuntimeError(f"{name}: {len(ended)} of {PARTITIONS} partitions read to their end in {timeout:.0f} s")
    return count
