"""The two-way agreement binds stream identities (UUIDs), not paths; a stream reached through
two cluster names is one stream; copystream checks the destination. Real embedded (and Kafka) clusters."""

from __future__ import annotations

import json

import pytest

from streamrep.client import Producer, StreamAdmin
from streamrep.client.results import UpstreamRow
from streamrep.errors import InvalidArgument, PermissionDenied
from streamrep.model.ace import Identity
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.paths import StreamPath
from streamrep.replication.copy import copy_stream
from streamrep.replication.flows import flows_into
from streamrep.replication.gateway import Gateway

# On Kafka clusters too: what flows (or not) and what copystream may write, by identity; the
# link formats and the Spark reader's use of the same check are backend-neutral.
ON_BOTH = pytest.mark.backends("embedded", "kafka")

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"


def produce(admin: StreamAdmin, stream: str, values: list[str]) -> None:
    with Producer(admin) as producer:
        for value in values:
            producer.send(f"{stream}:clicks", value.encode())


def held(admin: StreamAdmin, stream: str) -> list[str]:
    """Every value ``stream`` holds in topic clicks (none if it has no such topic)."""
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    values = []
    for p in range(store.topics(entry.uuid).get("clicks", 0)):
        start, end = store.offsets(entry.uuid, "clicks", p)
        values += [m.value.decode() for m in store.read(entry.uuid, "clicks", p, start, end - start)]
    return values


def drain(admin: StreamAdmin, cluster: str = "newyork") -> int:
    gateway = Gateway(admin, cluster, "gw1")
    moved = gateway.run_once(whole=True)
    gateway.stop()
    return moved


@pytest.fixture
def agreed(admin):
    """SF (topic clicks, 3 messages) replicating into NY: both links, resumed."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "clicks")
    produce(admin, SF, ["a", "b", "c"])
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin


def test_links_record_the_uuids_and_upstream_list_reports_them(agreed):
    admin = agreed
    sf, ny = admin.entry(SF), admin.entry(NY)
    assert sf.replicas[0].uuid == ny.uuid and ny.upstreams[0].uuid == sf.uuid
    assert admin.list_upstreams(NY) == [UpstreamRow(StreamPath("sanfrancisco", "/activity"), SF, 1, sf.uuid)]


@ON_BOTH
def test_a_stream_recreated_at_the_replica_path_receives_nothing(agreed, bob):
    admin = agreed
    agreed_uuid = admin.entry(NY).uuid
    admin.delete_stream(NY)
    # a stranger creates a stream at the old replica path and agrees to the source
    bob.create_stream(NY, ttl=0)
    bob.add_upstream(NY, SF)
    stranger = bob.entry(NY).uuid
    flows, [blocked] = flows_into(admin, "newyork")
    assert flows == [] and agreed_uuid in blocked.reason and stranger in blocked.reason
    assert drain(admin) == 0 and held(admin, NY) == []
    (row,) = admin.list_replicas(SF)
    assert row.state == "REPLICA_STATE_UNEXPECTED"
    assert NY in row.errors and agreed_uuid in row.errors and stranger in row.errors


@ON_BOTH
def test_a_strangers_stream_at_the_old_upstream_path_feeds_nothing(agreed, bob):
    admin = agreed
    agreed_uuid = admin.entry(SF).uuid
    admin.delete_stream(SF)
    # bob creates a stream at the old source path and lists alice's replica as its replica
    bob.create_stream(SF, ttl=0)
    bob.create_topic(SF, "clicks")
    produce(bob, SF, ["spam"])
    bob.add_replica(SF, NY)
    stranger = bob.entry(SF).uuid
    flows, [blocked] = flows_into(admin, "newyork")
    assert flows == [] and agreed_uuid in blocked.reason and stranger in blocked.reason and SF in blocked.reason
    assert drain(admin) == 0 and held(admin, NY) == []
    (row,) = bob.list_replicas(SF)
    assert row.state == "REPLICA_STATE_UNEXPECTED" and agreed_uuid in row.errors
    # the replica's owner agrees to the new stream again: then it flows
    admin.remove_upstream(NY, SF)
    admin.add_upstream(NY, SF)
    assert drain(admin) == 1 and held(admin, NY) == ["spam"]


@ON_BOTH
def test_the_agreed_pair_still_flows(agreed):
    assert drain(agreed) == 3 and sorted(held(agreed, NY)) == ["a", "b", "c"]


def _strip_link_uuids(admin: StreamAdmin, path: str) -> None:
    """Rewrite a stream's catalog document as a release before link UUIDs wrote it."""
    sp = admin.path(path)

    def old_format(doc):
        for link in doc["replicas"] + doc["upstreams"]:
            del link["uuid"]
        del doc["autosetup_from"]
        return doc

    admin.store(sp).catalog_update(STREAM_KIND, sp.path, old_format)


def test_links_written_before_uuids_bind_the_stream_that_was_there(agreed, bob):
    admin = agreed
    _strip_link_uuids(admin, SF)
    _strip_link_uuids(admin, NY)
    assert admin.entry(SF).replicas[0].uuid is None and admin.list_upstreams(NY)[0].uuid is None
    assert drain(admin) == 3  # the streams that existed when the links were added still agree
    # the source is deleted and a stranger's stream takes its path: not the agreed upstream
    admin.delete_stream(SF)
    bob.create_stream(SF, ttl=0)
    bob.create_topic(SF, "clicks")
    produce(bob, SF, ["spam"])
    bob.add_replica(SF, NY)
    flows, [blocked] = flows_into(admin, "newyork")
    assert flows == [] and "deleted and recreated" in blocked.reason
    assert drain(admin) == 0 and sorted(held(admin, NY)) == ["a", "b", "c"]


def _alias(admin: StreamAdmin, alias: str, of: str) -> None:
    """Register the store file of cluster ``of`` under a second name (as a registry edited by
    hand, or an older release, may hold)."""
    path = admin.clusters.registry_path
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    data["clusters"][alias] = dict(data["clusters"][of])
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f)


@ON_BOTH
def test_a_stream_under_another_cluster_name_is_itself(admin):
    admin.create_stream(SF)
    admin.create_topic(SF, "clicks")
    _alias(admin, "sf2", "sanfrancisco")
    other_name = "/mapr/sf2/activity"
    assert admin.entry(other_name).uuid == admin.entry(SF).uuid
    with pytest.raises(InvalidArgument, match="under another name"):
        admin.add_replica(SF, other_name)
    with pytest.raises(InvalidArgument, match="under another name"):
        admin.add_upstream(SF, other_name)
    with pytest.raises(InvalidArgument, match="into itself"):
        copy_stream(admin, SF, other_name)
    assert admin.entry(SF).replicas == () and admin.entry(SF).upstreams == ()


# -- copystream's destination ----------------------------------------------------------------
@pytest.fixture
def source(admin):
    """SF owned by alice, with copyperm also for bob."""
    admin.create_stream(SF, ttl=0, copyperm="u:alice | u:bob")
    admin.create_topic(SF, "clicks")
    produce(admin, SF, ["a", "b"])
    return admin


@ON_BOTH
def test_copy_into_an_existing_stream_needs_copyperm_or_produce_consume_and_topic_perms(source, bob):
    """MapR's rule for the destination (issue 21, item 4): copyperm, or all three of produceperm,
    consumeperm and topicperm; two of the three are not enough."""
    admin = source
    admin.create_stream(NY)  # alice's: bob holds nothing on it
    refused = f"user bob needs copyperm, or produceperm, consumeperm and topicperm, on stream {NY}"
    with pytest.raises(PermissionDenied, match=refused):
        copy_stream(bob, SF, NY)
    admin.edit_stream(NY, produceperm="u:alice | u:bob", consumeperm="u:alice | u:bob")
    with pytest.raises(PermissionDenied, match=refused):
        copy_stream(bob, SF, NY)
    assert held(admin, NY) == []
    admin.edit_stream(NY, topicperm="u:alice | u:bob")
    assert copy_stream(bob, SF, NY).messages == 2 and sorted(held(admin, NY)) == ["a", "b"]
    admin.edit_stream(NY, produceperm="u:alice", consumeperm="u:alice", topicperm="u:alice", copyperm="u:alice | u:bob")
    produce(admin, SF, ["c"])
    assert copy_stream(bob, SF, NY).messages == 1  # copyperm alone


@ON_BOTH
def test_copy_needs_only_consumeperm_on_the_source(source, bob):
    admin = source
    admin.edit_stream(SF, copyperm="u:alice", consumeperm="u:alice | u:bob")
    admin.create_stream(NY, copyperm="u:alice | u:bob")
    assert copy_stream(bob, SF, NY).messages == 2


@ON_BOTH
def test_a_copy_that_created_its_destination_resumes_into_it(source, bob):
    admin = source
    admin.edit_stream(SF, adminperm="u:alice | u:bob")  # bob: copyperm and adminperm, not produceperm
    assert copy_stream(bob, SF, NY).messages == 2
    produce(admin, SF, ["c"])
    assert copy_stream(bob, SF, NY).messages == 1  # the destination is his to administer
    assert sorted(held(admin, NY)) == ["a", "b", "c"]


@ON_BOTH
def test_copy_creating_the_destination_needs_the_adminperm_it_would_have(source, bob, home):
    admin = source
    with pytest.raises(PermissionDenied, match=f"user bob would not have adminperm on stream {NY}"):
        copy_stream(bob, SF, NY)
    assert [e.path for e in admin.list_streams("newyork")] == []  # nothing was created
    admin.edit_stream(SF, adminperm="u:alice | u:bob")
    assert copy_stream(bob, SF, NY).messages == 2
    assert admin.entry(NY).meta.adminperm == "u:alice | u:bob"


def test_copy_needs_copyperm_on_the_source(source, home):
    carol = StreamAdmin(home, Identity("carol"))
    carol.create_stream(NY)
    with pytest.raises(PermissionDenied, match=f"user carol has none of consumeperm, copyperm on stream {SF}"):
        copy_stream(carol, SF, NY)
    assert held(carol, NY) == []


@ON_BOTH
def test_gateways_publish_into_a_replica_nobody_may_produce_to(agreed, bob):
    admin = agreed
    admin.edit_stream(NY, produceperm="u:nobody")
    admin.edit_stream(SF, copyperm="u:alice | u:bob")
    with pytest.raises(
        PermissionDenied, match=f"user bob needs copyperm, or produceperm, consumeperm and topicperm, on stream {NY}"
    ):
        copy_stream(bob, SF, NY)
    assert drain(bob) == 3  # a gateway (here run by bob) has the implicit authority to publish
    assert sorted(held(admin, NY)) == ["a", "b", "c"]


def test_the_spark_copy_task_uses_the_same_check(source, bob, monkeypatch, home):
    from streamrep.replication.copy import plan_copy
    from streamrep.spark.tasks import copy_task

    source.create_stream(NY)
    plan = plan_copy(source, SF, NY)  # planned by a caller who may
    monkeypatch.setenv("STREAMREP_USER", "bob")  # a Spark task builds its admin from the environment
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    with pytest.raises(
        PermissionDenied, match=f"user bob needs copyperm, or produceperm, consumeperm and topicperm, on stream {NY}"
    ):
        next(copy_task(home.home, plan, sorted(plan.ends), iter([])))


def test_links_from_older_or_newer_catalogs_load():
    from streamrep.model.replication import ReplicaLink, UpstreamLink, binds

    old = ReplicaLink.from_dict({"path": NY, "paused": True, "added": 1000})
    assert old.uuid is None and old.paused is True
    newer = UpstreamLink.from_dict({"path": SF, "added": 5, "uuid": "u1", "a_field_from_the_future": 1})
    assert newer == UpstreamLink(SF, 5, "u1")
    # a link without a UUID binds the stream that existed when it was added, not a later one
    assert binds(old, "any", 1000) and not binds(old, "any", 1001)
    assert binds(newer, "u1", 10**15) and not binds(newer, "u2", 0)


@ON_BOTH
def test_a_producer_does_not_wait_for_a_synchronous_replica_recreated_at_its_path(admin):
    """The synchronous wait uses the same identity rule as the gateways: a replica deleted and
    recreated at the linked path gets nothing applied, so the producer neither waits for it nor
    marks it fallen back to asynchronous (it would, with a path-only check)."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "clicks")
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY, synchronous=True)
    admin.add_upstream(NY, SF)
    admin.delete_stream(NY)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_upstream(NY, SF)  # the new stream agrees, but the source's link names the old one
    with Producer(admin, sync_timeout=0) as producer:
        producer.send(f"{SF}:clicks", b"x")
    [link] = admin.entry(SF).replicas
    assert link.state != "REPLICA_STATE_SYNC_FELL_BACK_TO_ASYNC"
    assert producer.warnings == []
