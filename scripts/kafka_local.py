"""Local Apache Kafka for tests and demos: install the pinned jars, start, stop and report brokers.

The one copy of the broker logic. ``./run kafka [secure] [stop|status]`` and ``./run``'s install call
the command line below; the test fixtures in ``tests/conftest.py`` import :func:`start`,
:func:`stop`, :func:`secure_cluster`, :func:`start_secure` and :func:`stop_secure`. Every JVM is a
KRaft node with broker and controller in one process, run from the jars of one Apache Kafka release
(:class:`Release`): ``kafka/pom.xml`` pins the default (:data:`DEFAULT`, every test and ``./run kafka``),
``kafka/<release>/pom.xml`` the others that ``tests/kafka/test_kafka_releases.py`` runs (:data:`RELEASES`).
``install`` resolves them all with Maven into ``.cache/kafka/<release>/libs``:

- ``./run kafka``: two single-node PLAINTEXT clusters, ``sanfrancisco`` and ``newyork``;
- ``./run kafka secure``: the same two names as production runs Kafka: three nodes each (a quorum of
  three), replication factor 3 with min ISR 2, SASL_SSL SCRAM-SHA-512 clients, mutual TLS between
  controllers, and ACLs (:class:`SecureCluster`).

    python scripts/kafka_local.py install [mm2] | [secure] start | [secure] stop | [secure] status
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from streamrep.client.config import read_client_settings
from streamrep.errors import StreamrepError

REPO = Path(__file__).resolve().parent.parent
SHARED_PROPERTIES = REPO / "kafka" / "server.properties"
SECURE_PROPERTIES = REPO / "kafka" / "secure.properties"  # overrides of the shared ones for secure clusters
KAFKA_CACHE = REPO / ".cache" / "kafka"  # <release>/libs, as each Release's Jars say
MAVEN_REPO = REPO / ".cache" / "m2"
MAVEN_TIMEOUT_S = 900


@dataclass(frozen=True)
class Jars:
    """A pinned pom and the folder Maven resolves it into (``<cache>/libs``, stamped with the pom's SHA-256).

    :param what: shown in messages ("Kafka jars", "MirrorMaker 2 jars")
    :param marker: a glob one of the resolved jars must match, or the resolve counts as failed
    :param how: the command that resolves them, for the message when they are missing
    """

    what: str
    pom: Path
    cache: Path
    marker: str
    how: str

    @property
    def libs(self) -> Path:
        return self.cache / "libs"

    @property
    def stamp(self) -> Path:
        return self.cache / "pom.sha256"

    @property
    def unavailable(self) -> Path:
        return self.cache / "unavailable"

    @property
    def maven_log(self) -> Path:
        return self.cache / "mvn.log"


@dataclass(frozen=True)
class Release:
    """An Apache Kafka release that brokers run: its pinned pom and the little that differs in starting it.

    :param version: the release (``4.4.0``); its jars resolve into ``.cache/kafka/<version>/libs``
    :param pom: pins it, with every dependency (``<kafka.version>`` is ``version``)
    :param log_config: the broker's logging settings: log4j2 since Kafka 4.0, log4j 1 (reload4j) before
    :param log_property: the JVM property naming ``log_config``, with its value's prefix (log4j 1 takes a URL)
    """

    version: str
    pom: Path
    log_config: Path = REPO / "kafka" / "log4j2.properties"
    log_property: str = "log4j2.configurationFile="

    @property
    def jars(self) -> Jars:
        return Jars(
            "Kafka jars" if self is DEFAULT else f"Kafka {self.version} jars",
            self.pom,
            KAFKA_CACHE / self.version,
            "kafka_2.13-*.jar",
            "run ./run test or ./run kafka",
        )

    @property
    def libs(self) -> Path:
        return self.jars.libs

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


# The default first: the one every other Kafka test, ./run kafka and the compose stack's image run.
DEFAULT = Release("4.3.1", REPO / "kafka" / "pom.xml")
RELEASES = {
    release.version: release
    for release in (
        DEFAULT,
        # Not the default yet: see docs/platform.md, "Kafka releases".
        Release("4.4.0", REPO / "kafka" / "4.4.0" / "pom.xml"),
        # The newest 3.x release: log4j 1 through reload4j, as every Kafka before 4.0.
        Release(
            "3.9.2",
            REPO / "kafka" / "3.9.2" / "pom.xml",
            REPO / "kafka" / "3.9.2" / "log4j.properties",
            "log4j.configuration=file:",
        ),
    )
}
KAFKA = DEFAULT.jars
LIBS = DEFAULT.libs
# MirrorMaker 2 for bench/bench_replication.py only: resolved by `install mm2` (./run bench), not by ./run test.
MM2 = Jars(
    "MirrorMaker 2 jars",
    REPO / "kafka" / "mm2" / "pom.xml",
    REPO / ".cache" / "mm2",
    "connect-mirror-4*.jar",
    "run ./run bench or scripts/kafka_local.py install mm2",
)

LOCAL_HOME = REPO / ".kafka-local"
# ./run kafka: name -> (client port, controller port)
LOCAL_CLUSTERS = {"sanfrancisco": (19092, 19093), "newyork": (29092, 29093)}

# ./run kafka secure: name -> first of six ports: brokers 1-3 listen for clients on the first three,
# their controllers on the next three.
SECURE_CLUSTERS = {"sanfrancisco": 19192, "newyork": 29192}
SECURE_HOME = LOCAL_HOME / "secure"
PRINCIPALS = ("admin", "gateway", "alice", "bob", "carol")
SCRAM = "SCRAM-SHA-512"

# A bound, not an expectation: a broker starts in 5-20 s, but a restart under a load average of 25
# on 2 cores (a CI run beside other work) took over 90 s to open its client port.
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0
JVM_HEAP = "-Xmx512m"
SECURE_HEAP = "-Xmx384m"  # six JVMs at once on a small machine; see docs/platform.md for what they use


class KafkaLocalError(StreamrepError):
    """A local broker could not be installed, started or stopped."""


def _relative(path: Path) -> str:
    """``path`` as shown to a user: relative to the repository when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- install


def _pom_digest(jars: Jars = KAFKA) -> str:
    return hashlib.sha256(jars.pom.read_bytes()).hexdigest()


def _record_unavailable(reason: str, jars: Jars = KAFKA) -> str:
    jars.cache.mkdir(parents=True, exist_ok=True)
    jars.unavailable.write_text(reason + "\n")
    return reason


def _tools_missing(what: str) -> str | None:
    if shutil.which("mvn") is None:
        return f"{what} not installed: mvn (Apache Maven) is not on PATH"
    if shutil.which("java") is None:
        return f"{what} not installed: java (17 or newer) is not on PATH"
    return None


def install(jars: Jars = KAFKA) -> str | None:
    """Resolve the jars ``jars.pom`` pins (the default release's by default) into ``jars.libs``, unless
    already done for this pom.

    Maven runs only when the jars are missing or the pom changed since they were resolved (the stamp
    holds the pom's SHA-256). A failed resolve leaves no jars, so nothing runs a stale version.

    :returns: ``None`` when the jars are ready, else the one-line reason they are not.
    """
    if jars_missing_reason(jars) is None:
        return None
    missing = _tools_missing(jars.what)
    if missing:
        return _record_unavailable(missing, jars)
    partial = jars.cache / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(jars.libs, ignore_errors=True)
    jars.stamp.unlink(missing_ok=True)
    jars.cache.mkdir(parents=True, exist_ok=True)
    command = [
        "mvn",
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(jars.pom),
        f"-Dmaven.repo.local={MAVEN_REPO}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
    ]
    with jars.maven_log.open("w") as log:
        try:
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=MAVEN_TIMEOUT_S)
            failed = result.returncode != 0
        except subprocess.TimeoutExpired:
            failed = True
    if failed or not any(partial.glob(jars.marker)):
        shutil.rmtree(partial, ignore_errors=True)
        return _record_unavailable(
            f"{jars.what} not installed: Maven could not resolve {_relative(jars.pom)} "
            f"(is Maven Central reachable?); see {_relative(jars.maven_log)}",
            jars,
        )
    partial.rename(jars.libs)
    jars.stamp.write_text(_pom_digest(jars) + "\n")
    jars.unavailable.unlink(missing_ok=True)
    return None


def install_releases() -> list[tuple[Release, str]]:
    """:func:`install` every release of :data:`RELEASES` (Maven runs only for those missing or whose pom
    changed), and drop ``.cache/kafka``'s layout from before releases.

    :returns: the releases whose jars are not ready, each with its one-line reason, the default's first.
        Without Maven or Java the reason is the same line for every release.
    """
    for old in ("libs", "libs.partial"):
        shutil.rmtree(KAFKA_CACHE / old, ignore_errors=True)
    for old in ("pom.sha256", "unavailable", "mvn.log"):
        (KAFKA_CACHE / old).unlink(missing_ok=True)
    missing = _tools_missing("Kafka jars")
    failed = []
    for release in RELEASES.values():
        if missing and jars_missing_reason(release.jars) is not None:
            reason: str | None = _record_unavailable(missing, release.jars)
        else:
            reason = install(release.jars)
        if reason:
            failed.append((release, reason))
    return failed


def jars_missing_reason(jars: Jars = KAFKA) -> str | None:
    """Why the jars cannot be used (the broker's by default), or ``None`` when they can. Never downloads."""
    if jars.libs.is_dir() and jars.stamp.is_file() and jars.stamp.read_text().strip() == _pom_digest(jars):
        return None
    if jars.unavailable.is_file():
        return jars.unavailable.read_text().strip()
    if jars.libs.is_dir():
        return f"{jars.what} are older than {_relative(jars.pom)}: {jars.how} to resolve them again"
    return f"{jars.what} not installed: {jars.how}, which resolve {_relative(jars.pom)}"


# ---------------------------------------------------------------- brokers


@dataclass(frozen=True)
class Broker:
    """One KRaft node on loopback (broker and controller in one JVM), with everything it writes under ``home``.

    The defaults make a single-node PLAINTEXT cluster (``./run kafka``); :func:`secure_cluster` sets
    the rest for a node of a three-node secured cluster.

    :param name: shown in messages (``sanfrancisco``, ``sanfrancisco/broker-2``)
    :param port: the client (and inter-broker) port
    :param controller_port: the KRaft controller port
    :param home: folder for ``server.properties``, ``data/``, ``logs/`` and ``broker.pid``
    :param node_id: the node's id in its quorum
    :param voters: ``controller.quorum.voters`` of a quorum of several nodes; empty for this node alone
    :param protocol: security protocol of the client listener, which is also its listener name
    :param controller_protocol: security protocol of the controller listener
    :param overrides: properties files appended to the generated settings, in order (later keys win)
    :param client_file: librdkafka settings (key=value lines) the readiness check connects with
    :param heap: the JVM's heap option
    :param release: the Apache Kafka release it runs
    """

    name: str
    port: int
    controller_port: int
    home: Path
    node_id: int = 1
    voters: str = ""
    protocol: str = "PLAINTEXT"
    controller_protocol: str = "PLAINTEXT"
    overrides: tuple[Path, ...] = ()
    client_file: Path | None = None
    heap: str = JVM_HEAP
    release: Release = DEFAULT

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def properties_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def server_log(self) -> Path:
        return self.log_dir / "server.log"

    @property
    def console_log(self) -> Path:
        return self.log_dir / "console.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"


def local_broker(name: str) -> Broker:
    """One of ``./run kafka``'s two clusters, by name."""
    port, controller_port = LOCAL_CLUSTERS[name]
    return Broker(name, port, controller_port, LOCAL_HOME / name)


def _server_properties(broker: Broker) -> str:
    # kafka/server.properties holds the settings every cluster shares (the compose stack's too); the
    # lines after it win over it, the override files over both.
    listener, voters = broker.protocol, broker.voters or f"{broker.node_id}@127.0.0.1:{broker.controller_port}"
    return (
        SHARED_PROPERTIES.read_text()
        + "\n".join(
            [
                f"node.id={broker.node_id}",
                f"controller.quorum.voters={voters}",
                f"listeners={listener}://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}",
                f"advertised.listeners={listener}://127.0.0.1:{broker.port}",
                f"inter.broker.listener.name={listener}",
                f"listener.security.protocol.map=CONTROLLER:{broker.controller_protocol},{listener}:{listener}",
                f"log.dirs={broker.data_dir}",
                "",
            ]
        )
        + "".join(path.read_text() + "\n" for path in broker.overrides)
    )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (it may hold passwords or keys)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # a file made earlier with a wider mode is narrowed too
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _java(main_class: str, *args: str, broker: Broker) -> list[str]:
    return [
        "java",
        broker.heap,
        "-Djava.awt.headless=true",
        f"-D{broker.release.log_property}{broker.release.log_config}",
        f"-Dkafka.logs.dir={broker.log_dir}",
        "-cp",
        str(broker.release.libs / "*"),
        main_class,
        *args,
    ]


def _new_cluster_id() -> str:
    # Kafka's form: 16 random bytes, URL-safe base64 without padding, never starting with '-'.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_storage(broker: Broker, cluster_id: str | None = None, scram: Sequence[str] = ()) -> None:
    """Format ``broker``'s storage unless done before.

    :param cluster_id: the id every node of the cluster shares; a new one when ``None``
    :param scram: ``--add-scram`` values: credentials in the first metadata, so none is missing at start
    """
    if (broker.data_dir / "meta.properties").is_file():
        return
    command = _java(
        "kafka.tools.StorageTool",
        "format",
        "-t",
        cluster_id or _new_cluster_id(),
        "-c",
        str(broker.properties_file),
        *(arg for value in scram for arg in ("--add-scram", value)),
        broker=broker,
    )
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
        raise KafkaLocalError(f"kafka {broker.name}: formatting {_relative(broker.data_dir)} failed: {lines[-1]}")


def _read_pid(broker: Broker) -> int | None:
    try:
        return int(broker.pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def running_pid(broker: Broker) -> int | None:
    """The pid of ``broker``'s JVM when it is running, else ``None``.

    A pid counts only while its command line names this broker's properties file, so a pid reused
    by another process after a reboot is never signalled, or while it is exiting (a killed broker
    holds its ports until it is gone).
    """
    pid = _read_pid(broker)
    if pid is None or not _alive(pid):
        return None
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    if not raw:  # a process that is exiting has released its command line, not yet its ports
        return pid
    return pid if str(broker.properties_file).encode() in raw.split(b"\0") else None


def _alive(pid: int) -> bool:
    """True while any thread of ``pid`` runs; an exited process its parent has not reaped yet (a zombie)
    is not alive. A killed JVM's main thread shows as a zombie while its other threads still exit, and
    its sockets (the broker's ports) stay open until the last one has."""
    try:
        threads = [t.name for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return False
    for tid in threads:
        try:
            state = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # that thread has gone
        if state != "Z":
            return True
    return False


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def free_ports(count: int) -> list[int]:
    """Ports the kernel just handed out on loopback (held together, so they differ): for brokers of tests."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _accepts_clients(broker: Broker) -> bool:
    """True once the broker answers a metadata request from confluent-kafka's AdminClient (with the
    broker's client settings) that lists the broker itself: registered and unfenced, so it serves."""
    if not _port_open(broker.port):  # no client logging "connection refused" while the JVM starts
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    settings = read_client_settings(str(broker.client_file)) if broker.client_file else {}
    admin = AdminClient({**settings, "bootstrap.servers": broker.bootstrap, "log_level": 0})
    try:
        return broker.node_id in admin.list_topics(timeout=2).brokers
    except KafkaException:
        return False


def _die_with_parent() -> None:
    # Runs in the child before exec: the kernel kills the broker when the process that started it
    # dies, even by SIGKILL, so an interrupted test session leaves no broker behind.
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _last_error_line(broker: Broker) -> str:
    for log in (broker.server_log, broker.console_log):
        try:
            lines = [
                line
                for line in log.read_text(errors="replace").splitlines()
                if " ERROR " in line or "Exception" in line
            ]
        except OSError:
            continue
        if lines:
            return f": {lines[-1].strip()[:300]}"
    return ""


def _check_java(broker: Broker) -> None:
    missing = jars_missing_reason(broker.release.jars)
    if missing:
        raise KafkaLocalError(missing)
    if shutil.which("java") is None:
        raise KafkaLocalError(f"kafka {broker.name}: java (17 or newer) is not on PATH")


def _check_ports(broker: Broker) -> None:
    for port in (broker.port, broker.controller_port):
        if _port_open(port):
            raise KafkaLocalError(f"kafka {broker.name}: port {port} is already in use by another process")


def _write_server_properties(broker: Broker) -> None:
    broker.log_dir.mkdir(parents=True, exist_ok=True)
    _write_private(broker.properties_file, _server_properties(broker))


def launch(broker: Broker, *, die_with_parent: bool = False) -> subprocess.Popen | None:
    """Start ``broker``'s JVM in the background, formatting its storage the first time; do not wait.

    :param broker: the broker to start; a running one is left as it is
    :param die_with_parent: kill the broker when the calling process dies (test sessions)
    :returns: the new process, or ``None`` if the broker was already running
    :raises KafkaLocalError: no jars or java, a port taken by another process, or a failed format
    """
    if running_pid(broker) is not None:
        return None
    _check_java(broker)
    _check_ports(broker)
    _write_server_properties(broker)
    _format_storage(broker)
    with broker.console_log.open("ab") as console:
        process = subprocess.Popen(
            _java("kafka.Kafka", str(broker.properties_file), broker=broker),
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    broker.pid_file.write_text(f"{process.pid}\n")
    return process


def wait_ready(broker: Broker, process: subprocess.Popen | None = None, timeout: float = START_TIMEOUT_S) -> None:
    """Wait until ``broker`` accepts clients; a broker that exits or times out is stopped.

    :param process: the process :func:`launch` returned, or ``None`` for a broker found running
    :raises KafkaLocalError: naming the broker's log folder
    """
    try:
        _wait_ready(broker, process, timeout)
    except KafkaLocalError:
        pid = process.pid if process is not None else running_pid(broker)
        if pid is not None:
            _stop_pid(pid, process)
        broker.pid_file.unlink(missing_ok=True)
        raise


def start(broker: Broker, *, die_with_parent: bool = False, timeout: float = START_TIMEOUT_S) -> bool:
    """Start ``broker`` (see :func:`launch`) and wait until it accepts clients.

    :returns: ``True`` if it was started now, ``False`` if it was already running
    :raises KafkaLocalError: no jars, a port taken by another process, or a broker that did not come up
    """
    process = launch(broker, die_with_parent=die_with_parent)
    wait_ready(broker, process, timeout)
    return process is not None


def _wait_ready(broker: Broker, process: subprocess.Popen | None, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not _accepts_clients(broker):
        exited = process.poll() if process is not None else (None if running_pid(broker) else "?")
        if exited is not None:
            raise KafkaLocalError(
                f"kafka {broker.name}: the broker exited while starting (status {exited}){_last_error_line(broker)}; "
                f"see {_relative(broker.log_dir)}/"
            )
        if time.monotonic() > deadline:
            raise KafkaLocalError(
                f"kafka {broker.name}: not accepting clients on {broker.bootstrap} after {timeout:.0f} s; "
                f"see {_relative(broker.log_dir)}/"
            )
        time.sleep(0.25)


def _stop_pid(pid: int, process: subprocess.Popen | None = None, timeout: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM (Kafka's clean shutdown), then SIGKILL when ``timeout`` passes."""

    def gone() -> bool:
        return process.poll() is not None if process is not None else not _alive(pid)

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if gone():
                return
            time.sleep(0.1)


def stop(broker: Broker, timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop ``broker`` if it runs: SIGTERM, then SIGKILL after ``timeout`` seconds.

    :returns: ``True`` if it was running
    """
    pid = running_pid(broker)
    if pid is not None:
        _stop_pid(pid, timeout=timeout)
        _await_ports_closed(broker)
    broker.pid_file.unlink(missing_ok=True)
    return pid is not None


def _await_ports_closed(broker: Broker, timeout: float = 30.0) -> None:
    """Wait until nothing answers on ``broker``'s ports: a killed JVM under load can take seconds to
    exit after SIGKILL, and a restart meanwhile found its own port "in use by another process"."""
    deadline = time.monotonic() + timeout
    while any(_port_open(port) for port in (broker.port, broker.controller_port)) and time.monotonic() < deadline:
        time.sleep(0.2)


def _start_together(
    brokers: Sequence[Broker],
    *,
    die_with_parent: bool = False,
) -> tuple[list[tuple[Broker, bool]], list[KafkaLocalError]]:
    """Launch every broker, then wait for each: a node of a quorum of three is ready only once
    enough of its peers run. One failing leaves the others running.

    :returns: the brokers that are ready, each with whether it was started now; the failures
    """
    failures: list[KafkaLocalError] = []
    launched: list[tuple[Broker, subprocess.Popen | None]] = []
    for broker in brokers:
        try:
            launched.append((broker, launch(broker, die_with_parent=die_with_parent)))
        except KafkaLocalError as err:
            failures.append(err)
    ready = []
    for broker, process in launched:
        try:
            wait_ready(broker, process)
        except KafkaLocalError as err:
            failures.append(err)
            continue
        ready.append((broker, process is not None))
    return ready, failures


def start_quorum(brokers: Sequence[Broker], *, die_with_parent: bool = False) -> None:
    """Start nodes that form one quorum (``voters``) but not a :class:`SecureCluster` (the benchmarks'
    plaintext three-node clusters): formatted with one cluster id, launched together, each waited for.

    :raises KafkaLocalError: as :func:`start`; the nodes that came up are left running
    """
    cluster_id = _new_cluster_id()
    for broker in brokers:
        if running_pid(broker) is None:
            _check_java(broker)
            _write_server_properties(broker)
            _format_storage(broker, cluster_id)
    _, failures = _start_together(brokers, die_with_parent=die_with_parent)
    if failures:
        raise failures[0]


# ---------------------------------------------------------------- secure clusters


@dataclass(frozen=True)
class SecureCluster:
    """A three-node KRaft cluster secured as production runs Kafka, with everything under ``home``.

    ``home`` holds ``broker-<n>/`` (each node's data and logs), ``tls/`` (the cluster's CA and the
    brokers' key and certificate), ``passwords.properties`` (every principal's SCRAM password,
    made at first start) and ``cluster.id``. The client settings files lie beside ``home``:
    ``<home>/../<name>-<principal>.properties``.

    :param name: the cluster's name (``sanfrancisco``)
    :param home: the cluster's folder
    :param brokers: its three nodes
    """

    name: str
    home: Path
    brokers: tuple[Broker, ...]

    @property
    def bootstrap(self) -> str:
        """The client addresses of the three brokers, comma-separated."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    @property
    def tls_dir(self) -> Path:
        return self.home / "tls"

    @property
    def ca_file(self) -> Path:
        """The cluster's CA certificate (PEM), which clients trust."""
        return self.tls_dir / "ca.pem"

    @property
    def keystore(self) -> Path:
        """The brokers' PKCS#8 key, certificate and CA in one PEM file (Kafka's PEM keystore)."""
        return self.tls_dir / "broker.pem"

    @property
    def broker_principal(self) -> str:
        """The principal of the brokers' certificate, as Kafka names it (the subject's DN)."""
        return f"User:CN=kafka-broker.{self.name}"

    @property
    def passwords_file(self) -> Path:
        return self.home / "passwords.properties"

    @property
    def cluster_properties(self) -> Path:
        """The server settings that hold the cluster's secrets and paths, written at each start."""
        return self.home / "cluster.properties"

    def properties_file(self, principal: str) -> Path:
        """The librdkafka settings file of ``principal`` (written at start).

        :param principal: one of :data:`PRINCIPALS`
        """
        return self.home.parent / f"{self.name}-{principal}.properties"

    def settings(self, principal: str) -> dict[str, str]:
        """The librdkafka (confluent-kafka) settings ``principal`` connects with, bootstrap included.

        :param principal: one of :data:`PRINCIPALS`
        :raises KafkaLocalError: an unknown principal, or a cluster never started (no passwords yet)
        """
        if principal not in PRINCIPALS:
            raise KafkaLocalError(f"kafka {self.name}: no principal {principal!r}; there are {', '.join(PRINCIPALS)}")
        if not self.passwords_file.is_file():
            raise KafkaLocalError(
                f"kafka {self.name}: no passwords in {_relative(self.home)}/ yet: the cluster was never started"
            )
        return {
            "bootstrap.servers": self.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM,
            "sasl.username": principal,
            "sasl.password": read_client_settings(str(self.passwords_file))[principal],
            "ssl.ca.location": str(self.ca_file),
        }


def secure_cluster(name: str, ports: Sequence[int] | None = None, home: Path | str | None = None) -> SecureCluster:
    """A secured three-node cluster (not started).

    :param name: the cluster's name
    :param ports: six ports: the three brokers' client ports, then their three controller ports;
        ``None`` for ``./run kafka secure``'s fixed ports when ``name`` is one of its clusters, else free ones
    :param home: the cluster's folder; ``None`` for ``.kafka-local/secure/<name>``
    """
    home = Path(home).absolute() if home is not None else SECURE_HOME / name
    if ports is None:
        first = SECURE_CLUSTERS.get(name)
        ports = list(range(first, first + 6)) if first else free_ports(6)
    if len(ports) != 6:
        raise ValueError(f"a secure cluster takes 6 ports, not {len(ports)}")
    clients, controllers = ports[:3], ports[3:]
    voters = ",".join(f"{node}@127.0.0.1:{port}" for node, port in enumerate(controllers, 1))
    cluster = SecureCluster(name, home, ())  # no brokers yet: for the paths they are given
    brokers = tuple(
        Broker(
            f"{name}/broker-{node}",
            clients[node - 1],
            controllers[node - 1],
            home / f"broker-{node}",
            node_id=node,
            voters=voters,
            protocol="SASL_SSL",
            controller_protocol="SSL",
            overrides=(SECURE_PROPERTIES, cluster.cluster_properties),
            client_file=cluster.properties_file("admin"),
            heap=SECURE_HEAP,
        )
        for node in (1, 2, 3)
    )
    return SecureCluster(name, home, brokers)


def _openssl(cluster: SecureCluster, *args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, cwd=cluster.tls_dir)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["no output"]
        raise KafkaLocalError(
            f"kafka {cluster.name}: openssl {args[0]} failed in {_relative(cluster.tls_dir)}/: {lines[-1]}"
        )


def _make_tls(cluster: SecureCluster) -> None:
    """The cluster's CA and the brokers' key and certificate, unless made before.

    One certificate serves the three brokers: on the controller listener it is the principal the
    brokers authenticate as (a super user). Its SAN names 127.0.0.1 and localhost, which librdkafka
    and Java clients verify.
    """
    if cluster.keystore.is_file() and cluster.ca_file.is_file():
        return
    if shutil.which("openssl") is None:
        raise KafkaLocalError(f"kafka {cluster.name}: openssl is not on PATH (it makes the cluster's certificates)")
    cluster.tls_dir.mkdir(parents=True, exist_ok=True)
    cluster.tls_dir.chmod(0o700)  # holds the keys
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "3650")
    _openssl(
        cluster,
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-subj",
        f"/CN=streamrep local CA {cluster.name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    # OpenSSL 3 writes the key unencrypted in PKCS#8, the form Kafka's PEM keystore reads.
    _openssl(
        cluster,
        "req",
        "-x509",
        *ec,
        "-keyout",
        "broker.key",
        "-out",
        "broker.crt",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-subj",
        f"/{cluster.broker_principal.removeprefix('User:')}",
        "-addext",
        "subjectAltName=IP:127.0.0.1,DNS:localhost",
        "-addext",
        "extendedKeyUsage=serverAuth,clientAuth",
        "-addext",
        "basicConstraints=critical,CA:FALSE",
    )
    parts = [(cluster.tls_dir / part).read_text() for part in ("broker.key", "broker.crt", "ca.pem")]
    _write_private(cluster.keystore, "".join(parts))


def _prepare_secure(cluster: SecureCluster) -> None:
    """Everything the three nodes need before they start: certificates, passwords, the cluster id,
    the server settings that hold them, formatted storage and the client settings files."""
    _check_java(cluster.brokers[0])
    stopped = [broker for broker in cluster.brokers if running_pid(broker) is None]
    for broker in stopped:  # before anything is made: a taken port fails the start anyway
        _check_ports(broker)
    cluster.home.mkdir(parents=True, exist_ok=True)
    cluster.home.chmod(0o700)  # the metadata logs hold the salted SCRAM credentials
    _make_tls(cluster)
    if not cluster.passwords_file.is_file():
        # URL-safe characters: they need no quoting in JAAS or in --add-scram.
        _write_private(cluster.passwords_file, "".join(f"{p}={secrets.token_urlsafe(18)}\n" for p in PRINCIPALS))
    passwords = read_client_settings(str(cluster.passwords_file))
    id_file = cluster.home / "cluster.id"
    if not id_file.is_file():
        id_file.write_text(_new_cluster_id() + "\n")
    _write_private(
        cluster.cluster_properties,
        "\n".join(
            [
                "# Written by scripts/kafka_local.py at each start: the secrets and paths of this cluster.",
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={cluster.keystore}",
                "ssl.truststore.type=PEM",
                f"ssl.truststore.location={cluster.ca_file}",
                f"super.users=User:admin;{cluster.broker_principal}",
                # Brokers replicate as admin; SCRAM needs no server-side credentials in JAAS (they are in the metadata).
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram."
                f'ScramLoginModule required username="admin" password="{passwords["admin"]}";',
                "",
            ]
        ),
    )
    for principal in PRINCIPALS:
        _write_private(
            cluster.properties_file(principal),
            "".join(f"{key}={value}\n" for key, value in cluster.settings(principal).items()),
        )
    scram = [f"{SCRAM}=[name={p},password={passwords[p]}]" for p in PRINCIPALS]
    for broker in stopped:
        _write_server_properties(broker)
        _format_storage(broker, id_file.read_text().strip(), scram)


def _wait_all_registered(cluster: SecureCluster, timeout: float = START_TIMEOUT_S) -> None:
    """Wait until the admin principal sees all three brokers of ``cluster``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**cluster.settings("admin"), "log_level": 0})
    deadline, seen = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        try:
            seen = len(admin.list_topics(timeout=2).brokers)
        except KafkaException:
            seen = 0
        if seen == len(cluster.brokers):
            return
        time.sleep(0.25)
    raise KafkaLocalError(
        f"kafka {cluster.name}: {seen} of {len(cluster.brokers)} brokers registered after "
        f"{timeout:.0f} s; see {_relative(cluster.home)}/broker-*/logs/"
    )


def start_secure(cluster: SecureCluster, die_with_parent: bool = False) -> None:
    """Start the three nodes of ``cluster`` together (making certificates, passwords and storage the
    first time) and wait until the admin principal sees all three brokers. Running nodes are kept.

    :param die_with_parent: kill the nodes when the calling process dies (test sessions)
    :raises KafkaLocalError: no jars, java or openssl, a port taken, or a node that did not come up
    """
    _prepare_secure(cluster)
    _, failures = _start_together(cluster.brokers, die_with_parent=die_with_parent)
    if failures:
        raise failures[0]
    _wait_all_registered(cluster)


def _stop_all(brokers: Sequence[Broker], timeout: float = STOP_TIMEOUT_S) -> list[bool]:
    # All at once: a quorum's last nodes would otherwise wait for peers already gone.
    with ThreadPoolExecutor(max_workers=max(1, len(brokers))) as pool:
        return list(pool.map(lambda broker: stop(broker, timeout), brokers))


def stop_secure(cluster: SecureCluster, timeout: float = STOP_TIMEOUT_S) -> list[bool]:
    """Stop the three nodes of ``cluster`` together (see :func:`stop`).

    :returns: for each node, whether it was running
    """
    return _stop_all(cluster.brokers, timeout)


# ---------------------------------------------------------------- ./run kafka


def _start_command(brokers: list[Broker], clusters: list[SecureCluster]) -> int:
    reason = install()
    if reason:
        raise KafkaLocalError(reason)
    began = time.monotonic()
    for cluster in clusters:
        _prepare_secure(cluster)
    ready, failures = _start_together(brokers)
    for broker, started in ready:
        print(
            f"{broker.name}: {'started' if started else 'already running'} on {broker.bootstrap}"
            f" (data and logs in {_relative(broker.home)}/)"
        )
    for cluster in clusters:
        try:
            _wait_all_registered(cluster)
        except KafkaLocalError as err:
            failures.append(err)
            continue
        print(
            f"{cluster.name}: {cluster.bootstrap} ready in {time.monotonic() - began:.0f} s; SASL_SSL "
            f"{SCRAM}, CA {_relative(cluster.ca_file)}; client settings of {', '.join(PRINCIPALS)} in "
            f"{_relative(cluster.properties_file('<principal>'))}"
        )
    for err in failures:
        print(f"run: {err}", file=sys.stderr)
    return 1 if failures else 0


def _main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    if command == "install":
        if argv[1:] == ["mm2"]:  # MirrorMaker 2, for the benchmark only
            reason = install(MM2)
            if reason:
                print(f"run: {reason}; the benchmark's MirrorMaker 2 case will not run", file=sys.stderr)
            return 1 if reason else 0
        lines = []
        for release, reason in install_releases():
            # the default release's, or every release's (no Maven): "Kafka jars ..."
            what = (
                "Kafka tests" if reason.startswith(f"{KAFKA.what} ") else f"the Kafka {release.version} release tests"
            )
            lines.append(f"run: {reason}; {what} will be skipped")
        for line in dict.fromkeys(lines):  # without Maven or Java: one line for every release
            print(line, file=sys.stderr)
        return 0
    clusters = []
    if command == "secure":
        command = argv[1] if len(argv) > 1 else "start"
        clusters = [secure_cluster(name) for name in SECURE_CLUSTERS]
        brokers = [broker for cluster in clusters for broker in cluster.brokers]
    else:
        brokers = [local_broker(name) for name in LOCAL_CLUSTERS]
    if command == "start":
        return _start_command(brokers, clusters)
    if command == "stop":
        for broker, was_running in zip(brokers, _stop_all(brokers), strict=False):
            print(f"{broker.name}: {'stopped' if was_running else 'was not running'}")
        return 0
    if command == "status":
        up = 0
        for broker in brokers:
            pid = running_pid(broker)
            if pid is None:
                print(f"{broker.name}: down")
            else:
                up += 1
                state = "up" if _accepts_clients(broker) else "starting or not answering"
                print(f"{broker.name}: {state} on {broker.bootstrap} (pid {pid})")
        return 0 if up == len(brokers) else 3
    print("usage: ./run kafka [secure] [start|stop|status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(_main(sys.argv[1:]))
    except StreamrepError as err:  # KafkaLocalError, or a settings file that cannot be read
        print(f"run: {err}", file=sys.stderr)
        sys.exit(1)
