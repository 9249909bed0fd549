"""``stream replica list`` tells the truth: paused, no live gateway, messages lost to the source's
retention; MapR's field names. Real embedded (and Kafka) clusters and the in-process gateway."""

from __future__ import annotations

import io
import json
import logging
import os
import time

import pytest

from streamrep.cli.main import run
from streamrep.cli.rows import replica_status_row
from streamrep.client.catalog import now_ms
from streamrep.client.producer import Producer
from streamrep.errors import PermissionDenied
from streamrep.model.message import Message
from streamrep.model.replication import loss_key, position_key
from streamrep.replication.apply import plan_apply
from streamrep.replication.copy import copy_stream
from streamrep.replication.gateway import HEARTBEAT_KIND, Gateway
from streamrep.replication.status import acknowledge_loss, replica_status

# On Kafka clusters too: states read from gateways, positions and retention; the CLI spellings
# and the catalog-only copy states are the same code on both backends.
ON_BOTH = pytest.mark.backends("embedded", "kafka")

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
HOUR_MS = 3600 * 1000

PAUSED = "REPLICA_STATE_PAUSED"
REPLICATING = "REPLICA_STATE_REPLICATING"
WAITING_FOR_GATEWAY = "REPLICA_STATE_WAITING_FOR_GATEWAY"
UNEXPECTED = "REPLICA_STATE_UNEXPECTED"


@pytest.fixture
def linked(admin):
    """SF (topic t, one partition, ttl 0) and its replica NY, agreed both ways."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin


def produce(admin, *values, timestamp=None):
    with Producer(admin) as producer:
        for value in values:
            producer.send(SF + ":t", value, timestamp=timestamp)


def row_of(admin):
    (row,) = replica_status(admin, SF)
    return row


def kill(gateway: Gateway) -> None:
    """What a killed gateway leaves: its last heartbeat, now older than the expiry."""
    stale = {"ts": time.time() - 10 * gateway.expiry, "host": "h", "pid": 1}
    gateway.store.catalog_update(HEARTBEAT_KIND, gateway.id, lambda _: stale)


def values(admin, path):
    sp = admin.path(path)
    entry, store = admin.entry(sp), admin.store(sp)
    start, end = store.offsets(entry.uuid, "t", 0)
    return [m.value.decode() for m in store.read(entry.uuid, "t", 0, start, end - start)]


# -- item 6: MapR's field names ------------------------------------------------------------------
@ON_BOTH
def test_replica_list_uses_maprs_field_names(linked):
    gateway = Gateway(linked, "newyork", "gw1")
    produce(linked, "a")
    gateway.run_once()
    row = row_of(linked)
    assert {
        "cluster",
        "stream",
        "replicaPath",
        "replicaState",
        "paused",
        "throttle",
        "idx",
        "networkencryption",
        "synchronous",
        "networkcompression",
        "maxbytespersec",
        "isUptodate",
        "uuid",
        "errors",
        "pendingMessages",
        "bytesPending",
        "minPendingTS",
        "maxPendingTS",
        "pendingIsEstimate",
        "replicationLagMillis",
        "gateways",
        "maxLagMillis",
        "maxLagMessages",
        "failover",
        "verification",
        "lastVerified",
        "verificationSummary",
    } == set(replica_status_row(row))  # the CLI's presenter: MapR's field names
    assert (row.path.cluster, row.path.path, row.replica_path, row.idx) == ("newyork", "/activity", NY, 1)
    assert row.uuid == linked.entry(NY).uuid
    assert (row.state, row.is_uptodate, row.errors) == (REPLICATING, True, None)
    assert row.gateways == ["gw1"]  # the live gateways serving the flow


def test_cli_replica_list_accepts_refreshnow(linked, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    out, err = io.StringIO(), io.StringIO()
    code = run(["stream", "replica", "list", "-path", SF, "-refreshnow", "true", "-json"], out, err, io.StringIO())
    assert (code, err.getvalue()) == (0, "")
    [row] = json.loads(out.getvalue())["data"]
    assert row["replicaPath"] == NY and "replica" not in row


# -- item 1: paused ----------------------------------------------------------------------------------
@ON_BOTH
def test_a_paused_replica_reads_paused_not_replicating(linked):
    gateway = Gateway(linked, "newyork", "gw1")
    produce(linked, "a")
    gateway.run_once()
    assert row_of(linked).state == REPLICATING
    linked.pause_replica(SF, NY)
    produce(linked, "b")
    gateway.run_once()  # a live gateway moves nothing to a paused replica
    row = row_of(linked)
    assert (row.state, row.paused, row.pending_messages, row.is_uptodate) == (PAUSED, True, 1, False)
    linked.resume_replica(SF, NY)
    gateway.run_once()
    row = row_of(linked)
    assert (row.state, row.pending_messages, row.is_uptodate) == (REPLICATING, 0, True)


# -- item 2: no live gateway ----------------------------------------------------------------------
@ON_BOTH
def test_every_listed_gateway_dead_reads_waiting_for_gateway_naming_them(linked):
    linked.set_gateways("newyork", "gw1 gw2")
    gw1 = Gateway(linked, "newyork", "gw1")
    produce(linked, "a")
    gw1.run_once()
    assert row_of(linked).state == REPLICATING
    kill(gw1)
    produce(linked, "b")
    row = row_of(linked)
    assert row.state == WAITING_FOR_GATEWAY
    assert row.errors.startswith("ErrAllGatewaysUnreachable") and "gw1, gw2" in row.errors
    assert (row.pending_messages, row.is_uptodate) == (1, False)
    # a live gateway that the source cluster does not list does not count
    Gateway(linked, "newyork", "other").heartbeat()
    assert row_of(linked).state == WAITING_FOR_GATEWAY
    Gateway(linked, "newyork", "gw2").run_once()
    row = row_of(linked)
    assert (row.state, row.errors, row.is_uptodate) == (REPLICATING, None, True)


def test_no_gateway_listed_and_none_live_names_the_cluster(linked):
    gateway = Gateway(linked, "newyork", "gw1")
    gateway.run_once()
    gateway.stop()
    row = row_of(linked)
    assert row.state == WAITING_FOR_GATEWAY
    assert row.errors == "ErrAllGatewaysUnreachable: no gateway of cluster newyork has a live heartbeat"
    assert row.is_uptodate is True  # nothing is pending: the replica holds everything


# -- item 3: messages lost to the source's retention --------------------------------------------
def lose_three(admin, gateway):
    """Replicate one old message, then let the source's retention remove three more before any
    gateway saw them. Returns the source's ttl-edited state: offsets 1-3 gone."""
    produce(admin, "a", timestamp=now_ms() - 2 * HOUR_MS)
    gateway.run_once()
    produce(admin, "b", "c", "d", timestamp=now_ms() - 2 * HOUR_MS)
    admin.edit_stream(SF, ttl=3600)
    admin.topic_info(SF, "t")  # retention runs: every message of SF is past its ttl


@ON_BOTH
def test_retention_loss_is_shown_logged_and_kept_until_acknowledged(linked, bob, caplog):
    gateway = Gateway(linked, "newyork", "gw1")
    lose_three(linked, gateway)
    # shown at once, before any gateway ran again
    row = row_of(linked)
    assert row.state == UNEXPECTED and row.is_uptodate is False
    assert "3 messages" in row.errors and "t/0 offsets 1-3" in row.errors

    produce(linked, "e")
    with caplog.at_level(logging.WARNING, logger="streamrep.replication.transfer"):
        gateway.run_once()
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    text = record.getMessage()
    assert all(part in text for part in (SF, "topic t", "partition 0", "3 messages", "offsets 1-3")), text
    # replication goes on, and the loss stays visible
    assert values(linked, NY) == ["a", "e"]
    row = row_of(linked)
    assert (row.state, row.pending_messages, row.is_uptodate) == (UNEXPECTED, 0, False)
    assert "t/0 offsets 1-3 (3)" in row.errors
    gateway.run_once()
    caplog.clear()
    assert row_of(linked).errors == row.errors  # recorded once, not counted again

    with pytest.raises(PermissionDenied, match="adminperm"):
        acknowledge_loss(bob, SF, NY)
    done = acknowledge_loss(linked, SF, NY)
    assert (str(done.replica), done.acknowledged, done.describe_ranges()) == (NY, 3, "t/0:1-3")
    row = row_of(linked)
    assert (row.state, row.errors, row.is_uptodate) == (REPLICATING, None, True)
    assert acknowledge_loss(linked, SF, NY).acknowledged == 0  # a retry finds it done


@ON_BOTH
def test_loss_is_recorded_even_when_nothing_is_left_to_replicate(linked):
    gateway = Gateway(linked, "newyork", "gw1")
    lose_three(linked, gateway)
    gateway.run_once()  # the source holds nothing now: the position still moves past the loss
    row = row_of(linked)
    assert row.state == UNEXPECTED and "offsets 1-3" in row.errors
    assert acknowledge_loss(linked, SF, NY).acknowledged == 3
    assert row_of(linked).is_uptodate is True


def test_cli_acknowledge(linked, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    lose_three(linked, Gateway(linked, "newyork", "gw1"))
    out, err = io.StringIO(), io.StringIO()
    code = run(["stream", "replica", "acknowledge", "-path", SF, "-replica", NY, "-json"], out, err, io.StringIO())
    assert (code, err.getvalue()) == (0, "")
    assert json.loads(out.getvalue())["data"] == [{"replicaPath": NY, "acknowledged": 3, "ranges": "t/0:1-3"}]


@ON_BOTH
def test_copystream_after_retention_removed_messages_records_the_loss(admin):
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 1)
    produce(admin, "a", "b", timestamp=now_ms() - 2 * HOUR_MS)
    copy_stream(admin, SF, NY)  # creates NY and copies 0-1
    produce(admin, "c", "d", timestamp=now_ms() - 2 * HOUR_MS)
    admin.edit_stream(SF, ttl=3600)
    admin.topic_info(SF, "t")  # retention removes 0-3
    produce(admin, "e")
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    copy_stream(admin, SF, NY)
    assert values(admin, NY) == ["a", "b", "e"]
    assert "t/0 offsets 2-3 (2)" in row_of(admin).errors


@ON_BOTH
def test_a_replica_with_no_position_yet_has_lost_nothing(linked):
    # messages that expired before replication was ever set up are not a loss
    store = linked.store(linked.path(SF))
    store.append(linked.entry(SF).uuid, "t", {0: [Message(b"old", timestamp=now_ms() - 2 * HOUR_MS)]})
    linked.edit_stream(SF, ttl=3600)
    linked.topic_info(SF, "t")
    Gateway(linked, "newyork", "gw1").run_once()
    row = row_of(linked)
    assert (row.state, row.errors, row.is_uptodate) == (REPLICATING, None, True)


def test_plan_never_counts_as_lost_what_the_batch_holds():
    # retention removed offsets 3-4 at the source after this batch (3-6) was read: only 1-2 are lost
    batch = [Message(f"m{o}".encode(), offset=o, partition=0, topic="t") for o in range(3, 7)]
    plan = plan_apply("replica", "source", "t", 0, batch, {position_key("source", "t", 0): 1}, source_start=5)
    assert plan.lost == (1, 3)
    assert [m.value for m in plan.messages] == [b"m3", b"m4", b"m5", b"m6"]
    assert plan.marks[position_key("source", "t", 0)] == 7
    assert plan.marks[loss_key("source", "t", 0, 1)] == 3


@ON_BOTH
def test_the_spark_gateways_pass_records_the_loss_too(linked, caplog):
    # The code a Spark gateway pass's task runs (tasks.replicate_share: read from the replica's
    # stored position, apply), in this process: no Spark session needed to prove the path.
    from streamrep.replication.transfer import SourcePartition
    from streamrep.spark.tasks import GatewayPartition, replicate_share

    lose_three(linked, Gateway(linked, "newyork", "gw1"))
    produce(linked, "e")
    sp = linked.path(SF)
    unit = SourcePartition(linked.entry(SF).uuid, "t", 0, sp)
    partition = GatewayPartition(unit, 5, (linked.entry(NY).uuid,))
    with caplog.at_level(logging.WARNING, logger="streamrep.replication.transfer"):
        [commit] = replicate_share(linked.clusters.home, "newyork", "spark-gw", [partition])
    assert (commit.rows, sum(commit.written.values()), commit.errors) == (1, 1, {})
    assert any("3 messages (offsets 1-3)" in r.getMessage() for r in caplog.records)
    assert values(linked, NY) == ["a", "e"]
    row = row_of(linked)
    assert row.state == UNEXPECTED and "t/0 offsets 1-3 (3)" in row.errors
    assert acknowledge_loss(linked, SF, NY).describe_ranges() == "t/0:1-3"


def test_an_unreadable_replica_cluster_marks_only_its_own_row(linked):
    """One replica whose cluster's store is gone reads UNEXPECTED with the reason; the other
    replicas of the same source are still listed with their real state."""
    linked.clusters.add("tokyo")
    linked.create_stream("/mapr/tokyo/activity", copymetafrom=SF)
    linked.add_replica(SF, "/mapr/tokyo/activity", paused=True)
    linked.clusters.close()
    path = linked.clusters.get("tokyo").url.removeprefix("embedded:")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    rows = {row.replica_path: row for row in replica_status(linked, SF)}
    assert rows[NY].state == WAITING_FOR_GATEWAY and "tokyo" not in rows[NY].errors
    tokyo = rows["/mapr/tokyo/activity"]
    assert tokyo.state == UNEXPECTED and "tokyo" in tokyo.errors and not tokyo.is_uptodate


def test_a_copy_that_stops_says_so_and_a_rerun_clears_it(linked):
    """A failed copy into a replica does not keep claiming COPY_IN_PROGRESS: the link records
    why it stopped; a copy that runs to the end leaves it for the gateways again."""
    from streamrep.errors import Unavailable
    from streamrep.replication.copy import copying, plan_copy

    produce(linked, b"a", b"b")
    linked.pause_replica(SF, NY)
    with pytest.raises(Unavailable), copying(linked, plan_copy(linked, SF, NY)):
        assert linked.entry(SF).replicas[0].state == "REPLICA_STATE_COPY_IN_PROGRESS"
        raise Unavailable("cluster newyork: disk full")
    [link] = linked.entry(SF).replicas
    assert (
        link.state == UNEXPECTED and "copystream stopped before it finished: cluster newyork: disk full" in link.error
    )
    assert row_of(linked).state == UNEXPECTED and not row_of(linked).is_uptodate
    copy_stream(linked, SF, NY)
    [link] = linked.entry(SF).replicas
    assert (link.state, link.error) == (WAITING_FOR_GATEWAY, None)


def test_the_end_of_a_copy_keeps_a_state_a_gateway_recorded_meanwhile(linked):
    from streamrep.model.replication import ReplicaState
    from streamrep.replication.copy import copying, plan_copy

    with copying(linked, plan_copy(linked, SF, NY)):
        linked.set_replica_state(SF, NY, ReplicaState.SYNC_FALLBACK)
    assert linked.entry(SF).replicas[0].state == ReplicaState.SYNC_FALLBACK.value
