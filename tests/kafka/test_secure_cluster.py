"""The secured three-node clusters of ``./run kafka secure`` (``scripts/kafka_local.py``), for real.

Replication factor 3 with min ISR 2 everywhere, SCRAM over TLS for every client, ACLs with nothing
allowed by default, client settings files that work unchanged, and a killed broker that rejoins.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import kafka_local
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from kafka_local import PRINCIPALS, KafkaLocalError, SecureCluster

from streamrep.client import Clusters, StreamAdmin
from streamrep.client.config import read_client_settings
from streamrep.errors import AuthenticationFailed, PermissionDenied, TlsHandshakeFailed

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 60  # bound of every wait below; none is expected to come near it

pytestmark = [pytest.mark.kafka, pytest.mark.secure_kafka]


def admin_of(cluster: SecureCluster, principal: str = "admin") -> AdminClient:
    return AdminClient(cluster.settings(principal))


def eventually(check, what: str, timeout: float = WAIT_S):
    """``check()``'s first truthy result, polling; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout} s")
        time.sleep(0.25)


@pytest.fixture
def sf(secure_kafka) -> SecureCluster:
    return secure_kafka["sanfrancisco"]


@pytest.fixture
def new_topic(secure_kafka):
    """``new_topic(cluster) -> name``: a topic ``admin`` creates with the broker defaults, deleted after the test."""
    made = []

    def create(cluster: SecureCluster, partitions: int = 1) -> str:
        name = f"t{uuid.uuid4().hex[:10]}"
        admin = admin_of(cluster)  # held: a future of a destroyed client fails
        admin.create_topics([NewTopic(name, num_partitions=partitions)])[name].result(WAIT_S)
        made.append((cluster, name))
        return name

    yield create
    for cluster, name in made:
        admin = admin_of(cluster)
        admin.delete_topics([name])[name].result(WAIT_S)


def produce_one(settings: dict, topic: str, **extra) -> KafkaError | None:
    """Produce one record with acks=all; the delivery error, or ``None`` once it is written."""
    outcome = []
    producer = Producer({**settings, "acks": "all", "message.timeout.ms": 10000, **extra})
    producer.produce(topic, b"value", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(WAIT_S)
    return outcome[0]


def replicas_and_min_isr(cluster: SecureCluster, topic: str) -> tuple[set[int], str]:
    """The replica counts of ``topic``'s partitions, and its effective ``min.insync.replicas``."""
    admin = admin_of(cluster)
    partitions = admin.list_topics(topic, timeout=WAIT_S).topics[topic].partitions.values()
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(WAIT_S)
    return {len(p.replicas) for p in partitions}, configs["min.insync.replicas"].value


def test_each_cluster_has_three_brokers_and_every_topic_three_replicas_with_min_isr_2(secure_kafka, new_topic):
    for cluster in secure_kafka.values():
        assert set(admin_of(cluster).list_topics(timeout=WAIT_S).brokers) == {1, 2, 3}
        topic = new_topic(cluster, partitions=2)
        # A transaction creates __transaction_state, a committing consumer group __consumer_offsets.
        producer = Producer({**cluster.settings("admin"), "transactional.id": f"tx-{topic}"})
        producer.init_transactions(WAIT_S)
        producer.begin_transaction()
        producer.produce(topic, b"in a transaction", partition=0)
        producer.commit_transaction(WAIT_S)
        consumer = Consumer({**cluster.settings("admin"), "group.id": f"g-{topic}", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = eventually(lambda: consumer.poll(1), "the transactional record")
        assert message.error() is None and message.value() == b"in a transaction"
        consumer.commit(message, asynchronous=False)
        consumer.close()

        for name in (topic, "__consumer_offsets", "__transaction_state"):
            assert replicas_and_min_isr(cluster, name) == ({3}, "2"), f"{cluster.name} {name}"


def auth_errors(settings: dict) -> list[KafkaError]:
    """The errors a client with ``settings`` reports while it fails to read the cluster's metadata."""
    errors = []
    admin = AdminClient({**settings, "error_cb": errors.append, "log_level": 0})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0)  # serves error_cb
    return errors


def test_a_wrong_password_a_plaintext_client_and_a_client_not_trusting_the_ca_are_refused(secure_kafka):
    sf, ny = secure_kafka["sanfrancisco"], secure_kafka["newyork"]
    wrong_password = auth_errors({**sf.settings("alice"), "sasl.password": "not-alice's"})
    assert KafkaError._AUTHENTICATION in {e.code() for e in wrong_password}, wrong_password

    plaintext = auth_errors({"bootstrap.servers": sf.bootstrap})
    assert plaintext and all(e.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN) for e in plaintext)

    # New York's CA did not sign San Francisco's brokers' certificate: the handshake fails before SASL.
    untrusted = auth_errors({**sf.settings("alice"), "ssl.ca.location": str(ny.ca_file)})
    assert any(e.code() == KafkaError._SSL or "certificate verify failed" in e.str() for e in untrusted), untrusted


def read_one(settings: dict, topic: str, group: str) -> KafkaError | bytes:
    """The first record of ``topic`` read in ``group``, or the error the read ended with."""
    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest", "log_level": 0})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is None:
                continue
            return message.error() or message.value()
        pytest.fail(f"nothing read from {topic} in {WAIT_S} s")
    finally:
        consumer.close()


def test_alice_without_an_acl_can_neither_write_nor_read_and_can_after_admin_allows_her(sf, new_topic):
    topic = new_topic(sf)
    assert produce_one(sf.settings("admin"), topic) is None
    for principal in ("alice", "bob"):
        refused = produce_one(sf.settings(principal), topic)
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        refused = read_one(sf.settings(principal), topic, f"{principal}-{topic}")
        assert isinstance(refused, KafkaError)
        assert refused.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED)

    allow = [
        AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", operation, AclPermissionType.ALLOW)
        for kind, name, operation in (
            (ResourceType.TOPIC, topic, AclOperation.ALL),
            (ResourceType.GROUP, f"alice-{topic}", AclOperation.READ),
        )
    ]
    admin = admin_of(sf)
    for future in admin.create_acls(allow).values():
        future.result(WAIT_S)

    # ACLs reach every broker through the metadata log: soon, not at once.
    eventually(lambda: produce_one(sf.settings("alice"), topic) is None, "alice's write after the ACL")
    assert read_one(sf.settings("alice"), topic, f"alice-{topic}") == b"value"
    refused = produce_one(sf.settings("bob"), topic)
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_every_principal_has_an_owner_only_settings_file_a_producer_takes_unchanged(secure_kafka, new_topic):
    for cluster in secure_kafka.values():
        for principal in PRINCIPALS:
            path = cluster.properties_file(principal)
            assert path.parent == cluster.home.parent and path.name == f"{cluster.name}-{principal}.properties"
            assert stat.S_IMODE(path.stat().st_mode) == 0o600
            settings = read_client_settings(str(path))
            assert settings == cluster.settings(principal)
            assert (
                settings["bootstrap.servers"] == cluster.bootstrap and Path(settings["ssl.ca.location"]).is_absolute()
            )
            # Authenticated: every principal sees the brokers, even with no ACL on any topic.
            assert set(Producer(settings).list_topics(timeout=WAIT_S).brokers) == {1, 2, 3}
        assert stat.S_IMODE(cluster.passwords_file.stat().st_mode) == 0o600
        assert produce_one(read_client_settings(str(cluster.properties_file("admin"))), new_topic(cluster)) is None


def streamrep_cli(home: Path, *args: str, stdin: str = "") -> str:
    """The stdout of the ``streamrep`` executable on ``home``, which must succeed; the caller is the
    principal the settings file authenticates (no STREAMREP_USER names anyone)."""
    env = {k: v for k, v in os.environ.items() if k != "STREAMREP_USER"}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "streamrep"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WAIT_S * 2,
        env={**env, "STREAMREP_HOME": str(home), "STREAMREP_GROUPS": ""},
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    return result.stdout


def test_streamrep_takes_a_settings_file_and_its_cluster_url_wins_over_the_files_servers(sf, tmp_path):
    stale = tmp_path / "stale.properties"
    stale.write_text(
        sf.properties_file("admin")
        .read_text()
        .replace(f"bootstrap.servers={sf.bootstrap}", f"bootstrap.servers=127.0.0.1:{kafka_local.free_ports(1)[0]}")
    )
    stream = f"s{uuid.uuid4().hex[:8]}"
    for name, settings in (("unchanged", sf.properties_file("admin")), ("stale", stale)):
        home = tmp_path / name
        streamrep_cli(
            home,
            "cluster",
            "add",
            "-name",
            "sf",
            "-url",
            f"kafka://{sf.brokers[1].bootstrap}",
            "-configfile",
            str(settings),
        )
        path = f"/mapr/sf/{stream}-{name}"
        streamrep_cli(home, "stream", "create", "-path", path)
        streamrep_cli(home, "stream", "topic", "create", "-path", path, "-topic", "clicks")
        streamrep_cli(home, "produce", "-path", f"{path}:clicks", stdin="hello secure kafka\n")
        assert "hello secure kafka" in streamrep_cli(
            home, "consume", "-path", f"{path}:clicks", "-fromstart", "-max", "1", "-timeout", "10"
        )


def isr(cluster: SecureCluster, topic: str) -> set[int]:
    return set(admin_of(cluster).list_topics(topic, timeout=WAIT_S).topics[topic].partitions[0].isrs)


@pytest.mark.slow
def test_a_broker_killed_with_sigkill_and_started_again_rejoins_and_gets_back_into_the_isr(sf, new_topic):
    topic = new_topic(sf)
    leader = admin_of(sf).list_topics(topic, timeout=WAIT_S).topics[topic].partitions[0].leader
    broker = sf.brokers[leader - 1]
    assert isr(sf, topic) == {1, 2, 3}
    os.kill(kafka_local.running_pid(broker), signal.SIGKILL)
    try:
        # Fenced once its session times out; the partition's new leader takes acks=all writes with two in sync.
        eventually(lambda: len(admin_of(sf).list_topics(timeout=5).brokers) == 2, "the killed broker fenced")
        assert eventually(lambda: leader not in isr(sf, topic), "the killed broker out of the ISR")
        assert produce_one(sf.settings("admin"), topic) is None
        assert kafka_local.start(broker, die_with_parent=True) is True
        eventually(lambda: len(admin_of(sf).list_topics(timeout=5).brokers) == 3, "three brokers again")
        eventually(lambda: isr(sf, topic) == {1, 2, 3}, "the restarted broker back in the ISR")
    finally:
        kafka_local.start(broker, die_with_parent=True)  # the session's clusters keep three brokers


def test_a_missing_openssl_is_one_line_naming_the_cluster_and_nothing_starts(tmp_path, monkeypatch):
    missing = kafka_local.jars_missing_reason()
    if missing:
        pytest.skip(missing)
    only_java = tmp_path / "bin"
    only_java.mkdir()
    (only_java / "java").symlink_to(shutil.which("java"))
    monkeypatch.setenv("PATH", str(only_java))
    cluster = kafka_local.secure_cluster("nossl", home=tmp_path / "nossl")
    with pytest.raises(
        KafkaLocalError,
        match=r"^kafka nossl: openssl is not on PATH \(it makes the cluster's "
        r"certificates\)$",
    ):
        kafka_local.start_secure(cluster)
    assert all(kafka_local.running_pid(broker) is None for broker in cluster.brokers)


def test_a_taken_port_is_one_line_naming_the_broker_before_anything_is_made(tmp_path):
    missing = kafka_local.jars_missing_reason()
    if missing:
        pytest.skip(missing)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cluster = kafka_local.secure_cluster(
            "busy", [*kafka_local.free_ports(4), port, kafka_local.free_ports(1)[0]], tmp_path / "busy"
        )
        with pytest.raises(
            KafkaLocalError, match=f"^kafka busy/broker-2: port {port} is already in use by another process$"
        ):
            kafka_local.start_secure(cluster)
    assert not cluster.home.exists()


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """The script and the files it reads, in a copy of the repository's layout with no cluster in it."""
    copy = tmp_path / "repo"
    for part in ("scripts/kafka_local.py", "kafka/pom.xml", "kafka/server.properties", "kafka/secure.properties"):
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / part, copy / part)
    return copy


def run_script(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(repo / "scripts" / "kafka_local.py"), *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )


def test_secure_status_and_stop_when_down_report_each_of_the_six_brokers(repo_copy):
    brokers = [f"{name}/broker-{n}" for name in ("sanfrancisco", "newyork") for n in (1, 2, 3)]
    status = run_script(repo_copy, "secure", "status")
    assert status.returncode == 3 and status.stderr == ""
    assert status.stdout.splitlines() == [f"{broker}: down" for broker in brokers]
    stop = run_script(repo_copy, "secure", "stop")
    assert stop.returncode == 0 and stop.stdout.splitlines() == [f"{broker}: was not running" for broker in brokers]
    usage = run_script(repo_copy, "secure", "restart")
    assert usage.returncode == 2 and usage.stderr == "usage: ./run kafka [secure] [start|stop|status]\n"


def wrong_settings(sf: SecureCluster, ny: SecureCluster) -> list[tuple[str, str, dict, type, str]]:
    """``(case, url, settings, error class, start of the line after the cluster's name)``: each wrong
    secured setting of alice's, and what streamrep must say about it."""
    alice = {k: v for k, v in sf.settings("alice").items() if k != "bootstrap.servers"}
    url = f"kafka://{sf.bootstrap}"
    authentication = (AuthenticationFailed, "authentication failed: ")
    tls = (TlsHandshakeFailed, "TLS handshake failed: ")
    cases = [
        ("a wrong password", url, {**alice, "sasl.password": "not-alice's"}, *authentication),
        ("an unknown user", url, {**alice, "sasl.username": "mallory"}, *authentication),
        ("a mechanism the brokers do not offer", url, {**alice, "sasl.mechanism": "SCRAM-SHA-256"}, *authentication),
        ("PLAIN, which the brokers do not offer", url, {**alice, "sasl.mechanism": "PLAIN"}, *authentication),
        ("another cluster's CA", url, {**alice, "ssl.ca.location": str(ny.ca_file)}, *tls),
        ("no CA (the system's)", url, {k: v for k, v in alice.items() if k != "ssl.ca.location"}, *tls),
        ("no TLS", url, {**alice, "security.protocol": "SASL_PLAINTEXT"}, *tls),
        ("neither TLS nor SASL", url, {"security.protocol": "PLAINTEXT"}, *tls),
        # The brokers answer ApiVersions, then hang up at the next request: they wait for SASL.
        ("TLS without SASL", url, {"security.protocol": "SSL", "ssl.ca.location": str(sf.ca_file)}, *authentication),
        # A controller's port: TLS that wants a client certificate (KRaft controllers do not check SCRAM).
        ("a controller's port", f"kafka://127.0.0.1:{sf.brokers[0].controller_port}", alice, *tls),
    ]
    # A name of this machine the brokers' certificate does not hold (it names 127.0.0.1 and localhost).
    name = socket.gethostname()
    if name != "localhost" and socket.gethostbyname(name) == "127.0.0.1":
        cases.append(("a hostname the certificate does not name", f"kafka://{name}:{sf.brokers[0].port}", alice, *tls))
    return cases


def test_wrong_secured_settings_are_refused_naming_the_cause_not_after_a_timeout(secure_kafka, tmp_path):
    sf, ny = secure_kafka["sanfrancisco"], secure_kafka["newyork"]
    # The right settings first, in this process: a later wrong one on the same brokers is asked again.
    Clusters(str(tmp_path / "right")).add("sf", url=f"kafka://{sf.bootstrap}", settings=sf.settings("admin"))
    took = {}
    for case, url, settings, kind, line in wrong_settings(sf, ny):
        clusters = Clusters(str(tmp_path / case.replace(" ", "-")))
        began = time.monotonic()
        with pytest.raises(kind) as refused:
            clusters.add("sf", url=url, settings=settings)
        took[case] = time.monotonic() - began
        message = str(refused.value)
        assert "\n" not in message and "unreachable" not in message, (case, message)
        assert message.startswith(line) or message.startswith(f"cluster sf: {line}"), (case, message)
        assert clusters.list() == [], case
    # How long each took is printed, not asserted (0.0-0.4 s quiet; a loaded CI machine took longer): a
    # wrong setting that waited for the probe's bound would say "unreachable", refused above.
    print(" ".join(f"{case}: {seconds:.1f} s;" for case, seconds in took.items()))
    # A closed port or a silent broker is 'unreachable' after the probe's bound (versions.ANSWER_SECONDS):
    # test_kafka_store and tests/unit/test_kafka_refusals cover them.


def test_the_cli_says_authentication_failed_in_one_line_and_exits_1(sf, tmp_path):
    settings = tmp_path / "alice.properties"
    settings.write_text(sf.properties_file("alice").read_text().replace("sasl.password=", "sasl.password=x"))
    env = {k: v for k, v in os.environ.items() if k != "STREAMREP_USER"}
    began = time.monotonic()
    result = subprocess.run(
        [str(Path(sys.executable).parent / "streamrep"), "cluster", "add", "-name", "sf"]
        + ["-url", f"kafka://{sf.bootstrap}", "-configfile", str(settings)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        env={**env, "STREAMREP_HOME": str(tmp_path / "home")},
    )
    print(f"cluster add with a wrong password: {time.monotonic() - began:.1f} s")  # the time is not asserted
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("streamrep: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "authentication failed: SASL authentication error: " in result.stderr
    assert "as User:alice" in result.stderr


def test_a_missing_acl_names_the_principal_the_operation_and_the_resource(secure_kafka, tmp_path):
    """alice may administer streamrep's cluster (its ACE), but Kafka lets only the administrator and the
    gateway write the catalog: the broker's refusal names what alice lacks, not a failed transaction."""
    sf = secure_kafka["sanfrancisco"]
    namespace = f"t{uuid.uuid4().hex[:10]}"

    def api(principal: str) -> StreamAdmin:
        clusters = Clusters(str(tmp_path / principal))
        settings = {k: v for k, v in sf.settings(principal).items() if k != "bootstrap.servers"}
        clusters.add("sf", url=f"kafka://{sf.bootstrap}", settings={**settings, "streamrep.namespace": namespace})
        return StreamAdmin(clusters)

    api("admin").set_cluster_ace("u:admin | u:alice", "sf")
    began = time.monotonic()
    with pytest.raises(PermissionDenied) as refused:
        api("alice").create_stream("/mapr/sf/orders")
    print(f"refused in {time.monotonic() - began:.1f} s")  # by the broker's answer, not a timeout: not asserted
    assert str(refused.value) == (
        f"cluster sf: principal User:alice lacks WRITE on transactional ids _streamrep.{namespace}.* "
        "(cannot start a transaction)"
    )
