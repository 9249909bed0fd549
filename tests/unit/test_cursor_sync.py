"""Replicated consumer cursors (``replication/cursors.py``): ``Store.groups``, the sync's rules
(waiting, groups active on the replica, forward only, permissions), the gateway's pass, and the
``stream cursor list|sync`` commands. Each runs on embedded and on Kafka clusters."""

from __future__ import annotations

import io
import json

import pytest

from streamrep.cli.main import run
from streamrep.client import Consumer, Producer
from streamrep.errors import Conflict, PermissionDenied
from streamrep.replication.cursors import ACTIVE, BEHIND, SYNCED, UNCHANGED, WAITING, sync_cursors
from streamrep.replication.gateway import Gateway
from streamrep.replication.translate import translate_cursors

ON_BOTH = pytest.mark.backends("embedded", "kafka")
SF = "/mapr/sanfrancisco/s"
NY = "/mapr/newyork/s"


@pytest.fixture
def pair(admin):
    """SF (topic t, 2 partitions) replicating to NY, both ways agreed; consumeperm for alice only."""
    admin.create_stream(SF, consumeperm="u:alice")
    admin.create_topic(SF, "t", 2)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin


def produce(admin, n: int, tag: str = "m") -> None:
    with Producer(admin) as producer:
        for i in range(n):
            producer.send(f"{SF}:t", f"{tag}{i}", key=f"k{i}")


def consume(admin, path: str, group: str, n: int | None = None) -> list[str]:
    """Up to ``n`` messages (all with None) of ``path``:t as ``group``, then commit."""
    consumer = Consumer(f"{path}:t", group=group, from_start=True, admin=admin)
    got = []
    while n is None or len(got) < n:
        batch = consumer.poll(1 if n is None else n - len(got))
        if not batch:
            break
        got += batch
    consumer.commit()
    return [m.value.decode() for m in got]


def cursors(admin, path: str, group: str = "g") -> dict[int, int]:
    sp = admin.path(path)
    return admin.store(sp).cursors(group, admin.entry(sp).uuid, "t")


def translated(admin, group: str = "g") -> dict[int, int]:
    """The group's source cursors as translate_cursors maps them to NY (Kafka's offsets differ)."""
    return {r.partition: r.replica_offset for r in translate_cursors(admin, SF, NY, group)}


def drain(admin) -> Gateway:
    gateway = Gateway(admin, "newyork", "g1")
    gateway.cursor_sync.interval = None  # only the explicit syncs of the test
    gateway.run_once(whole=True)
    return gateway


def actions(rows) -> dict[tuple[str, int], str]:
    return {(r.group, r.partition): r.action for r in rows}


@ON_BOTH
def test_groups_are_those_with_cursors_on_the_stream(admin):
    admin.create_stream(SF)
    admin.create_topic(SF, "t", 2)
    admin.create_stream("/mapr/sanfrancisco/other")
    admin.create_topic("/mapr/sanfrancisco/other", "t", 1)
    store = admin.store(admin.path(SF))
    sf, other = admin.entry(SF).uuid, admin.entry("/mapr/sanfrancisco/other").uuid
    assert store.groups(sf) == []
    store.commit_cursors("b", sf, "t", {1: 0})
    store.commit_cursors("a", sf, "t", {0: 0})
    store.commit_cursors("elsewhere", other, "t", {0: 0})
    assert store.groups(sf) == ["a", "b"]
    assert store.groups(other) == ["elsewhere"]


@ON_BOTH
def test_a_cursor_waits_until_replicated_then_resumes_exactly(pair):
    admin = pair
    produce(admin, 60)
    first = consume(admin, SF, "g", 25)
    assert actions(sync_cursors(admin, SF, NY)) == {("g", 0): WAITING, ("g", 1): WAITING}
    assert cursors(admin, NY) == {}  # nothing moved before the messages are there
    drain(admin)
    rows = sync_cursors(admin, SF, NY)
    assert {r.action for r in rows} == {SYNCED}
    assert cursors(admin, NY) == {r.partition: r.replica_offset for r in rows}
    rest = consume(admin, SF, "other-view", None)  # everything, to compare
    resumed = consume(admin, NY, "g", None)
    assert sorted(first + resumed) == sorted(rest)  # no skip, no repeat
    # the consumer committed on the replica: from now on the group is its own there
    produce(admin, 5, tag="late")
    consume(admin, SF, "g", None)
    drain(admin)
    before = cursors(admin, NY)
    rows = sync_cursors(admin, SF, NY)
    assert all(r.action.startswith(ACTIVE) for r in rows if r.group == "g")
    assert cursors(admin, NY) == before


@ON_BOTH
def test_a_group_committed_on_the_replica_is_never_overwritten(pair):
    admin = pair
    produce(admin, 20)
    drain(admin)
    consume(admin, NY, "g", 3)  # the group works on the replica, never synced there
    mine = cursors(admin, NY)
    consume(admin, SF, "g", 10)
    rows = sync_cursors(admin, SF, NY)
    assert all(r.action == f"{ACTIVE} (a cursor was committed there)" for r in rows)
    assert cursors(admin, NY) == mine


@ON_BOTH
def test_a_cursor_only_moves_forward(pair):
    admin = pair
    produce(admin, 20)
    consume(admin, SF, "g", None)
    drain(admin)
    assert {r.action for r in sync_cursors(admin, SF, NY)} == {SYNCED}
    synced = cursors(admin, NY)
    assert {r.action for r in sync_cursors(admin, SF, NY)} == {UNCHANGED}
    sf = admin.entry(SF).uuid
    admin.store(admin.path(SF)).commit_cursors("g", sf, "t", {0: 0, 1: 0})  # reset to replay at the source
    assert {r.action for r in sync_cursors(admin, SF, NY)} == {BEHIND}
    assert cursors(admin, NY) == synced


@ON_BOTH
def test_sync_needs_consumeperm_on_source_and_replica(pair, bob, home):
    produce(pair, 5)
    consume(pair, SF, "g", None)
    with pytest.raises(PermissionDenied):
        sync_cursors(bob, SF, NY)
    pair.edit_stream(NY, consumeperm="u:bob")  # replica only: still refused at the source
    with pytest.raises(PermissionDenied):
        sync_cursors(bob, SF, NY)
    assert cursors(pair, NY) == {}


def cli(monkeypatch, user: str, *argv: str) -> tuple[int, str, str]:
    monkeypatch.setenv("STREAMREP_USER", user)
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    out, err = io.StringIO(), io.StringIO()
    status = run(list(argv), out, err, io.StringIO())
    return status, out.getvalue(), err.getvalue()


@ON_BOTH
def test_cursor_list_and_sync_commands(pair, monkeypatch):
    produce(pair, 12)
    consume(pair, SF, "g", 5)
    consume(pair, SF, "h", None)
    pair.store(pair.path(SF)).retain(pair.entry(SF).uuid, "t", force=True)
    status, out, err = cli(monkeypatch, "alice", "stream", "cursor", "list", "-path", SF, "-json")
    assert status == 0, err
    listed = json.loads(out)["data"]
    assert {(r["group"], r["partition"]) for r in listed} == {("g", 0), ("g", 1), ("h", 0), ("h", 1)}
    assert sum(r["offset"] for r in listed if r["group"] == "g") == 5
    assert all(r["lag"] == 0 for r in listed if r["group"] == "h")
    status, out, _ = cli(monkeypatch, "alice", "stream", "cursor", "list", "-path", SF, "-group", "h", "-json")
    assert {r["group"] for r in json.loads(out)["data"]} == {"h"}
    drain(pair)
    status, out, err = cli(monkeypatch, "alice", "stream", "cursor", "sync", "-path", SF, "-replica", NY, "-json")
    assert status == 0, err
    assert {r["action"] for r in json.loads(out)["data"]} == {SYNCED}
    status, out, err = cli(monkeypatch, "bob", "stream", "cursor", "sync", "-path", SF, "-replica", NY)
    assert status == 1 and out == "" and len(err.strip().splitlines()) == 1 and "consumeperm" in err, err


@ON_BOTH
def test_the_gateway_pass_syncs_at_most_every_interval(pair):
    admin = pair
    produce(admin, 30)
    gateway = Gateway(admin, "newyork", "g1")
    gateway.run_once()  # the first pass syncs at once: nothing committed yet
    consume(admin, SF, "g", 10)
    gateway.run_once()  # within the interval: no sync
    assert cursors(admin, NY) == {}
    gateway.cursor_sync.interval = 0
    gateway.run_once()
    assert cursors(admin, NY) == translated(admin)
    assert actions(gateway.cursor_sync.rows) == {("g", 0): SYNCED, ("g", 1): SYNCED}
    assert sorted(consume(admin, NY, "g", None)) == sorted(consume(admin, SF, "g", None))  # the other 20


@pytest.mark.backends("kafka")
def test_kafka_group_with_members_on_the_replica_is_left_alone(pair, backend):
    """A native Kafka consumer holds the group on the replica: the sync skips it, and Kafka itself
    refuses an offset change for a live group (a Conflict, not an Unavailable)."""
    from confluent_kafka import Consumer as KafkaConsumer

    admin = pair
    produce(admin, 10)
    consume(admin, SF, "g", None)
    drain(admin)
    store = admin.store(admin.path(NY))
    ny = admin.entry(NY).uuid
    native = KafkaConsumer(
        {
            "bootstrap.servers": store.bootstrap,
            "group.id": store._group("g"),
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        native.subscribe([store.native_topic(ny, "t")])
        for _ in range(100):  # joined once it is assigned its partitions
            native.poll(0.1)
            if native.assignment():
                break
        assert native.assignment()
        assert store.active_groups(["g", "nobody"]) == {"g"}
        rows = sync_cursors(admin, SF, NY)
        assert all(r.action == f"{ACTIVE} (the group has members there)" for r in rows)
        assert cursors(admin, NY) == {}
        with pytest.raises(Conflict, match="is active"):
            store.commit_cursors("g", ny, "t", {0: 1})
    finally:
        native.close()


@ON_BOTH
def test_takeover_adopts_the_replicas_own_cursors_for_a_failback(pair):
    """A failback: the group committed on NY (the old source, its consumers now stopped). Without
    takeover it counts as active there; with it, it is adopted and moved forward from then on."""
    admin = pair
    produce(admin, 20)
    drain(admin)
    consume(admin, NY, "g", 4)
    consume(admin, SF, "g", 12)
    assert {r.action for r in sync_cursors(admin, SF, NY)} == {f"{ACTIVE} (a cursor was committed there)"}
    rows = sync_cursors(admin, SF, NY, takeover=True)
    assert {r.action for r in rows} <= {SYNCED, UNCHANGED} and SYNCED in {r.action for r in rows}
    assert cursors(admin, NY) == translated(admin)
    consume(admin, SF, "g", 3)  # later passes need no takeover
    assert SYNCED in {r.action for r in sync_cursors(admin, SF, NY)}
    assert cursors(admin, NY) == translated(admin)


@ON_BOTH
def test_a_cursor_on_a_partition_that_never_held_a_message_is_synced(pair):
    admin = pair
    with Producer(admin) as producer:
        for i in range(6):
            producer.send(f"{SF}:t", f"m{i}", partition=0)
    consume(admin, SF, "g", None)  # commits partition 1 at its start: nothing there to replicate
    drain(admin)
    assert actions(sync_cursors(admin, SF, NY)) == {("g", 0): SYNCED, ("g", 1): SYNCED}
    assert cursors(admin, NY) == translated(admin)
