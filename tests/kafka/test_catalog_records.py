"""Records streamrep did not write in its internal topics (issue 29, B1): anyone allowed to write
``_streamrep.<ns>.catalog``, marks or syncs can write anything there. Such a record is skipped and
reported once, naming the topic, partition and offset; the records around it still count, the
installation keeps working, and another installation on the same brokers never notices. A record
of a newer format holds back only what it names (``store/kafka/folds.py``)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer as KafkaProducer

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import Clusters
from streamrep.errors import Conflict, CorruptStore
from streamrep.model.ace import Identity
from streamrep.store.kafka import KafkaStore, keys
from streamrep.store.kafka.client import internal_prefix

pytestmark = pytest.mark.kafka

ALICE = Identity(user="alice", groups=frozenset({"eng"}))
STREAMREP_EXE = os.path.join(os.path.dirname(sys.executable), "streamrep")
FIRST, SECOND = "/mapr/kc/first", "/mapr/kc/second"
NEWER = [("streamrep.format", b"%d" % (keys.FORMAT + 1))]  # the header a later format writes


def _admin(home, bootstrap: str, namespace: str) -> StreamAdmin:
    clusters = Clusters(str(home))
    if "kc" not in {c.name for c in clusters.list()}:
        clusters.add("kc", url=f"kafka://{bootstrap}", settings={"streamrep.namespace": namespace})
    return StreamAdmin(clusters, ALICE)


def _write(bootstrap: str, topic: str, records) -> list[int]:
    """Write ``(key, value[, headers])`` records with a plain producer; their offsets."""
    producer = KafkaProducer({"bootstrap.servers": bootstrap})
    offsets: list[int] = []  # a compacted topic refuses a record without a key: the broker keeps that out

    def delivered(err, msg) -> None:
        assert err is None, err
        offsets.append(msg.offset())

    for key, value, *headers in records:
        producer.produce(
            topic,
            key=key.encode() if isinstance(key, str) else key,
            value=json.dumps(value).encode() if isinstance(value, dict) else value,
            headers=headers[0] if headers else None,
            on_delivery=delivered,
        )
    assert producer.flush(30) == 0
    return sorted(offsets)


def _warned(caplog, topic: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and topic in r.getMessage()]


@pytest.fixture
def installation(tmp_path, kafka_broker, kafka_namespace):
    """An installation with streams FIRST and SECOND (topic t), and its catalog topic."""
    ns = kafka_namespace()
    admin = _admin(tmp_path / "home", kafka_broker, ns)
    for path in (FIRST, SECOND):
        admin.create_stream(path, produceperm="u:alice", consumeperm="u:alice")
        admin.create_topic(path, "t", 1)
    yield admin, ns, internal_prefix(ns)
    admin.clusters.close()


def _bad_catalog_records(path: str) -> list[tuple]:
    doc = keys.catalog_key("stream", path)
    return [
        ("no-separator", b"{}"),  # the audit's record: every command exited 3
        (b"\xff\xfe\x1f\xff", b"{}"),
        (doc, b"{not json"),
        (doc, b"[1, 2]"),
        (doc, {"uuid": 5, "path": path}),  # JSON of the wrong shape
        (doc, {"uuid": "u", "path": path, "replicas": [{"path": "/x", "state": "nonsense"}]}),
        (doc, b"[" * 900_000),  # huge, and nested too deep to parse
        (keys.catalog_key("cluster", "ace"), {"adminperm": 7}),
        (keys.catalog_key("gateways", "elsewhere"), {"gateways": "g1"}),
        (doc, b"{}", [("streamrep.format", b"two")]),
    ]


def test_bad_catalog_records_are_skipped_reported_once_and_the_rest_still_counts(
    installation, tmp_path, kafka_broker, caplog
):
    admin, ns, prefix = installation
    catalog = prefix + "catalog"
    caplog.set_level(logging.WARNING)
    bad = _write(kafka_broker, catalog, _bad_catalog_records("/third"))
    admin.edit_stream(SECOND, ttl=3600)  # a record after the bad ones
    third = "/mapr/kc/third"
    admin.create_stream(third)  # its key's bad records change nothing

    for _ in range(2):  # a new store object each time: each folds the catalog from its start
        fresh = _admin(tmp_path / "home", kafka_broker, ns)
        assert sorted(e.path for e in fresh.list_streams("kc")) == ["/first", "/second", "/third"]
        assert fresh.entry(SECOND).meta.ttl == 3600
        assert fresh.cluster_ace("kc") is None  # as before the record that named an int its adminperm
        fresh.clusters.close()
    warned = _warned(caplog, catalog)
    assert len(warned) == len(bad)  # once per process, however many stores fold them
    for offset, line in zip(bad, sorted(warned, key=lambda w: int(w.split(" offset ")[1].split(":")[0])), strict=True):
        assert f"{catalog} partition 0 offset {offset}: skipped, not a record of this streamrep: " in line
        assert "\n" not in line
    assert any("is no catalog key" in w for w in warned)
    assert any("nested too deep" in w for w in warned)
    assert any("its uuid is int, not str" in w for w in warned)


def test_a_bad_record_in_one_installations_catalog_never_reaches_another(
    installation, tmp_path, kafka_broker, kafka_namespace
):
    _, _, prefix = installation
    _write(kafka_broker, prefix + "catalog", [*_bad_catalog_records("/first"), ("x", b"{}", NEWER)])
    other = _admin(tmp_path / "other", kafka_broker, kafka_namespace())
    other.create_stream("/mapr/kc/elsewhere")  # folds every installation's catalog (the prefix check)
    assert [e.path for e in other.list_streams("kc")] == ["/elsewhere"]
    other.clusters.close()


def test_bad_marks_and_offset_syncs_records_are_skipped(installation, kafka_broker, caplog):
    admin, _, prefix = installation
    caplog.set_level(logging.WARNING)
    first, second = admin.entry(FIRST).uuid, admin.entry(SECOND).uuid
    store = admin.store(admin.path(FIRST))
    store.apply(first, "t", 0, [], {"p|src|t|0": 5}, {"p|src|t|0": None}, source="src|t|0", syncs=[])
    mark = keys.mark_key(first, "p|src|t|0")
    bad_marks = _write(
        kafka_broker,
        prefix + "marks",
        [("no-separator", b"1"), (mark, b"five"), (mark, b" 7 "), (mark, b"\xff")],
    )
    sync = keys.sync_key(first, "src|t|0", 0)
    bad_syncs = _write(
        kafka_broker,
        prefix + "syncs",
        [
            (keys.sync_key(first, "src|t|0", 0)[:-1] + "zero", b"[0, 0, 1]"),
            (sync, b"[0, 0]"),
            (sync, b'[0, "0", 1]'),
            (sync, b"[0, true, 1]"),
            (sync, b"{"),
            (first, b"[0, 0, 1]"),
        ],
    )
    _write(kafka_broker, prefix + "syncs", [(sync, keys.sync_value(0, 3, 2))])  # a good record after them

    fresh = KafkaStore("kc", kafka_broker, {"streamrep.namespace": store.namespace})
    try:
        assert fresh.marks(first) == {"p|src|t|0": 5}
        assert fresh.offset_syncs(first, "src|t|0") == [(0, 0, 3, 2)]
        # the compare-and-set reads the right state: an apply expecting 5 moves the mark on
        fresh.apply(first, "t", 0, [], {"p|src|t|0": 9}, {"p|src|t|0": 5})
        assert fresh.marks(first) == {"p|src|t|0": 9}
        assert fresh.marks(second) == {}
    finally:
        fresh.close()
    assert len(_warned(caplog, prefix + "marks")) == len(bad_marks)
    assert len(_warned(caplog, prefix + "syncs")) == len(bad_syncs)


def test_a_newer_formats_record_holds_back_only_what_it_names(installation, tmp_path, kafka_broker, caplog):
    admin, ns, prefix = installation
    caplog.set_level(logging.WARNING)
    first, second = admin.entry(FIRST).uuid, admin.entry(SECOND).uuid
    newer_doc = {**admin.store(admin.path(FIRST)).catalog_get("stream", "/first"), "shiny": True}
    [at] = _write(kafka_broker, prefix + "catalog", [(keys.catalog_key("stream", "/first"), newer_doc, NEWER)])
    _write(kafka_broker, prefix + "marks", [(keys.mark_key(first, "p|src|t|0"), b"\x00\x07", NEWER)])

    fresh = _admin(tmp_path / "home", kafka_broker, ns)
    refused = rf"cluster kc: catalog document stream /first was written by a newer streamrep \(format 3, {prefix}catalog offset {at}\); upgrade streamrep"
    with pytest.raises(CorruptStore, match=refused):
        fresh.stream_info(FIRST)
    with pytest.raises((CorruptStore, Conflict)):  # its Kafka topic is still there: Conflict comes first
        fresh.create_stream(FIRST)
    with pytest.raises(CorruptStore, match=refused):  # never written over
        fresh.store(fresh.path(FIRST)).catalog_update("stream", "/first", lambda doc: {"uuid": "u", "path": "/first"})
    with pytest.raises(CorruptStore, match=refused):
        fresh.edit_stream(FIRST, ttl=60)
    assert [e.path for e in fresh.list_streams("kc")] == ["/second"]  # never its older version
    fresh.edit_stream(SECOND, ttl=60)
    store = fresh.store(fresh.path(SECOND))
    with pytest.raises(CorruptStore, match=f"the replication marks of stream {first} was written by a newer"):
        store.marks(first)
    with pytest.raises(CorruptStore, match="newer streamrep"):
        store.apply(first, "t", 0, [], {"p|src|t|0": 1}, {"p|src|t|0": None})
    store.apply(second, "t", 0, [], {"p|src|t|0": 1}, {"p|src|t|0": None})
    assert store.marks(second) == {"p|src|t|0": 1}
    with pytest.raises(ValueError, match="its uuid is int"):  # what a fold would skip is never written
        store.catalog_update("stream", "/third", lambda _: {"uuid": 5, "path": "/third"})
    assert store.catalog_get("stream", "/third") is None
    fresh.clusters.close()
    assert any(f"offset {at}: written by a newer streamrep (format 3" in w for w in _warned(caplog, prefix + "catalog"))


def test_the_cli_warns_once_in_one_line_and_works(installation, tmp_path, kafka_broker):
    admin, ns, prefix = installation
    [offset] = _write(kafka_broker, prefix + "catalog", [("no-separator", b"{}")])
    env = {**os.environ, "STREAMREP_HOME": str(tmp_path / "home"), "STREAMREP_USER": "alice"}
    started = time.monotonic()
    ran = subprocess.run(
        [STREAMREP_EXE, "stream", "list", "-cluster", "kc", "-json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    print(f"CLI took {time.monotonic() - started:.1f} s")
    assert ran.returncode == 0, ran.stderr
    assert [row["path"] for row in json.loads(ran.stdout)["data"]] == [FIRST, SECOND]
    assert ran.stderr.splitlines() == [
        f"streamrep: {prefix}catalog partition 0 offset {offset}: skipped, not a record of this streamrep: "
        "the key 'no-separator' is no catalog key (2 fields)"
    ]
