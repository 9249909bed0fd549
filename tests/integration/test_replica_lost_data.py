"""A replica that lost data says so (issue 29, B2): a replica topic deleted, truncated (records
deleted) or planted before the source created it puts the link in REPLICA_STATE_UNEXPECTED with one
line naming the topic and the offsets missing, never ``isUptodate``; and the gateway neither
re-creates a deleted replica topic nor fills a re-created one with the new messages only.

The replica's topics are changed behind streamrep's back, through the store (on Kafka: what a plain
AdminClient does), as an admin of the replica's cluster could."""

from __future__ import annotations

import json
import time

import pytest
import test_replication
from replication_helpers import assert_exactly_once, count, drain, produce
from test_replication import NY, SF, linked_pair, source_with_topics, status, tagged

from streamrep.model.message import Message
from streamrep.model.replication import ReplicaState
from streamrep.replication.failover import failback, failover
from streamrep.replication.gateway import Gateway
from streamrep.replication.held import HeldCheck, lost_data
from streamrep.replication.transfer import SourcePartition

api3 = test_replication.api3  # the fixture: three clusters on the test's backend
ON_BOTH = pytest.mark.backends("embedded", "kafka")
UNEXPECTED = ReplicaState.UNEXPECTED
GRACE = 1.1  # > 2 * FAILOVER_CHECK_SECONDS, as in tests/unit/test_failover.py


def replica_store(api):
    return api.store(api.path(NY)), api.entry(NY).uuid


def replicated_ten(api) -> Gateway:
    """SF:t (one partition) replicated to NY: 10 messages at offsets 0-9 applied."""
    linked_pair(api, t=1)
    gw = Gateway(api, "newyork", "g1")
    produce(api, f"{SF}:t", tagged("old", 10))
    drain(gw)
    assert count(api, NY) == 10
    return gw


def run_gateway(gw: Gateway) -> str:
    """A drain, as ``gateway run -once``: it reports the replicas it could not serve."""
    with pytest.raises(Exception) as failed:
        gw.drain()
    return str(failed.value)


def assert_reported(api, *expected: str) -> str:
    """``replica list`` (as the CLI shows it) says UNEXPECTED, not up to date, with one line
    holding ``expected``."""
    row = status(api, SF, NY)
    assert row.state is UNEXPECTED and not row.is_uptodate, (row.state, row.errors)
    assert "\n" not in row.errors and all(part in row.errors for part in expected), row.errors
    return row.errors


@ON_BOTH
def test_a_deleted_replica_topic_is_reported_and_not_created_again(api3):
    api = api3
    gw = replicated_ten(api)
    store, uuid = replica_store(api)
    store.delete_topic(uuid, "t")
    produce(api, f"{SF}:t", tagged("new", 5))
    assert "replica /mapr/newyork/activity topic t partition 0 lost applied messages" in run_gateway(gw)
    assert "t" not in store.topics(uuid)  # not re-created with the 5 new messages only
    line = assert_reported(api, "topic t partition 0", "offsets 0-9", "the topic is gone")
    assert line.endswith("remove the replica and set it up again")
    # A topic someone creates again in its place is not filled either.
    store.create_topic(uuid, "t", 1)
    run_gateway(gw)
    assert count(api, NY) == 0
    assert_reported(api, "topic t partition 0", "offsets 0-9")


@ON_BOTH
def test_a_truncated_replica_topic_is_reported(api3, backend):
    api = api3
    gw = replicated_ten(api)
    store, uuid = replica_store(api)
    if backend == "kafka":  # records deleted with a plain AdminClient
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": api.clusters.get("newyork").url.removeprefix("kafka://")})
        [future] = admin.delete_records([TopicPartition(store.native_topic(uuid, "t"), 0, 4)]).values()
        future.result(30)
        missing = "offsets 0-3 (source offsets 0-3) are missing, it holds offsets 4-"
    else:  # the embedded store's records removed up to the end, as retention would with a ttl
        store.purge_before(uuid, "t", int(time.time() * 1000) + 60_000)
        missing = "offsets 0-9 (source offsets 0-9) are missing, it holds no message (next offset 10)"
    produce(api, f"{SF}:t", tagged("new", 5))
    assert missing in run_gateway(gw)
    assert_reported(api, "topic t partition 0", missing)


@ON_BOTH
def test_a_topic_planted_in_the_replica_before_the_source_has_it_is_reported(api3):
    api = api3
    source_with_topics(api, SF, other=1)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    store, uuid = replica_store(api)
    store.create_topic(uuid, "t", 1)
    store.append(uuid, "t", {0: [Message(b"planted")]})
    api.create_topic(SF, "t", 1)
    produce(api, f"{SF}:t", tagged("src", 3))
    gw = Gateway(api, "newyork", "g1")
    assert "holds messages that were not replicated from /mapr/sanfrancisco/activity" in run_gateway(gw)
    assert count(api, NY) == 1  # the planted message alone: nothing applied after it
    assert_reported(api, "topic t partition 0", "offsets 0-0", "a topic planted in the replica")


def test_replica_list_through_the_cli_shows_the_state_and_the_line(api3, cli):
    api = api3
    gw = replicated_ten(api)
    store, uuid = replica_store(api)
    store.delete_topic(uuid, "t")
    run_gateway(gw)
    code, out, err = cli("stream", "replica", "list", "-path", SF, "-json")
    assert code == 0, err
    [row] = json.loads(out)["data"]
    assert row["replicaState"] == UNEXPECTED.value and row["isUptodate"] is False
    assert "topic t partition 0 lost applied messages: offsets 0-9" in row["errors"]


@ON_BOTH
def test_a_replica_holding_what_was_applied_is_not_accused(api3):
    """Retention at the source (a loss the replica records) and messages the replica's own
    retention removed after the source's are no loss of the replica's."""
    api = api3
    gw = replicated_ten(api)
    store, uuid = replica_store(api)
    produce(api, f"{SF}:t", tagged("more", 5))
    drain(gw)
    row = status(api, SF, NY)
    assert row.state is ReplicaState.REPLICATING and row.is_uptodate, row.errors


def test_messages_the_replicas_own_ttl_removed_are_no_loss_but_a_truncation_is(api3):
    """A replica with a shorter ttl than its source's drops old messages the source keeps: its own
    retention, not a loss (those messages are older than its ttl). Records deleted that its ttl
    would have kept are."""
    api = api3
    linked_pair(api, t=1)  # the source keeps its messages for ever
    api.edit_stream(NY, ttl=3600)
    produce(api, f"{SF}:t", tagged("old", 10), timestamp=int(time.time() * 1000) - 2 * 3600 * 1000)
    produce(api, f"{SF}:t", tagged("new", 5))
    gw = Gateway(api, "newyork", "g1")
    drain(gw)
    store, uuid = replica_store(api)
    store.retain(uuid, "t", force=True)
    assert (
        store.offsets(uuid, "t", 0) == (10, 15) and api.store(api.path(SF)).offsets(api.entry(SF).uuid, "t", 0)[0] == 0
    )
    row = status(api, SF, NY)
    assert row.state is ReplicaState.REPLICATING and row.is_uptodate, row.errors
    store.purge_before(uuid, "t", int(time.time() * 1000) + 60_000)
    assert_reported(api, "topic t partition 0 lost applied messages", "it holds no message (next offset 15)")


@pytest.mark.backends("kafka")
def test_a_transaction_still_open_in_the_replica_partition_is_no_loss(api3):
    """Kafka lets a partition be read only up to its first open transaction (the last stable offset).
    An apply committed after another writer's transaction began there has its offset syncs readable
    while its records are not yet: the check counts what the partition's log holds, so nothing is
    reported lost. (So it is, for the moment, after every commit: Kafka writes the commit's marker
    into one partition after the other, and the offset syncs' partition may come first.)"""
    from confluent_kafka import Producer

    api = api3
    gw = replicated_ten(api)
    store, uuid = replica_store(api)
    settings = {k: v for k, v in api.clusters.get("newyork").settings.items() if not k.startswith("streamrep.")}
    hanging = Producer(
        {
            **settings,
            "bootstrap.servers": store.bootstrap,
            "transactional.id": f"open-{uuid}",
            "transaction.timeout.ms": 60000,
        }
    )
    hanging.init_transactions(30)
    hanging.begin_transaction()
    hanging.produce(store.native_topic(uuid, "t"), b"still open", partition=0)
    hanging.flush(30)
    try:
        produce(api, f"{SF}:t", tagged("more", 5))
        gw.run_once(whole=True)
        assert store.offsets(uuid, "t", 0) == (0, 11)  # readable up to the open transaction (10: a marker)
        row = status(api, SF, NY)
        assert row.state is not UNEXPECTED and "lost" not in (row.errors or ""), row.errors
        assert gw.lost == {}
    finally:
        hanging.abort_transaction(30)
        del hanging  # its client ends here, not when the session's broker is gone
    drain(gw)
    assert count(api, NY) == 15


def failed_over_and_back(api) -> tuple[Gateway, list[str]]:
    """SF (t: 2 partitions, u: 1) replicated to NY, where only t/0 ever received a message; NY
    promoted by a failover and written in every partition (t/1 and u/0 hold only its own writes),
    then failed back, the copy back drained by hand. Returns NY's gateway and every value sent."""
    linked_pair(api, t=2, u=1)
    gw = Gateway(api, "newyork", "g1")
    sent = produce(api, f"{SF}:t", tagged("before", 10), partition=0)
    drain(gw)
    failover(api, SF, NY, timeout=30, grace=GRACE)
    for topic, partition in (("t", 0), ("t", 1), ("u", 0)):
        sent += produce(api, f"{NY}:{topic}", tagged(f"ny-{topic}{partition}", 3), partition=partition)
    failback(api, SF, NY, phase="reverse")
    drain(Gateway(api, "sanfrancisco", "g1"))
    back = failback(api, SF, NY, phase="return", timeout=30, grace=GRACE)
    assert back.copied_back == 9  # only the promoted stream's own writes
    return gw, sent


@ON_BOTH
def test_a_failed_back_replicas_own_writes_in_partitions_never_applied_to_are_not_planted(api3):
    """A partition nothing was applied to before the failover holds the promoted stream's own
    writes after the failback: the failback records where they end, so they are no planted topic,
    and the partition replicates from then on."""
    api = api3
    gw, sent = failed_over_and_back(api)
    for topic, partition in (("t", 0), ("t", 1), ("u", 0)):
        sent += produce(api, f"{SF}:{topic}", tagged(f"after-{topic}{partition}", 2), partition=partition)
    assert gw.drain() == 6  # as ``gateway run -once``: raises if a replica could not be served
    assert gw.lost == {}
    row = status(api, SF, NY)
    assert row.state is ReplicaState.REPLICATING and row.is_uptodate and not row.errors, (row.state, row.errors)
    assert_exactly_once(api, SF, sent)  # nothing lost, nothing copied twice, on both sides
    assert_exactly_once(api, NY, sent)


@ON_BOTH
def test_a_message_planted_after_a_failback_beside_the_replicas_own_writes_is_reported(api3):
    """What the failback recorded covers the promoted stream's own writes only: a message planted
    after them, in a partition nothing was applied to (u/0), or in one of a topic that was (t/1),
    is reported, naming its offsets alone."""
    api = api3
    gw, _ = failed_over_and_back(api)
    store, uuid = replica_store(api)
    ends = {(topic, partition): store.offsets(uuid, topic, partition)[1] for topic, partition in (("t", 1), ("u", 0))}
    for topic, partition in ends:
        store.append(uuid, topic, {partition: [Message(b"planted")]})
        produce(api, f"{SF}:{topic}", tagged(f"after-{topic}{partition}", 2), partition=partition)
    failed = run_gateway(gw)
    assert "a topic planted in the replica" in failed and "(and 1 more partitions)" in failed
    assert_reported(api, "a topic planted in the replica")
    source = api.entry(SF).uuid
    units = [SourcePartition(source, topic, partition, api.path(SF)) for topic, partition in ends]
    lines = lost_data(
        store, [HeldCheck(u, api.path(NY), uuid) for u in units], lambda _: api.store(api.path(SF)), api.entry
    )
    for line, ((topic, partition), end) in zip(lines, ends.items(), strict=True):
        assert f"topic {topic} partition {partition} holds messages that were not replicated" in line, line
        assert f"(offsets {end}-" in line, line  # from the plant on: the replica's own writes are before it
