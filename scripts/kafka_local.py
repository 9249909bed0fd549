"""Local Apache Kafka for tests and demos: install the pinned jars, start, stop and report brokers.

The one copy of the broker logic. ``./run kafka [stop|status]`` and ``./run``'s install call the
command line below; the test fixture in ``tests/kafka/conftest.py`` imports :func:`start` and
:func:`stop`. Each broker is a single-node KRaft cluster (broker and controller in one JVM) run from
the jars that ``kafka/pom.xml`` pins, resolved by Maven into ``.cache/kafka/libs``.

    python scripts/kafka_local.py install | start | stop | status
"""

from __future__ import annotations

import base64
import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from streamrep.errors import StreamrepError

REPO = Path(__file__).resolve().parent.parent
POM = REPO / "kafka" / "pom.xml"
LOG4J2_CONFIG = REPO / "kafka" / "log4j2.properties"
SHARED_PROPERTIES = REPO / "kafka" / "server.properties"
KAFKA_CACHE = REPO / ".cache" / "kafka"
LIBS = KAFKA_CACHE / "libs"
STAMP = KAFKA_CACHE / "pom.sha256"
UNAVAILABLE = KAFKA_CACHE / "unavailable"  # one line: why the last install got no jars
MAVEN_LOG = KAFKA_CACHE / "mvn.log"
MAVEN_REPO = REPO / ".cache" / "m2"
MAVEN_TIMEOUT_S = 900

LOCAL_HOME = REPO / ".kafka-local"
# ./run kafka: name -> (client port, controller port)
LOCAL_CLUSTERS = {"sanfrancisco": (19092, 19093), "newyork": (29092, 29093)}

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
JVM_HEAP = "-Xmx512m"


class KafkaLocalError(StreamrepError):
    """A local broker could not be installed, started or stopped."""


def _relative(path: Path) -> str:
    """``path`` as shown to a user: relative to the repository when inside it."""
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------- install


def _pom_digest() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def _record_unavailable(reason: str) -> str:
    KAFKA_CACHE.mkdir(parents=True, exist_ok=True)
    UNAVAILABLE.write_text(reason + "\n")
    return reason


def install() -> str | None:
    """Resolve the jars ``kafka/pom.xml`` pins into ``.cache/kafka/libs``, unless already done for this pom.

    Maven runs only when the jars are missing or the pom changed since they were resolved (the stamp
    holds the pom's SHA-256). A failed resolve leaves no jars, so nothing runs a stale version.

    :returns: ``None`` when the jars are ready, else the one-line reason they are not.
    """
    if jars_missing_reason() is None:
        return None
    if shutil.which("mvn") is None:
        return _record_unavailable("Kafka jars not installed: mvn (Apache Maven) is not on PATH")
    if shutil.which("java") is None:
        return _record_unavailable("Kafka jars not installed: java (17 or newer) is not on PATH")
    partial = KAFKA_CACHE / "libs.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(LIBS, ignore_errors=True)
    STAMP.unlink(missing_ok=True)
    KAFKA_CACHE.mkdir(parents=True, exist_ok=True)
    command = [
        "mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(POM),
        f"-Dmaven.repo.local={MAVEN_REPO}",
        "dependency:copy-dependencies", f"-DoutputDirectory={partial}",
    ]
    with MAVEN_LOG.open("w") as log:
        try:
            result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=MAVEN_TIMEOUT_S)
            failed = result.returncode != 0
        except subprocess.TimeoutExpired:
            failed = True
    if failed or not any(partial.glob("kafka_2.13-*.jar")):
        shutil.rmtree(partial, ignore_errors=True)
        return _record_unavailable(
            f"Kafka jars not installed: Maven could not resolve kafka/pom.xml (is Maven Central reachable?); "
            f"see {_relative(MAVEN_LOG)}"
        )
    partial.rename(LIBS)
    STAMP.write_text(_pom_digest() + "\n")
    UNAVAILABLE.unlink(missing_ok=True)
    return None


def jars_missing_reason() -> str | None:
    """Why the broker cannot run from the installed jars, or ``None`` when it can. Never downloads."""
    if LIBS.is_dir() and STAMP.is_file() and STAMP.read_text().strip() == _pom_digest():
        return None
    if UNAVAILABLE.is_file():
        return UNAVAILABLE.read_text().strip()
    if LIBS.is_dir():
        return "Kafka jars are older than kafka/pom.xml: run ./run test or ./run kafka to resolve them again"
    return "Kafka jars not installed: run ./run test or ./run kafka, which resolve kafka/pom.xml"


# ---------------------------------------------------------------- brokers


@dataclass(frozen=True)
class Broker:
    """A single-node KRaft cluster on loopback, with everything it writes under ``home``.

    :param name: shown in messages (``sanfrancisco``)
    :param port: the client (PLAINTEXT) port
    :param controller_port: the KRaft controller port
    :param home: folder for ``server.properties``, ``data/``, ``logs/`` and ``broker.pid``
    """

    name: str
    port: int
    controller_port: int
    home: Path

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
    # kafka/server.properties holds the settings every cluster shares (the compose stack's too).
    return SHARED_PROPERTIES.read_text() + "\n".join([
        f"controller.quorum.voters=1@127.0.0.1:{broker.controller_port}",
        f"listeners=PLAINTEXT://127.0.0.1:{broker.port},CONTROLLER://127.0.0.1:{broker.controller_port}",
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{broker.port}",
        "inter.broker.listener.name=PLAINTEXT",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        f"log.dirs={broker.data_dir}",
        "",
    ])


def _java(main_class: str, *args: str, broker: Broker) -> list[str]:
    return [
        "java", JVM_HEAP, "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}", f"-Dkafka.logs.dir={broker.log_dir}",
        "-cp", str(LIBS / "*"), main_class, *args,
    ]


def _new_cluster_id() -> str:
    # Kafka's form: 16 random bytes, URL-safe base64 without padding, never starting with '-'.
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _format_storage(broker: Broker) -> None:
    if (broker.data_dir / "meta.properties").is_file():
        return
    command = _java("kafka.tools.StorageTool", "format", "-t", _new_cluster_id(),
                    "-c", str(broker.properties_file), broker=broker)
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
    by another process after a reboot is never signalled.
    """
    pid = _read_pid(broker)
    if pid is None or not _alive(pid):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    return pid if str(broker.properties_file).encode() in cmdline else None


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; an exited process its parent has not reaped yet (a zombie) is not alive."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


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
    """True once the broker answers a metadata request from confluent-kafka's AdminClient."""
    if not _port_open(broker.port):  # no client logging "connection refused" while the JVM starts
        return False
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    try:
        return len(admin.list_topics(timeout=2).brokers) > 0
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
            lines = [line for line in log.read_text(errors="replace").splitlines() if " ERROR " in line
                     or "Exception" in line]
        except OSError:
            continue
        if lines:
            return f": {lines[-1].strip()[:300]}"
    return ""


def launch(broker: Broker, *, die_with_parent: bool = False) -> subprocess.Popen | None:
    """Start ``broker``'s JVM in the background, formatting its storage the first time; do not wait.

    :param broker: the broker to start; a running one is left as it is
    :param die_with_parent: kill the broker when the calling process dies (test sessions)
    :returns: the new process, or ``None`` if the broker was already running
    :raises KafkaLocalError: no jars or java, a port taken by another process, or a failed format
    """
    if running_pid(broker) is not None:
        return None
    missing = jars_missing_reason()
    if missing:
        raise KafkaLocalError(missing)
    if shutil.which("java") is None:
        raise KafkaLocalError(f"kafka {broker.name}: java (17 or newer) is not on PATH")
    for port in (broker.port, broker.controller_port):
        if _port_open(port):
            raise KafkaLocalError(f"kafka {broker.name}: port {port} is already in use by another process")
    broker.log_dir.mkdir(parents=True, exist_ok=True)
    broker.properties_file.write_text(_server_properties(broker))
    _format_storage(broker)
    with broker.console_log.open("ab") as console:
        process = subprocess.Popen(
            _java("kafka.Kafka", str(broker.properties_file), broker=broker),
            stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent if die_with_parent else None,
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
    broker.pid_file.unlink(missing_ok=True)
    return pid is not None


# ---------------------------------------------------------------- ./run kafka


def _main(argv: list[str]) -> int:
    command = argv[0] if argv else "start"
    if command == "install":
        reason = install()
        if reason:
            print(f"run: {reason}; Kafka tests will be skipped", file=sys.stderr)
        return 0
    brokers = [local_broker(name) for name in LOCAL_CLUSTERS]
    if command == "start":
        reason = install()
        if reason:
            raise KafkaLocalError(reason)
        # Both JVMs start together; then each is waited for. One failing leaves the other running.
        failures: list[KafkaLocalError] = []
        launched: dict[str, subprocess.Popen | None] = {}
        for broker in brokers:
            try:
                launched[broker.name] = launch(broker)
            except KafkaLocalError as err:
                failures.append(err)
        for broker in brokers:
            if broker.name not in launched:
                continue
            process = launched[broker.name]
            try:
                wait_ready(broker, process)
            except KafkaLocalError as err:
                failures.append(err)
                continue
            print(f"{broker.name}: {'started' if process else 'already running'} on {broker.bootstrap}"
                  f" (data and logs in {_relative(broker.home)}/)")
        for err in failures:
            print(f"run: {err}", file=sys.stderr)
        return 1 if failures else 0
    if command == "stop":
        for broker in brokers:
            print(f"{broker.name}: {'stopped' if stop(broker) else 'was not running'}")
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
    print("usage: ./run kafka [start|stop|status]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(_main(sys.argv[1:]))
    except KafkaLocalError as err:
        print(f"run: {err}", file=sys.stderr)
        sys.exit(1)
