"""Issue 21 item 3: the fan-in topic rule, always. Two upstreams of one replica may not share a
topic name unless they share it by design (one feeds the other, or a common source feeds both, as
in a mesh). A topic created later on one upstream whose name another upstream has is refused at
``topic create`` and at a producer's autocreate; one that appeared by another path is not
replicated from the later upstream, whose link shows the error naming both upstreams: never merged.
"""

from __future__ import annotations

import io

import pytest
from replication_helpers import drain, one_line_error, produce

from streamrep.cli.main import run
from streamrep.errors import Conflict
from streamrep.model.replication import ReplicaState
from streamrep.replication.gateway import Gateway

SF = "/mapr/sanfrancisco/activity"
OTHER = "/mapr/tokyo/other"
AGG = "/mapr/newyork/agg"
ON_BOTH = pytest.mark.backends("embedded", "kafka")


@pytest.fixture
def fan_in(admin, add_cluster):
    """SF (topic orders) and OTHER (topic views) both replicate into AGG, agreed both ways."""
    add_cluster(admin.clusters, "tokyo")
    for path, topic in ((SF, "orders"), (OTHER, "views")):
        admin.create_stream(path, ttl=0)
        admin.create_topic(path, topic, 2)
    admin.create_stream(AGG, ttl=0)
    for path in (SF, OTHER):
        admin.add_replica(path, AGG)
        admin.add_upstream(AGG, path)
    return admin


def values(admin, path: str, topic: str) -> list[str]:
    entry = admin.entry(path)
    store = admin.store(admin.path(path))
    count = store.topics(entry.uuid).get(topic, 0)
    return sorted(m.value.decode() for p in range(count) for m in store.read(entry.uuid, topic, p, 0, 10_000))


def link_of(admin, source: str):
    (row,) = [r for r in admin.list_replicas(source) if r.replica_path == AGG]
    return row


@ON_BOTH
def test_a_topic_whose_name_another_upstream_has_is_not_created(fan_in):
    admin = fan_in
    with pytest.raises(Conflict) as refused:
        admin.create_topic(OTHER, "orders")
    line = str(refused.value)
    assert SF in line and OTHER in line and AGG in line and "orders" in line and "\n" not in line
    with pytest.raises(Conflict, match="topic name conflict: upstreams .* both have topic orders"):
        produce(admin, f"{OTHER}:orders", ["other-o1"])  # autocreate on produce
    assert set(admin.store(admin.path(OTHER)).topics(admin.entry(OTHER).uuid)) == {"views"}
    admin.create_topic(OTHER, "clicks")  # a name no other upstream has is fine


def test_topic_create_refusal_on_the_cli(fan_in, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    out, err = io.StringIO(), io.StringIO()
    status = run(["stream", "topic", "create", "-path", OTHER, "-topic", "orders"], out, err)
    one_line_error((status, out.getvalue(), err.getvalue()), SF, OTHER, AGG)
    assert set(fan_in.store(fan_in.path(OTHER)).topics(fan_in.entry(OTHER).uuid)) == {"views"}


@ON_BOTH
def test_a_topic_that_appeared_by_another_path_is_stopped_never_merged(fan_in):
    admin = fan_in
    produce(admin, f"{SF}:orders", ["sf-o1", "sf-o2"])
    gateway = Gateway(admin, "newyork", "g1")
    drain(gateway)
    assert values(admin, AGG, "orders") == ["sf-o1", "sf-o2"]
    # other:orders appears without the check (a plain Kafka client, or a cluster that cannot see SF's)
    other = admin.entry(OTHER)
    admin.store(admin.path(OTHER)).create_topic(other.uuid, "orders", 3)
    produce(admin, f"{OTHER}:orders", ["other-o1"])
    produce(admin, f"{OTHER}:views", ["other-v1"])
    produce(admin, f"{SF}:orders", ["sf-o3"])
    drain(gateway)
    assert values(admin, AGG, "orders") == ["sf-o1", "sf-o2", "sf-o3"]  # never merged
    assert values(admin, AGG, "views") == ["other-v1"]  # the rest of OTHER still flows
    assert admin.store(admin.path(AGG)).topics(admin.entry(AGG).uuid)["orders"] == 2  # not widened
    stopped = link_of(admin, OTHER)
    assert stopped.state is ReplicaState.UNEXPECTED
    assert SF in stopped.errors and OTHER in stopped.errors and AGG in stopped.errors
    assert f"{OTHER}:orders is not replicated" in stopped.errors
    assert link_of(admin, SF).state is ReplicaState.REPLICATING
    # once the name is unique again, the error clears
    admin.delete_topic(OTHER, "orders")
    drain(gateway)
    assert link_of(admin, OTHER).state is ReplicaState.REPLICATING and link_of(admin, OTHER).errors is None
    gateway.stop()


def test_the_replica_keeps_the_topic_it_already_holds_whatever_the_upstream_order(fan_in):
    """OTHER's orders flowed first; SF (listed first) gets an orders later: SF's is stopped."""
    admin = fan_in
    admin.store(admin.path(OTHER)).create_topic(admin.entry(OTHER).uuid, "payments", 1)
    produce(admin, f"{OTHER}:payments", ["other-p1"])
    gateway = Gateway(admin, "newyork", "g1")
    drain(gateway)
    admin.store(admin.path(SF)).create_topic(admin.entry(SF).uuid, "payments", 1)
    produce(admin, f"{SF}:payments", ["sf-p1"])
    drain(gateway)
    assert values(admin, AGG, "payments") == ["other-p1"]
    assert f"{SF}:payments is not replicated" in link_of(admin, SF).errors
    gateway.stop()


def test_upstreams_that_share_a_name_by_design_are_accepted(admin, add_cluster):
    """A two-way pair holds each other's topics: a third stream may take both as upstreams, and
    gets each message once (origin marks), where the old rule refused it."""
    add_cluster(admin.clusters, "tokyo")
    ny = "/mapr/newyork/activity"
    for path, topic in ((SF, "ta"), (ny, "tb")):
        admin.create_stream(path, ttl=0)
        admin.create_topic(path, topic, 1)
    for a, b in ((SF, ny), (ny, SF)):
        admin.add_replica(a, b)
        admin.add_upstream(b, a)
    produce(admin, f"{SF}:ta", ["a1"])
    produce(admin, f"{ny}:tb", ["b1"])
    drain(Gateway(admin, "newyork", "g1"), Gateway(admin, "sanfrancisco", "g1"))
    admin.create_stream(AGG, ttl=0)
    for path in (SF, ny):
        admin.add_replica(path, AGG)
        admin.add_upstream(AGG, path)  # SF and NY both have ta and tb, from each other
    admin.create_topic(SF, "tc", 1)  # and a new topic on one of them is fine too
    drain(Gateway(admin, "newyork", "g1"), Gateway(admin, "sanfrancisco", "g1"))
    assert values(admin, AGG, "ta") == ["a1"] and values(admin, AGG, "tb") == ["b1"]
    assert all(r.errors is None for r in admin.list_replicas(SF))
