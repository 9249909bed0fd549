"""diffstreams beyond one link: a mesh of three masters, a fan-out whose two replicas are compared,
and a chain A->B->C compared end to end (issue 32). Real gateways stopped mid-flight: what one side
has applied of a third stream and the other has not yet is in flight, never a difference; a planted
difference is still found. Both variants, on embedded clusters and on Kafka."""

from __future__ import annotations

import pytest
from replication_helpers import drain, produce

from streamrep.model.message import Message
from streamrep.model.replication import stop_key
from streamrep.replication.diff import Kind, diff_streams, diff_streams_crc
from streamrep.replication.gateway import Gateway

pytestmark = pytest.mark.backends("embedded", "kafka")
VARIANTS = pytest.mark.parametrize("compare", [diff_streams, diff_streams_crc], ids=["full", "crc"])

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
TK = "/mapr/tokyo/activity"
CLUSTERS = ("sanfrancisco", "newyork", "tokyo")


@pytest.fixture
def api3(api, add_cluster):
    """Three clusters on the test's backend: sanfrancisco, newyork and tokyo."""
    for name in CLUSTERS:
        add_cluster(api.clusters, name)
    return api


def link(admin, source: str, replica: str) -> None:
    admin.add_replica(source, replica)
    admin.add_upstream(replica, source)


def gateway(admin, cluster: str) -> Gateway:
    return Gateway(admin, cluster, "g1")


def kinds(result) -> dict[str, int]:
    return {k.value: result.count(k) for k in Kind if result.count(k)}


def plant_own(admin, path: str, topic: str) -> None:
    """A message of its own in ``path``, written as a plain client of its cluster would."""
    sp = admin.path(path)
    admin.store(sp).append(admin.entry(sp).uuid, topic, {0: [Message(b"planted", b"p")]})


def recreate_topic(admin, path: str, topic: str) -> None:
    """The topic deleted and created again by the cluster's own tools: what it held is gone, while
    its marks say it was applied."""
    sp = admin.path(path)
    store, uuid = admin.store(sp), admin.entry(sp).uuid
    partitions = store.topics(uuid)[topic]
    store.delete_topic(uuid, topic)
    store.create_topic(uuid, topic, partitions)


@VARIANTS
def test_a_mesh_of_three_mid_flight_is_the_same_and_a_planted_difference_is_found(api3, compare):
    """SF, NY and TK each other's replica and upstream, a topic each. TK's messages reach SF directly
    and not yet NY: in flight for NY, wherever they come from."""
    api = api3
    for path, topic in ((SF, "ta"), (NY, "tb"), (TK, "tc")):
        api.create_stream(path, ttl=0)
        api.create_topic(path, topic, 2)
    for a in (SF, NY, TK):
        for b in (SF, NY, TK):
            if a != b:
                link(api, a, b)
    produce(api, f"{SF}:ta", [f"a{i}" for i in range(10)])
    produce(api, f"{NY}:tb", [f"b{i}" for i in range(10)])
    drain(*(gateway(api, c) for c in CLUSTERS))
    produce(api, f"{TK}:tc", [f"c{i}" for i in range(12)])
    gateway(api, "sanfrancisco").run_once()  # SF gets TK's 12; NY gets none, from TK nor from SF
    result = compare(api, SF, NY)
    assert result.same and kinds(result) == {}, result.summary()
    assert (result.dst_behind, result.src_behind) == (12, 0)
    produce(api, f"{NY}:tb", [f"b{i}" for i in range(10, 13)])  # and 3 the other way
    assert (compare(api, SF, NY).dst_behind, compare(api, SF, NY).src_behind) == (12, 3)
    plant_own(api, NY, "tc")  # NY's own message in TK's topic: SF never gets it (origin NY) but TK does
    result = compare(api, SF, NY)
    assert result.same and result.src_behind == 4  # in flight: SF replicates NY
    drain(*(gateway(api, c) for c in CLUSTERS))
    result = compare(api, SF, NY)
    assert result.same and (result.dst_behind, result.src_behind) == (0, 0)
    recreate_topic(api, NY, "tc")  # NY lost TK's messages, while its marks say it has them
    result = compare(api, SF, NY)
    assert result.count(Kind.MISSING_IN_DST) == 12 and result.dst_behind == 0 and not result.same


@VARIANTS
def test_two_replicas_of_one_source_compared_with_each_other(api3, compare):
    """A fan-out TK -> SF, TK -> NY, SF and NY not linked: what SF has of TK and NY not yet is in
    flight (NY's origin mark for TK says it has not got there); what NY has applied and lost is not."""
    api = api3
    api.create_stream(TK, ttl=0)
    api.create_topic(TK, "t", 2)
    for replica in (SF, NY):
        api.create_stream(replica, copymetafrom=TK)
        link(api, TK, replica)
    produce(api, f"{TK}:t", [f"v{i}" for i in range(8)])
    drain(gateway(api, "sanfrancisco"), gateway(api, "newyork"))
    produce(api, f"{TK}:t", [f"v{i}" for i in range(8, 20)])
    gateway(api, "sanfrancisco").run_once()
    result = compare(api, SF, NY)
    assert result.same and (result.dst_behind, result.src_behind) == (12, 0), result.summary()
    assert not result.dst_replicates_src and not result.src_replicates_dst
    plant_own(api, NY, "t")  # NY's own message: SF will never get it
    assert kinds(compare(api, SF, NY)) == {"extra in dst": 1}
    drain(gateway(api, "newyork"))
    result = compare(api, SF, NY)
    assert kinds(result) == {"extra in dst": 1} and result.dst_behind == 0
    recreate_topic(api, SF, "t")
    result = compare(api, SF, NY)
    assert kinds(result) == {"extra in dst": 21} and result.src_behind == 0  # SF's marks say it had them


@VARIANTS
def test_a_chain_compared_end_to_end(api3, compare):
    """SF -> NY -> TK, SF compared with TK: TK's marks are for NY's partitions, its origin marks say
    how far it has got of SF. A message still at NY is in flight; one TK lost is missing."""
    api = api3
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", 2)
    api.create_stream(NY, copymetafrom=SF)
    api.create_stream(TK, copymetafrom=SF)
    link(api, SF, NY)
    link(api, NY, TK)
    produce(api, f"{SF}:t", [f"v{i}" for i in range(10)])
    g_ny, g_tk = gateway(api, "newyork"), gateway(api, "tokyo")
    drain(g_ny, g_tk)
    produce(api, f"{SF}:t", [f"v{i}" for i in range(10, 16)])
    result = compare(api, SF, TK)  # at SF only
    assert result.same and result.dst_behind == 6, result.summary()
    g_ny.run_once()  # at NY, not yet at TK
    result = compare(api, SF, TK)
    assert result.same and result.dst_behind == 6
    drain(g_ny, g_tk)
    result = compare(api, SF, TK)
    assert result.same and result.dst_behind == 0 and result.compared == 32
    tk = api.path(TK)
    tk_uuid, ny_uuid = api.entry(tk).uuid, api.entry(NY).uuid
    for partition in (0, 1):  # a failover stops NY -> TK: what is at SF only is no longer in flight
        stop = stop_key(ny_uuid, "t", partition)
        api.store(tk).apply(tk_uuid, "t", partition, [], {stop: 1}, {stop: None})
    produce(api, f"{SF}:t", ["late"])
    result = compare(api, SF, TK)
    assert kinds(result) == {"missing in dst": 1} and result.dst_behind == 0
