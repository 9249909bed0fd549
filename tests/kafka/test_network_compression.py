"""Issue 18 part 6 on a real broker: a replica's ``-networkcompression`` is the codec its
gateway's records are written with, read back from the broker's own log segments by Kafka's
``DumpLogSegments`` (``compresscodec: ...`` per record batch)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from streamrep.client import Producer
from streamrep.model.message import Message
from streamrep.replication.gateway import Gateway

pytestmark = [pytest.mark.kafka, pytest.mark.backends("kafka")]
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
# Compressible: a codec that ran shrinks it, so the test also sees the codec was not a label only.
VALUE = b"replicated " * 200


def log_dir(bootstrap: str) -> Path:
    """The broker's data folder, as the broker itself reports it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    broker_id = str(next(iter(admin.list_topics(timeout=10).brokers)))
    resource = ConfigResource(ConfigResource.Type.BROKER, broker_id)
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    return Path(config["log.dirs"].value.split(",")[0])


def codecs(bootstrap: str, kafka_topic: str, partition: int = 0) -> list[str]:
    """``compresscodec`` of every data batch (not the transaction markers) in the partition's log."""
    folder = log_dir(bootstrap) / f"{kafka_topic}-{partition}"
    command = [
        "java",
        kafka_local.JVM_HEAP,
        "-cp",
        str(kafka_local.LIBS / "*"),
        "org.apache.kafka.tools.DumpLogSegments",
        "--files",
        *map(str, sorted(folder.glob("*.log"))),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    return [m.group(2) for m in re.finditer(r"isControl: (\w+) .*?compresscodec: (\w+)", out) if m.group(1) == "false"]


def replica_topic(admin, path: str) -> str:
    sp = admin.path(path)
    return admin.store(sp).native_topic(admin.entry(sp).uuid, "t")


@pytest.mark.parametrize("option, codec", [("zlib", "gzip"), ("zstd", "zstd"), (None, "lz4"), ("off", "none")])
def test_the_gateway_writes_the_replica_with_its_codec(admin, kafka_broker, option, codec):
    admin.create_stream(SF)
    admin.create_topic(SF, "t")
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY, networkcompression=option)
    admin.add_upstream(NY, SF)
    with Producer(admin) as producer:
        for _ in range(20):
            producer.send(f"{SF}:t", VALUE)
    assert Gateway(admin, "newyork", "gw1").run_once() == 20
    assert set(codecs(kafka_broker, replica_topic(admin, NY))) == {codec}


def test_a_new_codec_for_a_partition_gets_a_new_producer_and_stays_exactly_once(admin, kafka_broker):
    """The producer of a replica partition's transactional id is remade when its codec changes
    (its init fences the old one): each batch has its codec, and the marks still decide."""
    admin.create_stream(NY)
    admin.create_topic(NY, "t")
    stream = admin.entry(NY).uuid
    store = admin.store(admin.path(NY))
    store.apply(stream, "t", 0, [Message(VALUE)] * 5, {"m": 5}, {"m": None}, compression="lz4")
    store.apply(stream, "t", 0, [Message(VALUE)] * 5, {"m": 10}, {"m": 5}, compression="gzip")
    store.apply(stream, "t", 0, [Message(VALUE)] * 5, {"m": 15}, {"m": 10})  # None: the cached one serves
    assert codecs(kafka_broker, replica_topic(admin, NY)) == ["lz4", "gzip", "gzip"]
    assert store.marks(stream) == {"m": 15}
    assert store.offsets(stream, "t", 0)[1] >= 15
