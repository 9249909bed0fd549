"""Issue 18 part 6: a replica's MapR network options, ``-throttle``, ``-networkencryption`` and
``-networkcompression``: their values, where they are recorded and listed, and which clusters'
connections encryption needs."""

from __future__ import annotations

import json

import pytest

from streamrep.client.config import ClusterInfo
from streamrep.errors import AlreadyExists, InvalidArgument, NotFound
from streamrep.model import network
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.replication import ReplicaLink, ReplicaState
from streamrep.replication.gateway import Gateway
from streamrep.replication.setup import autosetup, ensure_replica

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
ON_KAFKA = pytest.mark.backends("kafka")


@pytest.fixture
def pair(admin):
    admin.create_stream(SF)
    admin.create_topic(SF, "t")
    admin.create_stream(NY, copymetafrom=SF)
    return admin


def row(admin) -> dict:
    (only,) = admin.list_replicas(SF)
    return {name: getattr(only, name) for name in ("throttle", "networkencryption", "networkcompression")}


# -- the values (model/network.py) ---------------------------------------------------------------
@pytest.mark.parametrize(
    "given, stored, codec",
    [
        (None, "lz4", "lz4"),
        ("off", "off", "none"),
        ("LZ4", "lz4", "lz4"),
        ("zlib", "zlib", "gzip"),
        ("gzip", "gzip", "gzip"),
        ("snappy", "snappy", "snappy"),
        ("zstd", "zstd", "zstd"),
    ],
)
def test_compression_values_and_their_kafka_codecs(given, stored, codec):
    assert network.parse_network_compression(given) == stored
    assert network.kafka_codec(stored) == codec


def test_lzf_and_unknown_compressions_are_refused_in_one_line():
    with pytest.raises(InvalidArgument, match="Kafka has no LZF codec"):
        network.parse_network_compression("lzf")
    for bad in ("foo", "", 4, True):
        with pytest.raises(InvalidArgument, match="invalid networkcompression") as raised:
            network.parse_network_compression(bad)
        assert "\n" not in str(raised.value)


def test_flags_take_true_or_false_only():
    assert network.parse_flag("throttle", None) is False
    assert network.parse_flag("throttle", "True") is True  # a rendered Airflow template
    assert network.parse_flag("throttle", False) is False
    for bad in ("maybe", 2, 1, "2", ""):
        with pytest.raises(InvalidArgument, match=r"invalid throttle .*: true or false"):
            network.parse_flag("throttle", bad)


def kafka(name: str, protocol: str | None = None) -> ClusterInfo:
    settings = {} if protocol is None else {"security.protocol": protocol}
    return ClusterInfo(name, "kafka://127.0.0.1:9092", settings)


def test_encryption_needs_tls_on_every_kafka_cluster_the_gateway_uses():
    local = ClusterInfo("local", "embedded:/tmp/x.db")
    assert network.encryption_refusal(local, local) is None  # no network at all
    assert network.encryption_refusal(kafka("sf", "SSL"), kafka("ny", "sasl_ssl")) is None
    assert network.encryption_refusal(kafka("sf", "SSL"), local) is None
    source_plain = network.encryption_refusal(kafka("sf"), kafka("ny", "SSL"))
    assert "reads the source on cluster sf with security.protocol=PLAINTEXT" in source_plain
    replica_plain = network.encryption_refusal(kafka("sf", "SSL"), kafka("ny", "SASL_PLAINTEXT"))
    assert "writes the replica on cluster ny with security.protocol=SASL_PLAINTEXT" in replica_plain
    assert "\n" not in replica_plain


# -- recorded and listed -------------------------------------------------------------------------
def test_replica_add_records_and_lists_the_options(pair):
    link = pair.add_replica(SF, NY, throttle=True, networkencryption="true", networkcompression="zlib")
    assert (link.throttle, link.networkencryption, link.networkcompression) == (True, True, "zlib")
    assert row(pair) == {"throttle": True, "networkencryption": True, "networkcompression": "zlib"}
    assert pair.entry(SF).replicas[0] == link  # stored in the catalog, not just returned


def test_replica_add_defaults_are_maprs(pair):
    pair.add_replica(SF, NY)
    assert row(pair) == {"throttle": False, "networkencryption": False, "networkcompression": "lz4"}


def test_bad_values_register_nothing(pair):
    for options, text in (
        ({"networkcompression": "foo"}, "invalid networkcompression 'foo'"),
        ({"networkencryption": "maybe"}, "invalid networkencryption 'maybe'"),
        ({"throttle": 2}, "invalid throttle 2"),
        ({"networkcompression": "lzf"}, "Kafka has no LZF codec"),
    ):
        with pytest.raises(InvalidArgument, match=text):
            pair.add_replica(SF, NY, **options)
    assert pair.entry(SF).replicas == ()


def test_a_link_written_before_the_options_loads_as_it_behaved(pair):
    """No throttle, no encryption check, uncompressed writes: what its gateway did."""
    pair.add_replica(SF, NY)
    store = pair.store(pair.path(SF))

    def strip(doc):
        for link in doc["replicas"]:
            for name in ("throttle", "networkencryption", "networkcompression"):
                del link[name]
        return doc

    store.catalog_update(STREAM_KIND, "/activity", strip)
    assert row(pair) == {"throttle": False, "networkencryption": False, "networkcompression": "off"}
    assert ReplicaLink.from_dict({"path": NY}).networkcompression == "off"


def test_a_retry_accepts_the_same_options_and_refuses_others(pair):
    ensure_replica(pair, SF, NY, networkcompression="zstd", throttle=True)
    link, added = ensure_replica(pair, SF, NY, networkcompression="ZSTD", throttle="true")
    assert not added and link.networkcompression == "zstd"
    with pytest.raises(
        AlreadyExists,
        match="with paused=true synchronous=false networkcompression=zstd, "
        "not paused=true synchronous=false networkcompression=lz4",
    ):
        ensure_replica(pair, SF, NY, throttle=True)


def test_autosetup_gives_both_links_of_multimaster_the_options(pair):
    pair.delete_stream(NY)
    done = autosetup(pair, SF, NY, multimaster=True, throttle=True, networkencryption=True, networkcompression="snappy")
    assert (done.throttle, done.networkencryption, done.networkcompression) == (True, True, "snappy")
    for source, replica in ((SF, NY), (NY, SF)):
        (link,) = pair.entry(source).replicas
        assert (link.path, link.throttle, link.networkencryption, link.networkcompression) == (
            replica,
            True,
            True,
            "snappy",
        )


def test_autosetup_refuses_a_bad_option_before_creating_anything(pair):
    pair.delete_stream(NY)
    with pytest.raises(InvalidArgument, match="Kafka has no LZF codec"):
        autosetup(pair, SF, NY, networkcompression="lzf")
    with pytest.raises(NotFound):
        pair.entry(NY)


# -- encryption over Kafka -----------------------------------------------------------------------
def set_protocol(home, protocol: str | None, *names: str) -> None:
    """Change clusters' security.protocol in the registry, as an administrator editing it would.
    Open stores keep their connections: only what the settings say changes."""
    with open(home.registry_path) as f:
        data = json.load(f)
    for name in names:
        settings = data["clusters"][name].setdefault("settings", {})
        settings.pop("security.protocol", None)
        if protocol is not None:
            settings["security.protocol"] = protocol
    with open(home.registry_path, "w") as f:
        json.dump(data, f)


@ON_KAFKA
def test_encryption_over_plaintext_kafka_is_refused_at_add_and_autosetup(pair, home):
    with pytest.raises(
        InvalidArgument,
        match="the gateway reads the source on cluster sanfrancisco with "
        "security.protocol=PLAINTEXT; set it to SSL or SASL_SSL",
    ):
        pair.add_replica(SF, NY, networkencryption=True)
    assert pair.entry(SF).replicas == ()
    pair.add_replica(SF, NY, networkencryption=False)  # plaintext is fine when not asked for
    set_protocol(home, "SSL", "sanfrancisco")
    with pytest.raises(InvalidArgument, match="writes the replica on cluster newyork"):
        autosetup(pair, SF, "/mapr/newyork/other", networkencryption=True)
    with pytest.raises(NotFound):
        pair.entry("/mapr/newyork/other")  # refused before anything was created


@ON_KAFKA
def test_gateway_refuses_an_encrypted_replica_once_its_connection_is_plaintext(pair, home):
    set_protocol(home, "SSL", "sanfrancisco", "newyork")
    pair.add_replica(SF, NY, networkencryption=True)
    pair.add_upstream(NY, SF)
    from streamrep.client import Producer

    with Producer(pair) as producer:
        producer.send(f"{SF}:t", b"one")
    set_protocol(home, None, "newyork")  # the replica's cluster went back to plaintext
    gateway = Gateway(pair, "newyork", "gw1")
    assert gateway.run_once() == 0
    (listed,) = pair.list_replicas(SF)
    assert listed.state == ReplicaState.UNEXPECTED.value
    assert "writes the replica on cluster newyork with security.protocol=PLAINTEXT" in listed.errors
    assert "\n" not in listed.errors
    set_protocol(home, "SASL_SSL", "newyork")  # encrypted again: it replicates, the error is cleared
    assert gateway.run_once() == 1
    (listed,) = pair.list_replicas(SF)
    assert (listed.state, listed.errors) == (ReplicaState.REPLICATING.value, None)
