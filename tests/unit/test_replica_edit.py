"""Issue 21 item 1: ``stream replica edit``, as MapR's: ``-synchronous``, ``-newreplica`` (the
replica's new path after a rename or move: the same stream, by UUID) and the network options
``replica add`` takes, changed in place and listed at once; refused in one line, changing nothing."""

from __future__ import annotations

import io
import json

import pytest

from streamrep.cli.main import run
from streamrep.client import Producer
from streamrep.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from streamrep.model import network
from streamrep.model.replication import ReplicaState
from streamrep.replication.gateway import Gateway

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
NY2 = "/mapr/ny2/activity"  # the same stream, once newyork is registered as ny2
ON_BOTH = pytest.mark.backends("embedded", "kafka")


@pytest.fixture
def linked(admin):
    """SF with topic t and 3 messages, replicated to NY (agreed both ways)."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 2)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    with Producer(admin) as producer:
        for i in range(3):
            producer.send(f"{SF}:t", f"m{i}".encode())
    return admin


def listed(admin) -> dict:
    (only,) = admin.list_replicas(SF)
    return {name: getattr(only, name) for name in ("replica_path", "synchronous", *network.link_option_names())}


def rename_cluster(admin, old: str, new: str) -> None:
    """Register cluster ``old``'s store under the name ``new`` (what a renamed cluster is here)."""
    info = admin.clusters.get(old)
    admin.clusters.remove(old)
    admin.clusters.add(new, url=info.url, settings=info.settings)


@ON_BOTH
def test_edit_changes_only_what_is_given_and_lists_it_at_once(linked):
    before = linked.entry(SF).replicas[0]
    link = linked.edit_replica(SF, NY, synchronous=True, networkcompression="zstd")
    assert listed(linked) == {
        "replica_path": NY,
        "synchronous": True,
        "throttle": False,
        "networkencryption": False,
        "networkcompression": "zstd",
        "maxbytespersec": 0,
    }
    assert link == linked.entry(SF).replicas[0]
    assert (link.uuid, link.added, link.paused) == (before.uuid, before.added, before.paused)
    linked.edit_replica(SF, NY, throttle="true")
    assert listed(linked)["throttle"] is True and listed(linked)["networkcompression"] == "zstd"
    linked.edit_replica(SF, NY, synchronous=False)
    assert listed(linked)["synchronous"] is False


def test_every_network_option_of_replica_add_is_editable(linked):
    """Edit takes the options ``replica add`` defines (``network.link_option_names``), so an option
    added there is editable with no other code."""
    values = {"throttle": True, "networkencryption": True, "networkcompression": "snappy", "maxbytespersec": 2_000_000}
    assert set(values) == set(network.link_option_names())
    linked.edit_replica(SF, NY, **values)
    assert {k: listed(linked)[k] for k in values} == values


def test_made_asynchronous_a_replica_that_fell_back_is_replicating_again(linked):
    linked.edit_replica(SF, NY, synchronous=True)
    linked.set_replica_state(SF, NY, ReplicaState.SYNC_FALLBACK)
    linked.edit_replica(SF, NY, synchronous=False)
    assert linked.entry(SF).replicas[0].state is ReplicaState.REPLICATING


@ON_BOTH
def test_newreplica_follows_the_same_stream_to_its_new_path(linked):
    replica_uuid = linked.entry(NY).uuid
    Gateway(linked, "newyork", "gw1").run_once(whole=True)
    rename_cluster(linked, "newyork", "ny2")
    # the link names a path no cluster has now: nothing flows until it follows the stream
    assert linked.list_replicas(SF)[0].state is ReplicaState.UNEXPECTED
    link = linked.edit_replica(SF, NY, newreplica=NY2)
    assert (link.path, link.uuid) == (NY2, replica_uuid)
    assert listed(linked)["replica_path"] == NY2
    with Producer(linked) as producer:
        for i in range(3, 5):
            producer.send(f"{SF}:t", f"m{i}".encode())
    gateway = Gateway(linked, "ny2", "gw1")
    assert gateway.run_once(whole=True) == 2  # only the new ones: positions are kept by UUID
    gateway.stop()
    held = sorted(
        m.value.decode() for p in range(2) for m in linked.store(linked.path(NY2)).read(replica_uuid, "t", p, 0, 100)
    )
    assert held == [f"m{i}" for i in range(5)]


def test_newreplica_must_be_the_same_stream(linked):
    linked.create_stream("/mapr/newyork/other", copymetafrom=SF)
    before = linked.entry(SF)
    with pytest.raises(InvalidArgument, match=r"is stream .*, not replica .*: -newreplica takes the replica's new"):
        linked.edit_replica(SF, NY, newreplica="/mapr/newyork/other", synchronous=True)
    with pytest.raises(NotFound, match="does not exist"):
        linked.edit_replica(SF, NY, newreplica="/mapr/newyork/nothing")
    assert linked.entry(SF) == before


def test_newreplica_may_not_be_another_replica(linked):
    linked.create_stream("/mapr/newyork/second", copymetafrom=SF)
    linked.add_replica(SF, "/mapr/newyork/second")
    with pytest.raises(AlreadyExists, match="/mapr/newyork/second is already a replica of"):
        linked.edit_replica(SF, NY, newreplica="/mapr/newyork/second")


def test_newreplica_moves_the_reverse_link_of_multimaster(linked):
    linked.add_replica(NY, SF)
    linked.add_upstream(SF, NY)
    rename_cluster(linked, "newyork", "ny2")
    linked.edit_replica(SF, NY, newreplica=NY2)
    (upstream,) = linked.entry(SF).upstreams
    assert (upstream.path, upstream.uuid) == (NY2, linked.entry(NY2).uuid)


def test_edit_refusals_change_nothing(linked, bob):
    before = linked.entry(SF)
    cases = [
        (lambda: linked.edit_replica(SF, NY), InvalidArgument, "needs one of -newreplica, -synchronous"),
        (lambda: linked.edit_replica(SF, NY, networkcompression="lzf"), InvalidArgument, "no LZF codec"),
        (lambda: linked.edit_replica(SF, NY, throttle="maybe"), InvalidArgument, "invalid throttle"),
        (lambda: linked.edit_replica(SF, NY, synchronous="2"), InvalidArgument, "invalid synchronous"),
        (lambda: linked.edit_replica(SF, NY, paused=True), InvalidArgument, "has no option paused"),
        (lambda: linked.edit_replica(SF, "/mapr/newyork/x", throttle=True), NotFound, "is not a replica of"),
        (lambda: bob.edit_replica(SF, NY, throttle=True), PermissionDenied, "user bob does not have adminperm"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind, match=text):
            call()
    assert linked.entry(SF) == before


def test_edit_needs_copyperm_as_replica_add(linked, bob):
    linked.edit_stream(SF, adminperm="u:alice | u:bob")
    with pytest.raises(PermissionDenied, match="user bob does not have copyperm"):
        bob.edit_replica(SF, NY, synchronous=True)
    linked.edit_stream(SF, copyperm="u:alice | u:bob")
    bob.edit_replica(SF, NY, synchronous=True)
    assert listed(linked)["synchronous"] is True


def cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return run(list(args), out, err), out.getvalue(), err.getvalue()


def test_cli_edit_then_list(linked, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    status, _, err = cli(
        "stream", "replica", "edit", "-path", SF, "-replica", NY, "-synchronous", "-networkcompression", "gzip"
    )
    assert (status, err) == (0, "")
    status, out, _ = cli("stream", "replica", "list", "-path", SF, "-json")
    (row,) = json.loads(out)["data"]
    assert (row["synchronous"], row["networkcompression"], row["throttle"]) == (True, "gzip", False)
    status, _, err = cli("stream", "replica", "edit", "-path", SF, "-replica", NY, "-networkcompression", "lzf")
    assert status == 1 and err.startswith("streamrep: error: networkcompression lzf") and err.count("\n") == 1
    status, _, err = cli("stream", "replica", "edit", "-path", SF, "-replica", NY)
    assert status == 1 and "needs one of -newreplica" in err and err.count("\n") == 1
