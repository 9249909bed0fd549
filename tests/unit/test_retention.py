"""Retention (ttl) is one routine on every path, and a producer is told "failed" only when
nothing was written. Real embedded clusters, the in-process gateway, the real CLI entry point."""

from __future__ import annotations

import io
import os

import pytest

from streamrep.cli.main import run
from streamrep.client.catalog import now_ms
from streamrep.client.consumer import Consumer
from streamrep.client.producer import Producer
from streamrep.errors import CorruptStore, InvalidArgument
from streamrep.replication.gateway import Gateway

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
HOUR_MS = 3600 * 1000


def produce(admin, topic, *values, timestamp=None):
    with Producer(admin) as producer:
        for value in values:
            producer.send(topic, value, timestamp=timestamp, partition=0)


def test_topic_info_and_consume_fromstart_agree_on_the_first_offset(admin):
    # Out of order timestamps: retention drops the oldest messages up to the first live one, as a
    # log does; a consumer then reads every message still held, old or not.
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    old = now_ms() - 2 * HOUR_MS
    produce(admin, SF + ":t", "old0", "old1", timestamp=old)
    produce(admin, SF + ":t", "fresh2")
    produce(admin, SF + ":t", "old3", timestamp=old)
    produce(admin, SF + ":t", "fresh4")
    admin.edit_stream(SF, ttl=3600)
    [info] = admin.topic_info(SF, "t")
    got = Consumer(SF + ":t", from_start=True, admin=admin).poll()
    assert (info.first, info.last, info.messages) == (2, 4, 3)
    assert [m.offset for m in got] == [2, 3, 4]
    assert [t.messages for t in admin.list_topics(SF)] == [3]


def test_a_replica_applies_its_own_ttl(admin):
    admin.create_stream(SF, ttl=0)  # the source keeps everything
    admin.create_topic(SF, "t", 1)
    admin.create_stream(NY, copymetafrom=SF, ttl=3600)  # the replica keeps an hour
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    produce(admin, SF + ":t", "old0", "old1", timestamp=now_ms() - 2 * HOUR_MS)
    produce(admin, SF + ":t", "fresh2")
    Gateway(admin, "newyork", "gw1").run_once()
    ny, sf = admin.entry(NY), admin.entry(SF)
    # read from the stores: retention ran when the gateway applied, not only when asked
    assert admin.store(admin.path(NY)).offsets(ny.uuid, "t", 0) == (2, 3)
    assert admin.store(admin.path(SF)).offsets(sf.uuid, "t", 0) == (0, 3)


def test_copymetafrom_copies_ttl(admin):
    admin.create_stream(SF, ttl=60)
    admin.create_stream(NY, copymetafrom=SF)
    assert admin.entry(NY).meta.ttl == 60


# -- a producer is told "failed" only when nothing was written ------------------------------------
@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-1", ""])
def test_bad_sync_timeout_is_a_one_line_user_error(admin, monkeypatch, value):
    monkeypatch.setenv("STREAMREP_SYNC_TIMEOUT", value)
    with pytest.raises(InvalidArgument, match="STREAMREP_SYNC_TIMEOUT must be a number of seconds"):
        Producer(admin)
    monkeypatch.setenv("STREAMREP_USER", "alice")
    admin.create_stream(SF)
    out, err = io.StringIO(), io.StringIO()
    code = run(["produce", "-path", SF + ":t"], out, err, io.StringIO("a\n"))
    assert (
        code == 1
        and err.getvalue().startswith("streamrep: error: STREAMREP_SYNC_TIMEOUT")
        and err.getvalue().count("\n") == 1
    )
    with pytest.raises(InvalidArgument, match="sync_timeout"):
        Producer(admin, sync_timeout=float("nan"))


def break_cluster(admin, name):
    """Make cluster ``name``'s store unreadable, as a disk failure would."""
    admin.clusters.close()
    path = admin.clusters.get(name).url.split(":", 1)[1]
    for suffix in ("-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    with open(path, "wb") as f:
        f.write(b"not a database" * 100)


def test_a_failure_after_the_commit_is_a_warning_not_an_error(admin):
    # A synchronous replica whose cluster fails: the messages are written on the source, so
    # flush must not tell the producer to send them again.
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY, synchronous=True)
    admin.add_upstream(NY, SF)
    break_cluster(admin, "newyork")
    producer = Producer(admin, sync_timeout=0)
    producer.send(SF + ":t", "a", partition=0)
    acked = producer.flush()
    assert [parts for parts in acked.values()] == [{0: (0, 1)}]
    [warning] = producer.warnings
    assert "written" in warning and "newyork" in warning
    sf = admin.entry(SF)
    assert [m.value for m in admin.store(admin.path(SF)).read(sf.uuid, "t", 0, 0, 10)] == [b"a"]


def test_a_flush_that_fails_part_way_names_what_was_written_and_never_resends_it(admin):
    admin.create_stream(SF, ttl=0)
    admin.create_stream(NY, ttl=0)
    producer = Producer(admin)
    producer.send(SF + ":t", "a", partition=0)
    producer.send(NY + ":t", "b", partition=0)
    break_cluster(admin, "newyork")
    # The broken store is corrupt: CorruptStore, the user's to fix (a retry after a restore is safe).
    with pytest.raises(CorruptStore, match=f"the 1 messages to {SF}:t were written"):
        producer.flush()
    with pytest.raises(CorruptStore) as again:  # a retry resends only what was not written
        producer.flush()
    assert "were written" not in str(again.value)
    sf = admin.entry(SF)
    assert [m.value for m in admin.store(admin.path(SF)).read(sf.uuid, "t", 0, 0, 10)] == [b"a"]


def test_cli_produce_reports_what_it_wrote_and_warns_after_the_commit(admin, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_SYNC_TIMEOUT", "0")
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY, synchronous=True)
    admin.add_upstream(NY, SF)
    break_cluster(admin, "newyork")
    out, err = io.StringIO(), io.StringIO()
    code = run(["produce", "-path", SF + ":t", "-json"], out, err, io.StringIO("a\nb\n"))
    assert code == 0
    assert err.getvalue().startswith("streamrep: warning: ") and err.getvalue().count("\n") == 1
    assert '"messages": 2' in out.getvalue()
