"""Tests for streamrep.client.admin: streams, topics, replicas, upstreams and gateways."""

import pytest

from streamrep.client.admin import StreamAdmin
from streamrep.client.producer import Producer
from streamrep.client.results import ReplicaRow, TopicChange, TopicSummary
from streamrep.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    PermissionDenied,
)
from streamrep.model.ace import Identity
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState

# On Kafka clusters too: a representative part (every store operation the admin API makes); the
# other cases check catalog rules that both backends share through the same Store interface.
ON_BOTH = pytest.mark.backends("embedded", "kafka")

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"


@pytest.fixture
def sf(admin):
    """alice's source stream on sanfrancisco."""
    return admin.create_stream(SF)


@pytest.fixture
def pair(admin, sf):
    """alice's source on sanfrancisco and its replica (metadata copied) on newyork."""
    admin.create_stream(NY, copymetafrom=SF)
    return SF, NY


def produce(admin, topic, *values):
    with Producer(admin) as p:
        for v in values:
            p.send(topic, v)


# --- streams ---------------------------------------------------------------------


@ON_BOTH
def test_create_stream_with_defaults(admin):
    entry = admin.create_stream(SF)
    assert entry.path == "/activity"
    assert entry.creator == "alice"
    assert entry.meta.defaultpartitions == 1 and entry.meta.ttl == 604800 and entry.meta.autocreate
    assert entry.meta.adminperm == "u:alice"
    assert admin.entry(SF) == entry


def test_create_on_default_cluster(admin):
    admin.create_stream("activity")
    assert admin.entry(SF).path == "/activity"
    assert admin.entry("/activity").uuid == admin.entry(SF).uuid


def test_same_path_on_two_clusters_are_different_streams(admin):
    a = admin.create_stream(SF)
    b = admin.create_stream(NY)
    assert a.uuid != b.uuid


@ON_BOTH
def test_create_existing_stream(admin, sf):
    with pytest.raises(AlreadyExists, match=f"stream {SF} already exists"):
        admin.create_stream(SF, defaultpartitions=5)
    assert admin.entry(SF).uuid == sf.uuid
    assert admin.entry(SF).meta.defaultpartitions == 1


def test_create_on_unknown_cluster(admin):
    with pytest.raises(NotFound, match="cluster boston is not known"):
        admin.create_stream("/mapr/boston/activity")


def test_create_with_bad_settings(admin):
    with pytest.raises(InvalidArgument, match="invalid defaultpartitions"):
        admin.create_stream(SF, defaultpartitions=0)
    with pytest.raises(InvalidArgument, match="unknown stream setting"):
        admin.create_stream(SF, colour="blue")
    with pytest.raises(NotFound):
        admin.entry(SF)


def test_entry_of_unknown_stream(admin):
    with pytest.raises(NotFound, match=f"stream {SF} does not exist"):
        admin.entry(SF)


@ON_BOTH
def test_copymetafrom_across_clusters_copies_everything(admin):
    admin.create_stream(
        SF,
        defaultpartitions=6,
        ttl=3600,
        autocreate=False,
        produceperm="u:alice | g:eng",
        consumeperm="p",
        topicperm="g:eng",
        copyperm="u:alice|u:bob",
        adminperm="u:alice & !u:bob",
    )
    source = admin.entry(SF).meta
    replica = admin.create_stream(NY, copymetafrom=SF)
    assert replica.meta == source
    assert replica.meta.copyperm == "u:alice | u:bob"
    assert replica.uuid != admin.entry(SF).uuid


def test_copymetafrom_explicit_settings_override(admin):
    admin.create_stream(SF, defaultpartitions=6, ttl=3600, consumeperm="p")
    replica = admin.create_stream(NY, copymetafrom=SF, ttl=60, consumeperm="g:eng")
    assert (replica.meta.defaultpartitions, replica.meta.ttl, replica.meta.consumeperm) == (6, 60, "g:eng")


def test_copymetafrom_unknown_source(admin):
    with pytest.raises(NotFound, match="stream /mapr/sanfrancisco/nope does not exist"):
        admin.create_stream(NY, copymetafrom="/mapr/sanfrancisco/nope")
    with pytest.raises(NotFound):
        admin.entry(NY)


def test_copymetafrom_bob_gets_alices_permissions(admin, bob, sf):
    entry = bob.create_stream(NY, copymetafrom=SF)
    assert entry.creator == "bob"
    assert entry.meta.adminperm == "u:alice"
    with pytest.raises(PermissionDenied):
        bob.edit_stream(NY, ttl=1)


def test_edit_stream(admin, sf):
    entry = admin.edit_stream(SF, ttl=0, consumeperm="g:eng|u:bob")
    assert entry.meta.ttl == 0
    assert entry.meta.consumeperm == "g:eng | u:bob"
    assert admin.entry(SF).meta == entry.meta
    assert admin.entry(SF).uuid == sf.uuid


@ON_BOTH
def test_edit_needs_adminperm(admin, bob, sf):
    with pytest.raises(PermissionDenied) as err:
        bob.edit_stream(SF, ttl=1)
    message = str(err.value)
    assert "user bob does not have adminperm" in message and SF in message
    assert admin.entry(SF).meta.ttl == 604800


def test_edit_validation(admin, sf):
    with pytest.raises(InvalidArgument, match="invalid ttl"):
        admin.edit_stream(SF, ttl=-5)
    with pytest.raises(InvalidArgument, match="invalid access control expression"):
        admin.edit_stream(SF, adminperm="u:alice &&")
    assert admin.entry(SF).meta == sf.meta


def test_edit_unknown_stream(admin):
    with pytest.raises(NotFound, match="does not exist"):
        admin.edit_stream(SF, ttl=1)


def test_group_ace_grants(admin, carol, bob, sf):
    with pytest.raises(PermissionDenied):
        carol.edit_stream(SF, ttl=5)
    admin.edit_stream(SF, adminperm="u:alice | g:eng")
    assert carol.edit_stream(SF, ttl=5).meta.ttl == 5  # carol is in eng
    with pytest.raises(PermissionDenied, match="user bob does not have adminperm"):
        bob.edit_stream(SF, ttl=6)


def test_empty_ace_denies_even_creator(admin, sf):
    admin.edit_stream(SF, topicperm="")
    with pytest.raises(PermissionDenied, match="topicperm"):
        admin.create_topic(SF, "t")


@ON_BOTH
def test_stream_info(admin, sf):
    admin.create_topic(SF, "a", partitions=3)
    admin.create_topic(SF, "b")
    info = admin.stream_info(SF)
    assert str(info.path) == SF
    assert info.path.cluster == "sanfrancisco"
    assert info.uuid == sf.uuid
    assert info.creator == "alice"
    assert (info.topics, info.partitions) == (2, 4)
    assert (info.meta.defaultpartitions, info.meta.ttl, info.meta.autocreate) == (1, 604800, True)
    assert info.meta.adminperm == "u:alice"
    assert (info.replicas, info.upstreams) == (0, 0)


@ON_BOTH
def test_list_streams(admin, sf):
    admin.create_stream("/mapr/sanfrancisco/apps/other")
    admin.create_stream(NY)
    assert sorted(e.path for e in admin.list_streams()) == ["/activity", "/apps/other"]
    assert [e.path for e in admin.list_streams("newyork")] == ["/activity"]
    with pytest.raises(NotFound):
        admin.list_streams("boston")


@ON_BOTH
def test_delete_stream(admin, sf):
    produce(admin, SF + ":clicks", "a", "b")
    admin.delete_stream(SF)
    with pytest.raises(NotFound):
        admin.entry(SF)
    assert admin.store(admin.path(SF)).topics(sf.uuid) == {}
    again = admin.create_stream(SF)
    assert again.uuid != sf.uuid
    assert admin.list_topics(SF) == []
    assert admin.stream_info(SF).topics == 0


def test_delete_needs_adminperm(admin, bob, sf):
    produce(admin, SF + ":clicks", "a")
    with pytest.raises(PermissionDenied, match="adminperm"):
        bob.delete_stream(SF)
    assert admin.list_topics(SF)[0].messages == 1


def test_delete_unknown_stream(admin):
    with pytest.raises(NotFound, match="does not exist"):
        admin.delete_stream(SF)


# --- topics ------------------------------------------------------------------------


@ON_BOTH
def located(admin, topic: str) -> str | None:
    """Where ``topic`` is kept under the cluster's names: None on embedded clusters, the Kafka topic on Kafka."""
    native = admin.store(admin.path(SF)).native_topic(admin.entry(SF).uuid, topic)
    assert native is None or native.endswith(f"activity__{topic}")
    return native


def test_topic_create_list_info(admin, sf):
    assert admin.create_topic(SF, "clicks") == TopicChange(admin.path(SF), "clicks", 1)
    admin.create_topic(SF, "views", partitions=2)
    produce(admin, SF + ":views", "x", "y", "z")
    topics = admin.list_topics(SF)
    assert topics == [
        TopicSummary("clicks", 1, 0, located(admin, "clicks")),
        TopicSummary("views", 2, 3, located(admin, "views")),
    ]
    info = admin.topic_info(SF, "views")
    assert [row.partition for row in info] == [0, 1]
    assert sum(row.messages for row in info) == 3
    assert all(row.first == 0 and row.last == row.messages - 1 for row in info)


def test_topic_uses_stream_default_partitions(admin):
    admin.create_stream(SF, defaultpartitions=4)
    assert admin.create_topic(SF, "t").partitions == 4


def test_topic_create_existing(admin, sf):
    admin.create_topic(SF, "clicks")
    with pytest.raises(AlreadyExists, match=f"topic {SF}:clicks already exists"):
        admin.create_topic(SF, "clicks")


def test_topic_bad_name_and_partitions(admin, sf):
    with pytest.raises(InvalidArgument, match="invalid topic name"):
        admin.create_topic(SF, "bad name")
    with pytest.raises(InvalidArgument, match="invalid partition count"):
        admin.create_topic(SF, "t", partitions=0)
    assert admin.list_topics(SF) == []


def test_topic_in_unknown_stream(admin):
    with pytest.raises(NotFound, match=f"stream {SF} does not exist"):
        admin.create_topic(SF, "t")


@ON_BOTH
def test_topic_edit_adds_partitions(admin, sf):
    admin.create_topic(SF, "t")
    assert admin.edit_topic(SF, "t", partitions=3).partitions == 3
    assert len(admin.topic_info(SF, "t")) == 3
    with pytest.raises(InvalidArgument, match="partitions can only be added"):
        admin.edit_topic(SF, "t", partitions=2)
    with pytest.raises(NotFound, match=f"topic {SF}:nope does not exist"):
        admin.edit_topic(SF, "nope", partitions=2)


@ON_BOTH
def test_topic_delete(admin, sf):
    produce(admin, SF + ":t", "a")
    admin.delete_topic(SF, "t")
    assert admin.list_topics(SF) == []
    with pytest.raises(NotFound, match=f"topic {SF}:t does not exist"):
        admin.delete_topic(SF, "t")
    with pytest.raises(NotFound, match=f"topic {SF}:t does not exist"):
        admin.topic_info(SF, "t")


@ON_BOTH
def test_topic_calls_need_topicperm(admin, bob, sf):
    admin.create_topic(SF, "t")
    with pytest.raises(PermissionDenied, match="user bob does not have topicperm"):
        bob.create_topic(SF, "u")
    with pytest.raises(PermissionDenied, match="topicperm"):
        bob.edit_topic(SF, "t", partitions=2)
    with pytest.raises(PermissionDenied, match="topicperm"):
        bob.delete_topic(SF, "t")
    assert admin.list_topics(SF) == [TopicSummary("t", 1, 0, located(admin, "t"))]
    admin.edit_stream(SF, topicperm="u:alice | u:bob")
    bob.create_topic(SF, "u")
    assert [t.topic for t in admin.list_topics(SF)] == ["t", "u"]


# --- replicas -------------------------------------------------------------------------


@ON_BOTH
def test_replica_add_and_list_waits_for_upstream(admin, pair):
    link = admin.add_replica(SF, NY, paused=True)
    assert (link.path, link.paused, link.synchronous) == (NY, True, False)
    (row,) = admin.list_replicas(SF)
    assert row == ReplicaRow(
        path=StreamPath("newyork", "/activity"),
        replica_path=NY,
        state=ReplicaState.WAITING_FOR_UPSTREAM,
        paused=True,
        throttle=False,
        idx=1,
        networkencryption=False,
        synchronous=False,
        networkcompression="lz4",  # MapR's default: a stream's compression, lz4 unless set
        maxbytespersec=0,  # streamrep's: no limit unless asked
        uuid=admin.entry(NY).uuid,
        errors=None,
    )


def test_replica_waits_for_gateway_after_upstream_added(admin, pair):
    admin.add_replica(SF, NY, paused=True)
    admin.add_upstream(NY, SF)
    assert [u.path for u in admin.upstream_links(NY)] == [SF]
    (row,) = admin.list_replicas(SF)
    assert row.state == ReplicaState.PAUSED.value == "REPLICA_STATE_PAUSED"
    admin.resume_replica(SF, NY)
    (row,) = admin.list_replicas(SF)
    assert row.state == ReplicaState.WAITING_FOR_GATEWAY.value == "REPLICA_STATE_WAITING_FOR_GATEWAY"


def test_replica_list_shows_synchronous_and_stored_state(admin, pair):
    admin.add_replica(SF, NY, synchronous=True)
    admin.add_upstream(NY, SF)
    admin.set_replica_state(SF, NY, ReplicaState.REPLICATING)
    (row,) = admin.list_replicas(SF)
    assert (row.synchronous, row.paused, row.state) == (True, False, "REPLICA_STATE_REPLICATING")
    admin.set_replica_state(SF, NY, ReplicaState.REPLICATING, error="apply failed: disk full")
    (row,) = admin.list_replicas(SF)
    assert (row.state, row.errors) == ("REPLICA_STATE_UNEXPECTED", "apply failed: disk full")


def test_set_state_of_unknown_replica(admin, sf):
    with pytest.raises(NotFound, match="is not a replica of"):
        admin.set_replica_state(SF, NY, ReplicaState.REPLICATING)


def test_replica_stream_must_exist(admin, sf):
    with pytest.raises(NotFound, match=f"stream {NY} does not exist"):
        admin.add_replica(SF, NY)
    assert admin.replica_links(SF) == []


def test_replica_source_must_exist(admin):
    admin.create_stream(NY)
    with pytest.raises(NotFound, match=f"stream {SF} does not exist"):
        admin.add_replica(SF, NY)


def test_replica_add_twice(admin, pair):
    admin.add_replica(SF, NY)
    with pytest.raises(AlreadyExists, match=f"{NY} is already a replica of {SF}"):
        admin.add_replica(SF, NY, paused=True)
    assert len(admin.replica_links(SF)) == 1
    assert admin.replica_links(SF)[0].paused is False


def test_replica_of_itself(admin, sf):
    with pytest.raises(InvalidArgument, match="cannot be a replica of itself"):
        admin.add_replica(SF, SF)


def test_replica_add_needs_adminperm(admin, bob, pair):
    admin.edit_stream(SF, copyperm="u:alice | u:bob")
    with pytest.raises(PermissionDenied, match="user bob does not have adminperm"):
        bob.add_replica(SF, NY)
    assert admin.replica_links(SF) == []


def test_replica_add_needs_copyperm(admin, bob, pair):
    admin.edit_stream(SF, adminperm="u:alice | u:bob")
    with pytest.raises(PermissionDenied, match="user bob does not have copyperm"):
        bob.add_replica(SF, NY)
    assert admin.replica_links(SF) == []
    admin.edit_stream(SF, copyperm="u:alice | u:bob")
    bob.add_replica(SF, NY)
    assert [r.path for r in admin.replica_links(SF)] == [NY]


def test_replica_limit_through_admin(admin, sf):
    for i in range(64):
        admin.create_stream(f"/mapr/newyork/r{i}")
        admin.add_replica(SF, f"/mapr/newyork/r{i}")
    admin.create_stream("/mapr/newyork/r64")
    with pytest.raises(LimitExceeded, match="maximum is 64"):
        admin.add_replica(SF, "/mapr/newyork/r64")
    assert len(admin.replica_links(SF)) == 64


@ON_BOTH
def test_pause_resume_remove(admin, pair):
    admin.add_replica(SF, NY)
    admin.pause_replica(SF, NY)
    assert admin.list_replicas(SF)[0].paused is True
    admin.pause_replica(SF, NY)  # retry is harmless
    assert admin.list_replicas(SF)[0].paused is True
    admin.resume_replica(SF, NY)
    assert admin.list_replicas(SF)[0].paused is False
    admin.remove_replica(SF, NY)
    assert admin.list_replicas(SF) == []
    assert admin.entry(NY)  # the replica stream itself stays


def test_remove_keeps_other_replicas(admin, pair):
    admin.create_stream("/mapr/newyork/second")
    admin.add_replica(SF, NY)
    admin.add_replica(SF, "/mapr/newyork/second", paused=True)
    admin.remove_replica(SF, NY)
    assert [(r.path, r.paused) for r in admin.replica_links(SF)] == [("/mapr/newyork/second", True)]


@pytest.mark.parametrize("action", ["pause_replica", "resume_replica", "remove_replica"])
def test_unknown_replica(admin, pair, action):
    with pytest.raises(NotFound, match=f"{NY} is not a replica of {SF}"):
        getattr(admin, action)(SF, NY)


@pytest.mark.parametrize("action", ["pause_replica", "resume_replica", "remove_replica"])
def test_replica_control_needs_adminperm(admin, bob, pair, action):
    admin.add_replica(SF, NY)
    with pytest.raises(PermissionDenied, match="adminperm"):
        getattr(bob, action)(SF, NY)
    assert admin.list_replicas(SF)[0].paused is False


def test_replica_list_on_deleted_replica_is_unexpected(admin, pair):
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    admin.delete_stream(NY)
    (row,) = admin.list_replicas(SF)
    assert row.state == "REPLICA_STATE_UNEXPECTED"
    assert f"stream {NY} does not exist" in row.errors


@ON_BOTH
def test_replica_recreated_at_the_path_is_not_the_agreed_replica(admin, pair):
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    agreed = admin.entry(NY).uuid
    admin.delete_stream(NY)
    admin.create_stream(NY, copymetafrom=SF)
    (row,) = admin.list_replicas(SF)
    assert row.state == "REPLICA_STATE_UNEXPECTED"
    assert NY in row.errors and agreed in row.errors and admin.entry(NY).uuid in row.errors


# --- upstreams -------------------------------------------------------------------------


@ON_BOTH
def test_upstream_add_needs_adminperm_on_replica(admin, bob, pair):
    # bob owns a replica; alice (owner of the source) cannot declare its upstream.
    bob.create_stream("/mapr/newyork/bobs")
    with pytest.raises(PermissionDenied, match="user alice does not have adminperm on stream /mapr/newyork/bobs"):
        admin.add_upstream("/mapr/newyork/bobs", SF)
    assert bob.upstream_links("/mapr/newyork/bobs") == []
    bob.add_upstream("/mapr/newyork/bobs", SF)
    assert [u.path for u in bob.upstream_links("/mapr/newyork/bobs")] == [SF]


def test_upstream_must_exist(admin, pair):
    with pytest.raises(NotFound, match="stream /mapr/sanfrancisco/nope does not exist"):
        admin.add_upstream(NY, "/mapr/sanfrancisco/nope")


def test_upstream_twice_and_self(admin, pair):
    admin.add_upstream(NY, SF)
    with pytest.raises(AlreadyExists, match=f"{SF} is already an upstream of {NY}"):
        admin.add_upstream(NY, SF)
    with pytest.raises(InvalidArgument, match="cannot be an upstream of itself"):
        admin.add_upstream(NY, NY)
    assert len(admin.upstream_links(NY)) == 1


@ON_BOTH
def test_topic_conflict_between_upstreams(admin, pair):
    other = "/mapr/sanfrancisco/other"
    admin.create_stream(other)
    admin.create_topic(SF, "clicks")
    admin.create_topic(SF, "views")
    admin.create_topic(other, "clicks")
    admin.create_topic(other, "orders")
    admin.add_upstream(NY, SF)
    with pytest.raises(Conflict, match="topic name conflict") as err:
        admin.add_upstream(NY, other)
    assert "clicks" in str(err.value)
    assert "views" not in str(err.value) and "orders" not in str(err.value)
    assert [u.path for u in admin.upstream_links(NY)] == [SF]


def test_distinct_topic_upstreams_accepted(admin, pair):
    other = "/mapr/sanfrancisco/other"
    admin.create_stream(other)
    admin.create_topic(SF, "clicks")
    admin.create_topic(other, "orders")
    admin.add_upstream(NY, SF)
    admin.add_upstream(NY, other)
    assert sorted(u.path for u in admin.upstream_links(NY)) == [SF, other]


def test_upstream_remove(admin, pair):
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    admin.remove_upstream(NY, SF)
    assert admin.upstream_links(NY) == []
    assert admin.list_replicas(SF)[0].state == "REPLICA_STATE_WAITING_FOR_UPSTREAM"
    with pytest.raises(NotFound, match=f"{SF} is not an upstream of {NY}"):
        admin.remove_upstream(NY, SF)


def test_upstream_remove_needs_adminperm(admin, bob, pair):
    admin.add_upstream(NY, SF)
    with pytest.raises(PermissionDenied, match="adminperm"):
        bob.remove_upstream(NY, SF)
    assert len(admin.upstream_links(NY)) == 1


def test_stream_info_counts_links(admin, pair):
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    assert admin.stream_info(SF).replicas == 1
    assert admin.stream_info(NY).upstreams == 1


# --- gateways ---------------------------------------------------------------------------


@ON_BOTH
def test_gateways_set_list_get_delete(admin):
    assert admin.gateways() == {}
    assert admin.set_gateways("newyork", "gw1 gw2:7660") == ["gw1", "gw2:7660"]
    assert admin.get_gateways("newyork") == ["gw1", "gw2:7660"]
    assert admin.gateways() == {"newyork": ["gw1", "gw2:7660"]}
    # Kept on the source cluster: the default cluster sanfrancisco, not newyork.
    assert admin.gateways("newyork") == {}
    admin.delete_gateways("newyork")
    assert admin.gateways() == {}
    with pytest.raises(NotFound, match="lists no gateways for destination cluster newyork"):
        admin.get_gateways("newyork")
    with pytest.raises(NotFound, match="lists no gateways"):
        admin.delete_gateways("newyork")


def test_gateways_set_is_idempotent_and_replaces(admin):
    admin.set_gateways("newyork", ["gw1", "gw2"])
    admin.set_gateways("newyork", ["gw1", "gw2"])
    assert admin.get_gateways("newyork") == ["gw1", "gw2"]
    admin.set_gateways("newyork", "gw3")
    assert admin.gateways() == {"newyork": ["gw3"]}


def test_gateways_on_explicit_source_cluster(admin):
    admin.set_gateways("sanfrancisco", "gwsf", cluster="newyork")
    assert admin.gateways("newyork") == {"sanfrancisco": ["gwsf"]}
    assert admin.get_gateways("sanfrancisco", cluster="newyork") == ["gwsf"]
    assert admin.gateways() == {}


def test_gateways_unknown_dst_cluster(admin):
    with pytest.raises(NotFound, match="cluster boston is not known"):
        admin.set_gateways("boston", "gw1")
    assert admin.gateways() == {}


def test_gateways_unknown_source_cluster(admin):
    with pytest.raises(NotFound, match="cluster boston is not known"):
        admin.set_gateways("newyork", "gw1", cluster="boston")


def test_gateways_bad_list(admin):
    with pytest.raises(InvalidArgument, match="listed twice"):
        admin.set_gateways("newyork", "gw1 gw1")
    with pytest.raises(InvalidArgument, match="invalid cluster name"):
        admin.set_gateways("new york", "gw1")
    with pytest.raises(InvalidArgument, match="at least one gateway"):
        admin.set_gateways("newyork", "")
    assert admin.gateways() == {}


def test_gateways_without_default_cluster(empty_home):
    with pytest.raises(NotFound, match="no default cluster"):
        StreamAdmin(empty_home, Identity("alice")).gateways()
