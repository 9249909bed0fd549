"""MirrorMaker 2 beside streamrep in ``bench_replication.py`` (issue 20): MM2 in dedicated mode between two
Kafka clusters, child processes measured by the kernel, and the check that a replica holds each source
record exactly once.

- MM2 runs from the jars ``kafka/mm2/pom.xml`` pins (``scripts/kafka_local.py install mm2``, which ``./run
  bench`` runs: never while the benchmark runs), as ``org.apache.kafka.connect.mirror.MirrorMaker`` with an
  ``mm2.properties`` written here and the JVM options of Kafka's ``connect-mirror-maker.sh``.
- Topics keep MM2's default naming (``DefaultReplicationPolicy``): the replica of ``T`` is ``<source alias>.T``
  on the target, as MM2's users run it; every run gets aliases of its own (``s<n>``, ``t<n>``), so its
  internal topics (offsets, configs, status, offset syncs) and its replica topic are new and nothing of a
  previous run is resumed.
- Exactly-once is set the one way dedicated mode honours: ``<target alias>.exactly.once.source.support =
  enabled`` (a top-level ``exactly.once.source.support`` is silently ignored). ``replica_check`` proves it
  took effect: a transactional producer leaves commit markers in the replica's partitions (offsets that
  hold no record), an at-least-once one none.
- CPU seconds and peak RSS of a child come from ``wait4`` when it is reaped (``Measured``): the kernel's
  figures for the whole process (every JVM or Python thread), not samples.

``python bench/mirrormaker.py drain HOME`` is the streamrep side of the backlog case: a fresh process that
creates the in-process ``Gateway`` of cluster ``ny``, drains everything it serves and exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib import PARTITIONS, REPO, Conn, acting, drain, kafka_conf, load_kafka_local
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from streamrep.store.kafka.client import fetched

LOG4J2 = REPO / "kafka" / "mm2" / "log4j2.properties"
MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
# What connect-mirror-maker.sh and kafka-run-class.sh start the JVM with: MM2 as its users run it.
JVM_OPTIONS = (
    "-Xms256M",
    "-Xmx2G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
ID_BYTES = 8  # benchlib's producers start each value with its sequence number, big-endian


def missing_reason() -> str | None:
    """Why MM2 cannot run here (its jars not resolved), or ``None``. Never downloads."""
    kafka_local = load_kafka_local()
    return kafka_local.jars_missing_reason(kafka_local.MM2)


@dataclass(frozen=True)
class Usage:
    """A reaped child: seconds from its start to its end, CPU seconds (user + system) and peak RSS."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    exit: int


class Measured:
    """A child process (dying with this one) whose CPU time and peak RSS the kernel reports when it is reaped."""

    def __init__(self, command: list[str], log: Path):
        self.log = log
        self.t0 = time.perf_counter()
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, preexec_fn=load_kafka_local()._die_with_parent
            )
        self.usage: Usage | None = None

    def _reap(self, flags: int) -> Usage | None:
        if self.usage is None:
            pid, status, ru = os.wait4(self.proc.pid, flags)
            if pid == 0:
                return None
            self.proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            self.usage = Usage(
                time.perf_counter() - self.t0, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024, self.proc.returncode
            )
        return self.usage

    def alive(self) -> bool:
        return self._reap(os.WNOHANG) is None

    def wait(self, timeout: float) -> Usage:
        deadline = time.time() + timeout
        while (usage := self._reap(os.WNOHANG)) is None:
            if time.time() > deadline:
                raise TimeoutError(f"{self.proc.args[0]} still running after {timeout:.0f} s")
            time.sleep(0.05)
        return usage

    def stop(self, grace: float = 30.0) -> Usage:
        """SIGTERM (MM2 shuts down its tasks), SIGKILL after ``grace`` s; the figures."""
        if self.alive():
            self.proc.terminate()
            try:
                return self.wait(grace)
            except TimeoutError:
                self.proc.kill()
        return self.wait(30)

    def last_error(self) -> str:
        """The last ERROR line or exception of the log, for a failure's one line."""
        lines = [
            line.strip()
            for line in self.log.read_text(errors="replace").splitlines()
            if " ERROR " in line or "Exception" in line
        ]
        return lines[-1][:400] if lines else f"no error line in {self.log}"


class MirrorMaker:
    """One MM2 run in dedicated mode: ``source`` -> ``target`` for ``topics``.

    :param source: a plaintext bootstrap, or a secured cluster's librdkafka settings (SASL_SSL SCRAM and a
        PEM CA, as ``benchlib.kafka_conf`` takes them), written as the Java clients' settings of its alias
    :param run: makes the cluster aliases, and so every topic MM2 creates, this run's own
    :param exactly_once: ``<target>.exactly.once.source.support = enabled``; else at-least-once (MM2's default)
    :param replication: the replication factor of every topic MM2 creates (3 on three-broker clusters)
    """

    def __init__(
        self,
        source: Conn,
        target: Conn,
        topics: list[str],
        exactly_once: bool,
        home: Path,
        run: int,
        replication: int = 1,
    ):
        self.source, self.target, self.topics, self.exactly_once = source, target, topics, exactly_once
        self.home, self.alias, self.target_alias = home / f"mm2-{run}", f"s{run}", f"t{run}"
        self.replication = replication
        self.proc: Measured | None = None

    def replica(self, topic: str) -> str:
        """The replica of source topic ``topic`` on the target (DefaultReplicationPolicy)."""
        return f"{self.alias}.{topic}"

    def properties(self) -> str:
        src, tgt = self.alias, self.target_alias
        lines = [
            f"clusters = {src}, {tgt}",
            *java_client_settings(src, self.source),
            *java_client_settings(tgt, self.target),
            f"{src}->{tgt}.enabled = true",
            f"{tgt}->{src}.enabled = false",
            # names (MM2 reads each as a regex; they have no other topic's name in them)
            f"{src}->{tgt}.topics = {', '.join(self.topics)}",
            # one task, as one streamrep gateway: one consumer and one producer for the 4 partitions
            "tasks.max = 1",
            # as many replicas as the clusters have brokers, for every topic MM2 creates
            *(
                f"{topic}replication.factor = {self.replication}"
                for topic in ("", "checkpoints.topic.", "heartbeats.topic.", "offset-syncs.topic.")
                + ("offset.storage.", "status.storage.", "config.storage.")
            ),
            # streamrep copies no ACLs either; on the secured pair MM2 runs as a super user, as streamrep does
            "sync.topic.acls.enabled = false",
            # one way only: without this MM2 also starts a herder (a Connect worker) for the disabled way back,
            # to emit its heartbeats
            f"{tgt}->{src}.emit.heartbeats.enabled = false",
            # the jars declare their plugins: no scan of the class path at start (Connect's own advice in its log)
            "plugin.discovery = service_load",
        ]
        if self.exactly_once:
            # the only spelling dedicated mode honours: a top-level exactly.once.source.support is ignored
            lines.append(f"{tgt}.exactly.once.source.support = enabled")
        return "\n".join(lines) + "\n"

    def start(self) -> Measured:
        mm2 = load_kafka_local().MM2
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.home / "mm2.properties"
        config.touch(mode=0o600)  # it may hold a password
        config.write_text(self.properties())
        command = [
            "java",
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={LOG4J2}",
            f"-Dmm2.log.file={self.home / 'mm2.log'}",
            "-cp",
            str(mm2.libs / "*"),
            MAIN,
            str(config),
        ]
        self.proc = Measured(command, self.home / "console.log")
        return self.proc

    def failure(self, what: str) -> RuntimeError:
        """A loud failure naming MM2's last error line (its worker log, else its console)."""
        assert self.proc is not None
        line = self.proc.last_error()
        log = self.home / "mm2.log"
        if log.is_file():
            errors = [ln for ln in log.read_text(errors="replace").splitlines() if " ERROR " in ln]
            line = errors[-1][:400] if errors else line
        mode = "exactly-once" if self.exactly_once else "at-least-once"
        return RuntimeError(f"MirrorMaker 2 ({mode}) {what}: {line}")


def java_client_settings(alias: str, conn: Conn) -> list[str]:
    """The ``<alias>.``-prefixed Java client settings (every MM2 client of that cluster, the Connect worker's
    included) of a plaintext bootstrap or of a secured cluster's librdkafka settings."""
    settings = kafka_conf(conn)
    lines = [f"{alias}.bootstrap.servers = {settings.pop('bootstrap.servers')}"]
    if settings:
        known = {"security.protocol", "sasl.mechanism", "sasl.username", "sasl.password", "ssl.ca.location"}
        if set(settings) - known:
            raise ValueError(f"MirrorMaker 2 settings: no Java form for {sorted(set(settings) - known)}")
        login = "org.apache.kafka.common.security.scram.ScramLoginModule"
        lines += [
            f"{alias}.security.protocol = {settings['security.protocol']}",
            f"{alias}.sasl.mechanism = {settings['sasl.mechanism']}",
            f'{alias}.sasl.jaas.config = {login} required username="{settings["sasl.username"]}" '
            f'password="{settings["sasl.password"]}";',
            f"{alias}.ssl.truststore.type = PEM",  # the CA file librdkafka reads, as Java reads it
            f"{alias}.ssl.truststore.location = {settings['ssl.ca.location']}",
        ]
    return lines


def committed_end(admin: AdminClient, topic: str) -> int:
    """The sum of ``topic``'s last stable offsets (what read_committed readers can reach; commit markers
    included); 0 while the topic does not exist."""
    try:
        return partition_ends(admin, topic, IsolationLevel.READ_COMMITTED, timeout=10)
    except KafkaException:
        return 0


def read_ids(conn: Conn, topic: str, timeout: float = 600) -> tuple[list[int], int]:
    """The sequence numbers of every record a read_committed reader gets from ``topic`` to each partition's
    end, and the sum of the partitions' ends (records, commit markers and aborted records)."""
    consumer = Consumer(
        {
            **kafka_conf(conn),
            "group.id": f"bench-check-{time.time_ns()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    ids: list[int] = []
    ended: set[int] = set()
    deadline = time.time() + timeout
    try:
        while len(ended) < PARTITIONS:
            if time.time() > deadline:
                raise RuntimeError(f"{topic}: {len(ended)} of {PARTITIONS} partitions read to their end in {timeout} s")
            for m in fetched(consumer, 10000, wait=0.2):
                if m.error() is None:
                    ids.append(int.from_bytes(m.value()[:ID_BYTES], "big"))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(m.partition())
    finally:
        consumer.close()
    return ids, partition_ends(AdminClient(kafka_conf(conn)), topic, IsolationLevel.READ_UNCOMMITTED, timeout=60)


def partition_ends(admin: AdminClient, topic: str, isolation: IsolationLevel, timeout: float) -> int:
    """The sum of ``topic``'s partition ends as ``isolation`` reads them, in one request (a call per
    partition stalled for minutes at 256 partitions)."""
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout)
    return sum(f.result().offset for f in futures.values())


def replica_check(what: str, source: tuple[Conn, str], replica: tuple[Conn, str], transactional: bool) -> dict:
    """Read the source and the replica to their ends and compare: every source record exactly once in the
    replica, else a loud ``RuntimeError`` naming how many were lost and duplicated. ``transactional``: the
    replica must hold commit markers (its writer ran transactions); ``False``: none (at-least-once)."""
    src_ids, _ = read_ids(*source)
    dst_ids, ends = read_ids(*replica)
    if sorted(src_ids) != list(range(len(src_ids))):
        raise RuntimeError(f"{what}: the source's sequence numbers are not 0..{len(src_ids) - 1}")
    seen = bytearray(len(src_ids))
    strays = 0
    for i in dst_ids:
        if i < len(seen):
            seen[i] = min(seen[i] + 1, 255)
        else:
            strays += 1
    lost = seen.count(0)
    duplicated = len(dst_ids) - (len(src_ids) - lost)
    markers = ends - len(dst_ids)
    figures = {"source": len(src_ids), "replica": len(dst_ids), "lost": lost, "duplicated": duplicated}
    if lost or duplicated or strays:
        raise RuntimeError(f"{what}: not exactly once: {figures}")
    if transactional and not markers:
        raise RuntimeError(f"{what}: no commit marker in the replica: it was not written in transactions")
    if not transactional and markers:
        raise RuntimeError(f"{what}: {markers} offsets without a record: the replica was written in transactions")
    return {**figures, "markers": markers}


def replicas_check(what: str, source: Conn, replica: Conn, topics: list[tuple[str, str]], transactional: bool) -> dict:
    """``replica_check`` of each ``(source topic, replica topic)``, their figures summed."""
    total: dict = {}
    for src, dst in topics:
        for key, value in replica_check(f"{what} ({src})", (source, src), (replica, dst), transactional).items():
            total[key] = total.get(key, 0) + value
    return total


def drain_mm2(mm: MirrorMaker, topics: list[str], count: int, timeout: float) -> dict:
    """Start ``mm`` on a backlog of ``count`` records in ``topics`` and time it until its replicas are complete.

    The target's last stable offsets are sampled every 0.1 s; the run ends once they reach ``count`` and stay
    still for 1 s, and the replicas are read through and checked. The drain time is from the JVM's start to the
    first sample that reached the final figure: start-up included, the idle second and the check not."""
    admin = AdminClient(kafka_conf(mm.target))
    replicas = [mm.replica(topic) for topic in topics]
    proc = mm.start()
    samples: list[tuple[float, int]] = []
    try:
        while True:
            if not proc.alive():
                raise mm.failure(f"exited with status {proc.proc.returncode}")
            now, end = time.perf_counter(), sum(committed_end(admin, replica) for replica in replicas)
            samples.append((now, end))
            still = [e for t, e in samples if t >= now - 1.0]
            if end >= count and samples[0][0] < now - 1.0 and min(still) == end:
                break
            if now - proc.t0 > timeout:
                raise mm.failure(f"had {end:,} of {count:,} offsets in its replicas after {timeout:.0f} s")
            time.sleep(0.1)
    finally:
        usage = mm.proc.stop() if mm.proc else None
    done = next(t for t, e in samples if e == samples[-1][1])
    check = replicas_check(
        f"MM2 backlog run {mm.alias}", mm.source, mm.target, list(zip(topics, replicas, strict=True)), mm.exactly_once
    )
    assert usage is not None
    return {
        "with_start_s": done - proc.t0,
        "cpu_s": usage.cpu_s,
        "peak_rss_mib": usage.peak_rss_mib,
        **check,
    }


def drain_streamrep(home: str, log: Path, timeout: float) -> Usage:
    """``python bench/mirrormaker.py drain HOME`` to its end: a fresh process, Python's start included."""
    proc = Measured([sys.executable, str(Path(__file__).resolve()), "drain", home], log)
    try:
        usage = proc.wait(timeout)
    except TimeoutError:
        proc.stop(5)
        raise RuntimeError(f"the streamrep gateway did not drain its backlog in {timeout:.0f} s") from None
    if usage.exit != 0:
        raise RuntimeError(f"the streamrep gateway exited with status {usage.exit}: {proc.last_error()}")
    return usage


def _drain_main(home: str) -> int:
    from streamrep.client import Clusters, StreamAdmin
    from streamrep.replication.gateway import Gateway

    clusters = Clusters(home)
    gateway = Gateway(StreamAdmin(clusters, acting(clusters)), "ny", "bench")
    gateway.heartbeat()
    print(f"moved {drain(gateway)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["drain"] and len(sys.argv) == 3:
        sys.exit(_drain_main(sys.argv[2]))
    print("usage: python bench/mirrormaker.py drain HOME", file=sys.stderr)
    sys.exit(2)
