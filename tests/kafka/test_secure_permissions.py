"""On the secured three-broker clusters (SASL_SSL, SCRAM-SHA-512, StandardAuthorizer), the broker holds
streamrep's ACEs: plain confluent-kafka clients, each with one user's credentials, are refused by the
broker exactly where the permission table of docs/user-guide.md refuses, and allowed where it allows. streamrep's own
commands act as the authenticated principal.

The streams are administered by ``admin`` (the super user streamrep administers with); ``gateway`` is
the service principal the gateways run as; ``alice`` and ``carol`` are in group ``eng`` by the
cluster's ``streamrep.group.eng`` setting; ``bob`` is in none.
"""

from __future__ import annotations

import io
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from integration.replication_helpers import drain
from streamrep.cli.main import run
from streamrep.client import Clusters, StreamAdmin
from streamrep.errors import PermissionDenied
from streamrep.model.ace import Identity
from streamrep.replication.gateway import Gateway

pytestmark = [pytest.mark.kafka, pytest.mark.secure_kafka]

PRINCIPALS = ("admin", "gateway", "alice", "bob", "carol")
SF = "/mapr/sanfrancisco/orders"
NY = "/mapr/newyork/orders"
REFUSED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED}


class World:
    """Every principal's registry of both secured clusters, under one fresh namespace."""

    def __init__(self, secure_kafka, root: Path):
        self.kafka = secure_kafka
        self.namespace = f"t{uuid.uuid4().hex[:10]}"
        self.homes: dict[str, Clusters] = {}
        for principal in PRINCIPALS:  # admin first: it makes the internal topics and streamrep's ACLs
            clusters = Clusters(str(root / principal))
            for name, cluster in secure_kafka.items():
                settings = {k: v for k, v in cluster.settings(principal).items() if k != "bootstrap.servers"}
                clusters.add(
                    name,
                    url=f"kafka://{cluster.bootstrap}",
                    settings={**settings, "streamrep.namespace": self.namespace, "streamrep.group.eng": "alice,carol"},
                )
            self.homes[principal] = clusters

    def admin(self, principal: str = "admin") -> StreamAdmin:
        return StreamAdmin(self.homes[principal])

    def kafka_topic(self, stream: str, topic: str) -> str:
        api = self.admin()
        sp = api.path(stream)
        return api.store(sp).native_topic(api.entry(sp).uuid, topic)

    def cluster(self, stream: str):
        return self.kafka[StreamAdmin(self.homes["admin"]).path(stream).cluster]

    def produce(self, principal: str, stream: str, topic: str, value: bytes = b"x") -> int | None:
        """A plain confluent-kafka producer as ``principal``: None if delivered, else Kafka's error code."""
        producer = Producer({**self.cluster(stream).settings(principal), "message.timeout.ms": 20000})
        outcome: list = []
        producer.produce(
            self.kafka_topic(stream, topic), value, partition=0, on_delivery=lambda err, msg: outcome.append(err)
        )
        producer.flush(30)
        assert outcome, "no delivery report within 30 s"
        return None if outcome[0] is None else outcome[0].code()

    def consume(self, principal: str, stream: str, topic: str, group: str, commit: bool = False):
        """A plain consumer as ``principal``, subscribed in ``group`` and reading from the start: the
        values read (and committed, with ``commit``), or Kafka's error code."""
        consumer = Consumer(
            {
                **self.cluster(stream).settings(principal),
                "group.id": f"{self.namespace}.{group}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            name = self.kafka_topic(stream, topic)
            consumer.subscribe([name])
            values: list[bytes] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error():
                    return msg.error().code()
                if msg is not None:
                    values.append(msg.value())
                elif consumer.assignment():  # read to the end of the partition as it is now
                    high = consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=10)[1]
                    if consumer.position([TopicPartition(name, 0)])[0].offset >= high or high == 0:
                        break
            if commit:
                try:
                    consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    return exc.args[0].code()
            return values
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def world(secure_kafka, tmp_path_factory) -> World:
    world = World(secure_kafka, tmp_path_factory.mktemp("secure-homes"))
    api = world.admin()
    api.create_stream(SF, produceperm="u:alice", consumeperm="g:eng")
    api.create_topic(SF, "t", 1)
    return world


def test_the_broker_refuses_plain_clients_where_the_aces_refuse(world):
    assert world.produce("alice", SF, "t", b"from-alice") is None  # produceperm u:alice
    assert world.produce("bob", SF, "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert world.produce("carol", SF, "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED  # consumeperm only
    assert world.consume("carol", SF, "t", "g1") == [b"from-alice"]  # g:eng, mapped in the settings
    assert world.consume("bob", SF, "t", "g1") in REFUSED
    # committing a group: allowed with the topic's READ
    assert world.consume("carol", SF, "t", "g1", commit=True) == [b"from-alice"]


def test_an_edit_moves_the_brokers_acls_with_the_ace(world):
    api = world.admin()
    api.create_stream("/mapr/sanfrancisco/edited", produceperm="u:alice", consumeperm="u:alice")
    api.create_topic("/mapr/sanfrancisco/edited", "t", 1)
    assert world.produce("bob", "/mapr/sanfrancisco/edited", "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    api.edit_stream("/mapr/sanfrancisco/edited", produceperm="p & !u:alice", consumeperm="p")
    assert world.produce("bob", "/mapr/sanfrancisco/edited", "t", b"from-bob") is None
    assert world.produce("carol", "/mapr/sanfrancisco/edited", "t", b"from-carol") is None
    assert world.produce("alice", "/mapr/sanfrancisco/edited", "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert world.consume("bob", "/mapr/sanfrancisco/edited", "t", "g2") == [b"from-bob", b"from-carol"]
    prefix = world.kafka_topic("/mapr/sanfrancisco/edited", "")
    api.delete_stream("/mapr/sanfrancisco/edited")
    admin = AdminClient(world.kafka["sanfrancisco"].settings("admin"))
    left = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            prefix,
            ResourcePatternType.PREFIXED,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=15,
    ).result()
    assert left == []  # a deleted stream leaves no grant behind for a stream created at its path later


def test_a_one_way_replica_is_written_by_the_gateway_alone(world):
    api = world.admin()
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    api.set_gateways("newyork", "g1", cluster="sanfrancisco")
    sent = [f"m-{i}".encode() for i in range(20)]
    for value in sent:
        assert world.produce("alice", SF, "t", value) is None
    gateway = Gateway(world.admin("gateway"), "newyork", "g1")
    drain(gateway)
    assert world.consume("carol", NY, "t", "g3")[-20:] == sent  # the gateway principal wrote the replica
    # alice holds produceperm on the replica (copied), but a one-way replica is read-only
    assert world.produce("alice", NY, "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert world.produce("bob", NY, "t") == KafkaError.TOPIC_AUTHORIZATION_FAILED
    api.remove_upstream(NY, SF)  # no longer a replica: produceperm's WRITE comes back
    assert world.produce("alice", NY, "t") is None


def test_streamrep_itself_acts_as_the_authenticated_principal(world, monkeypatch):
    def cli(principal: str, *argv: str, user: str | None = None) -> tuple[int, str]:
        monkeypatch.setenv("STREAMREP_HOME", world.homes[principal].home)
        if user:
            monkeypatch.setenv("STREAMREP_USER", user)
        else:
            monkeypatch.delenv("STREAMREP_USER", raising=False)
        out, err = io.StringIO(), io.StringIO()
        status = run(list(argv), out=out, err=err, stdin=io.StringIO("x\n"))
        return status, err.getvalue()

    status, err = cli("bob", "produce", "-path", f"{SF}:t")
    assert status != 0 and err.count("\n") == 1 and "user bob does not have produceperm" in err
    status, err = cli("bob", "stream", "info", "-path", SF, user="alice")
    assert status != 0 and "authenticates this client as bob; acting as alice is refused" in err
    # a user principal may not change the catalog: the broker refuses, in one line, and nothing changes
    status, err = cli("alice", "stream", "create", "-path", "/mapr/sanfrancisco/mine")
    assert status != 0 and err.count("\n") == 1 and "authoriz" in err.lower(), err
    assert "/mine" not in [e.path for e in world.admin().list_streams("sanfrancisco")]
    with pytest.raises(PermissionDenied, match="authenticates this client as alice; acting as carol"):
        StreamAdmin(world.homes["alice"], Identity("carol")).caller("sanfrancisco")
