"""Failover and failback (``replication/failover/``) on real embedded and Kafka clusters, with
in-process gateways: the plan, failover with the source up and with its cluster unreachable,
failback copying back only what the source lacks, retries and refusals."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from contextlib import contextmanager

import pytest

from integration.replication_helpers import clean_env
from integration.round_trips import App, own_admin, round_trips, with_bystanders
from matrix import FULL_MATRIX
from streamrep.client.admin import StreamAdmin
from streamrep.client.config import Clusters
from streamrep.client.consumer import Consumer
from streamrep.client.producer import Producer
from streamrep.errors import Conflict, InvalidArgument, NotFound, PermissionDenied, RetryNow, Unavailable
from streamrep.model.ace import Identity
from streamrep.model.failover import FailoverRecord, FailoverStage, FailoverState, WritesRefused
from streamrep.model.message import Message
from streamrep.model.replication import stop_key
from streamrep.replication.failover import failback, failback_plan, failover, failover_plan
from streamrep.replication.gateway import Gateway
from streamrep.replication.status import replica_status
from streamrep.replication.transfer import FlowStopped, SourcePartition, apply_batch

ON_BOTH = pytest.mark.backends("embedded", "kafka")
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
LINKED, FAILED_OVER = FailoverStage.LINKED, FailoverStage.FAILED_OVER
GRACE = 1.1  # > 2 * FAILOVER_CHECK_SECONDS: the producers below see a record change within it


@pytest.fixture
def linked(admin):
    """SF (topic t, two partitions, ttl 0) replicating to NY, agreed both ways."""
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", 2)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    return admin


def produce(admin, path, keys):
    with Producer(admin) as producer:
        for key in keys:
            producer.send(f"{path}:t", f"v-{key}", key=key)


def held(admin, path) -> Counter:
    """Every message key the stream holds, counted."""
    keys: Counter = Counter()
    consumer = Consumer(f"{path}:t", from_start=True, admin=admin)
    while batch := consumer.poll(10_000):
        keys.update(m.key.decode() for m in batch)
    return keys


def drain(admin, cluster):
    """Replicate everything available now into ``cluster``."""
    gateway = Gateway(admin, cluster, "gw-drain")
    while gateway.run_once(whole=True):
        pass
    gateway.stop()


@contextmanager
def gateways(admin, *clusters):
    """In-process gateways of ``clusters``, running in threads until the block ends."""
    stop = threading.Event()
    errors = []

    def loop(cluster):
        gateway = Gateway(admin, cluster, f"gw-{cluster}")
        try:
            while not stop.is_set():
                if gateway.run_once() == 0:
                    time.sleep(0.05)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)
        finally:
            gateway.stop()

    threads = [threading.Thread(target=loop, args=(c,), daemon=True) for c in clusters]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors


def unreachable_source(home: Clusters, tmp_path, backend) -> StreamAdmin:
    """Alice's admin with a registry that points cluster sanfrancisco nowhere (a missing file, or
    a Kafka bootstrap where nothing listens): the source's cluster is lost; newyork is unchanged."""
    import sys

    with open(home.registry_path) as f:
        data = json.load(f)
    sf = data["clusters"]["sanfrancisco"]
    if backend == "embedded":
        sf["url"] = f"embedded:{tmp_path / 'lost' / 'sanfrancisco.db'}"
    else:
        (port,) = sys.modules["kafka_local"].free_ports(1)  # loaded by conftest
        sf["url"] = f"kafka://127.0.0.1:{port}"
    lost = tmp_path / "lost-home"
    lost.mkdir()
    (lost / "clusters.json").write_text(json.dumps(data))
    return StreamAdmin(Clusters(str(lost)), Identity(user="alice", groups=frozenset({"eng"})))


# -- the plan ----------------------------------------------------------------------------------
@ON_BOTH
def test_plan_shows_lag_pending_gateways_and_groups_and_changes_nothing(linked):
    admin = linked
    produce(admin, SF, [f"k{i}" for i in range(6)])
    Consumer(f"{SF}:t", group="billing", from_start=True, admin=admin).commit()
    Gateway(admin, "newyork", "gw1").heartbeat()  # live, but has applied nothing
    plan = failover_plan(admin, SF, NY)
    assert plan.stage == LINKED and plan.source_reachable is True
    assert plan.pending_messages == 6 and plan.bytes_pending == sum(len(f"v-k{i}") for i in range(6))
    assert plan.lag_millis >= 0
    assert [(t.topic, t.pending_messages) for t in plan.topics] == [("t", 6)]
    assert plan.gateways == ["gw1"]
    assert plan.groups == ["billing"]
    assert plan.force_needed is False
    assert any("6 pending" in step for step in plan.steps)
    assert admin.entry(SF).failover is None and admin.entry(NY).failover is None
    assert [u.path for u in admin.entry(NY).upstreams] == [SF]


# -- failover with the source up ---------------------------------------------------------------
@ON_BOTH
def test_failover_drains_stops_the_flow_places_cursors_and_moves_producers(linked):
    admin = linked
    keys = [f"k{i}" for i in range(20)]
    produce(admin, SF, keys)
    consumer = Consumer(f"{SF}:t", group="billing", from_start=True, admin=admin)
    read = consumer.poll(7)
    consumer.commit()
    with gateways(admin, "newyork"):
        result = failover(admin, SF, NY, timeout=60, grace=GRACE)
    assert result.forced is False and result.missing == 0 and result.late_messages == 0
    assert held(admin, NY) == Counter(keys)  # drained before the stop
    # the flow is stopped: no upstream, the link says so, and stop marks refuse any apply
    assert admin.entry(NY).upstreams == ()
    (row,) = replica_status(admin, SF)
    assert row.state == "REPLICA_STATE_FAILED_OVER" and row.errors is None
    assert admin.stream_info(NY).failover.state is FailoverState.PROMOTED
    assert admin.stream_info(SF).failover.describe() == f"failed over to {NY}"
    # cursors: the group resumes on the replica after its last commit
    assert {r.action for r in result.cursors if r.group == "billing" and r.source_offset} <= {
        "synced",
        "unchanged",
    }
    rest = Consumer(f"{NY}:t", group="billing", admin=admin)
    after = []
    while batch := rest.poll(1000):
        after += batch
    assert sorted(m.key.decode() for m in read + after) == sorted(keys)
    # producers: refused on the old source with where to go; the replica takes writes
    with pytest.raises(WritesRefused) as refused:
        produce(admin, SF, ["late"])
    assert refused.value.target == NY and "produce to" in str(refused.value)
    produce(admin, NY, ["new"])
    assert held(admin, NY)["new"] == 1
    # no gateway applies to the replica afterwards, even from a source write that bypasses producers
    entry = admin.entry(SF)
    admin.store(admin.path(SF)).append(entry.uuid, "t", {0: [Message(b"x", b"bypass")]})
    drain(admin, "newyork")
    assert "bypass" not in held(admin, NY)
    unit = SourcePartition(entry.uuid, "t", 0, admin.path(SF))
    ny = admin.entry(NY)
    assert stop_key(entry.uuid, "t", 0) in admin.store(admin.path(NY)).marks(ny.uuid)
    batch = admin.store(admin.path(SF)).read(entry.uuid, "t", 0, 0, 100)
    with pytest.raises(FlowStopped):
        apply_batch(admin.store(admin.path(NY)), ny.uuid, unit, batch)


def test_a_batch_in_flight_when_the_flow_stops_is_refused(linked):
    """The stop mark is in the apply's compare-and-set: a gateway that read the marks before the
    stop cannot commit after it."""
    admin = linked
    drain(admin, "newyork")  # the replica has the topic
    src, ny = admin.entry(SF), admin.entry(NY)
    store = admin.store(admin.path(NY))
    key = stop_key(src.uuid, "t", 0)
    store.apply(ny.uuid, "t", 0, [], {key: 1}, {key: None})  # the failover's stop, after the gateway's read
    with pytest.raises(RetryNow):
        store.apply(ny.uuid, "t", 0, [Message(b"v", b"k")], {}, {key: None})
    assert held(admin, NY) == Counter()


@ON_BOTH
def test_failover_times_out_without_gateways_and_changes_nothing(linked):
    admin = linked
    produce(admin, SF, ["a", "b", "c"])
    with pytest.raises(Unavailable) as failed:
        failover(admin, SF, NY, timeout=0.5, grace=0.1)
    message = str(failed.value)
    assert "still lacks 3 messages" in message and "live gateways: none" in message and "\n" not in message
    assert admin.entry(SF).failover is None and admin.entry(NY).failover is None
    assert [u.path for u in admin.entry(NY).upstreams] == [SF]
    produce(admin, SF, ["d"])  # producers write to the source again


# -- forced failover: the source's cluster is lost ---------------------------------------------
@ON_BOTH
def test_forced_failover_with_the_source_cluster_unreachable_then_failback(linked, home, tmp_path, backend):
    admin = linked
    produce(admin, SF, ["a", "b", "c"])
    drain(admin, "newyork")
    produce(admin, SF, ["lagging1", "lagging2"])  # never replicated before the loss
    lost = unreachable_source(home, tmp_path, backend)
    plan = failover_plan(lost, SF, NY)
    assert plan.source_reachable is False and plan.force_needed is True and plan.pending_messages is None
    with pytest.raises(Unavailable) as refused:
        failover(lost, SF, NY)
    assert "use -force true" in str(refused.value) and "\n" not in str(refused.value)
    result = failover(lost, SF, NY, force=True)
    assert result.forced is True and "may be missing" in result.result
    # what is known: the last lag sample (0, taken by the drain before the two were produced),
    # its time, and that anything produced after it may be missing as well
    assert "the last lag sample, at " in result.result and "was 0 messages behind" in result.result
    assert f"anything produced on {SF} after that time may be missing as well" in result.result
    assert "up to 0 messages" not in result.result
    assert lost.entry(NY).failover.state == "PROMOTED" and lost.entry(NY).upstreams == ()
    produce(lost, NY, ["ny1", "ny2"])
    # the source's cluster is back: a rerun finds it failed over and refuses the source's producers
    again = failover(admin, SF, NY)
    assert again.already_done is True and "already failed over" in again.result
    with pytest.raises(WritesRefused):
        produce(admin, SF, ["split-brain"])
    with gateways(admin, "sanfrancisco", "newyork"):
        back = failback(admin, SF, NY, timeout=60, grace=GRACE)
        deadline = time.monotonic() + 60
        while held(admin, NY)["lagging2"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
    assert back.copied_back == 2  # only what was produced on the promoted stream
    assert back.lacked == 2 and "the 2 messages" in back.result  # exact, now that the source is readable
    everything = Counter(["a", "b", "c", "lagging1", "lagging2", "ny1", "ny2"])
    assert held(admin, SF) == everything  # the lagging messages never left the source
    assert held(admin, NY) == everything  # and reach the replica once the flow is restored


# -- failback ----------------------------------------------------------------------------------
@ON_BOTH
def test_failback_copies_back_only_what_the_source_lacks_and_restores_the_link(linked):
    admin = linked
    old = [f"old{i}" for i in range(30)]
    produce(admin, SF, old)
    with gateways(admin, "newyork"):
        failover(admin, SF, NY, timeout=60, grace=GRACE)
    new = [f"new{i}" for i in range(7)]
    produce(admin, NY, new)
    reverse = failback(admin, SF, NY, phase="reverse")
    assert "7 messages to copy back" in reverse.result
    plan = failback_plan(admin, SF, NY)
    assert plan.stage == "failing back" and plan.to_copy_back == 7  # not the 30 that came from SF
    with pytest.raises(WritesRefused) as refused:
        produce(admin, SF, ["too-early"])
    assert refused.value.target == NY
    assert failback(admin, SF, NY, phase="reverse").already_done is True
    with gateways(admin, "sanfrancisco", "newyork"):
        back = failback(admin, SF, NY, phase="return", timeout=60, grace=GRACE)
        produce(admin, SF, ["after"])  # the source takes writes again, and they flow to the replica
        deadline = time.monotonic() + 60
        while held(admin, NY)["after"] == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        (row,) = replica_status(admin, SF)
    assert row.state == "REPLICA_STATE_REPLICATING" and row.paused is False
    assert back.copied_back == 7
    assert held(admin, SF) == Counter(old + new + ["after"])  # nothing copied twice
    assert held(admin, NY) == Counter(old + new + ["after"])
    assert admin.entry(SF).failover is None and admin.entry(NY).failover is None
    assert [u.path for u in admin.entry(NY).upstreams] == [SF] and admin.entry(SF).upstreams == ()
    assert admin.entry(NY).replicas == ()
    again = failback(admin, SF, NY)
    assert again.already_done is True and "nothing to fail back" in again.result


# -- retries and refusals ----------------------------------------------------------------------
def test_failover_is_safe_to_retry_from_every_stop(linked):
    admin = linked
    produce(admin, SF, ["a"])
    drain(admin, "newyork")

    # an earlier try refused producers and stopped there
    admin.set_failover(SF, FailoverRecord(FailoverState.FENCED, NY, admin.entry(NY).uuid, 0))
    assert failover_plan(admin, SF, NY).stage == "failing over"
    first = failover(admin, SF, NY, timeout=5, grace=0)
    assert first.already_done is False
    second = failover(admin, SF, NY, timeout=5, grace=0)
    assert second.already_done is True and second.result.startswith("already failed over")
    assert failover_plan(admin, SF, NY).stage == FAILED_OVER


def test_refusals_are_one_line_errors(linked, bob):
    admin = linked
    admin.create_stream("/mapr/newyork/other")
    cases = [
        (lambda: failover(admin, "/mapr/sanfrancisco/nope", NY), NotFound, "does not exist"),
        (lambda: failover(admin, SF, "/mapr/newyork/nope"), NotFound, "does not exist"),
        (lambda: failover(admin, SF, "/mapr/newyork/other"), NotFound, "is not a replica of"),
        (lambda: failover(admin, SF, SF), InvalidArgument, "cannot fail over to itself"),
        (lambda: failover(admin, SF, NY, timeout="soon"), InvalidArgument, "timeout"),
        (lambda: failover(bob, SF, NY), PermissionDenied, "adminperm"),
        (lambda: failback(admin, SF, "/mapr/newyork/other"), NotFound, "nothing to fail back"),
        (lambda: failback(admin, SF, NY, phase="sideways"), InvalidArgument, "phase"),
        # a one-way replica's topics are its gateways' (on Kafka the broker refuses them too)
        (lambda: admin.create_topic(NY, "mine"), PermissionDenied, f"cannot create a topic of stream {NY}"),
        (lambda: admin.edit_topic(NY, "t", 3), PermissionDenied, "it is a read-only replica of"),
        (lambda: admin.delete_topic(NY, "t"), PermissionDenied, "it is a read-only replica of"),
    ]
    for call, kind, text in cases:
        with pytest.raises(kind) as raised:
            call()
        assert text in str(raised.value) and "\n" not in str(raised.value), (kind, str(raised.value))
    linked_only = failback(admin, SF, NY)  # never failed over: done, and it says so
    assert linked_only.already_done is True and "nothing to fail back" in linked_only.result
    drain(admin, "newyork")
    # B3: a fenced source keeps its replica link until the failover is finished or aborted
    admin.set_failover(SF, FailoverRecord(FailoverState.FENCED, NY, admin.entry(NY).uuid, 0))
    with pytest.raises(Conflict) as fenced:
        admin.remove_replica(SF, NY)
    assert "before removing the replica" in str(fenced.value) and "\n" not in str(fenced.value)
    failover(admin, SF, NY, abort=True)
    assert [r.path for r in admin.entry(SF).replicas] == [NY] and admin.entry(NY).upstreams
    failover(admin, SF, NY, timeout=5, grace=0)
    with pytest.raises(Conflict) as backwards:
        failover(admin, NY, SF)
    assert "failback" in str(backwards.value)
    with pytest.raises(Conflict) as early:
        failback(admin, SF, NY, phase="return")
    assert "phase reverse" in str(early.value)
    admin.create_topic(NY, "mine")  # promoted: no longer a replica, its topics are its users'


# -- the round trip, with producers and consumers running ----------------------------------------
@ON_BOTH
def test_round_trip_with_producers_and_consumers_running_loses_and_duplicates_nothing(linked):
    admin = linked
    app = App(admin)
    with gateways(admin, "sanfrancisco", "newyork"):
        app.start()
        time.sleep(2)
        over = failover(admin, SF, NY, timeout=120, grace=2.5)
        time.sleep(2)
        back = failback(admin, SF, NY, timeout=120, grace=2.5)
        time.sleep(2)
        app.finish()
        deadline = time.monotonic() + 120
        while held(admin, NY) != Counter(app.acked) and time.monotonic() < deadline:
            time.sleep(0.2)
    acked = Counter(app.acked)
    print(
        f"\nround trip: {len(acked)} messages ({dict(app.written_to)}), copied back {back.copied_back}, "
        f"consumed {len(app.consumed)}"
    )
    assert max(acked.values()) == 1 and app.written_to[SF] and app.written_to[NY]
    assert over.missing == 0 and over.late_messages == 0
    assert back.copied_back == app.written_to[NY]  # only what was produced on the promoted stream
    assert held(admin, SF) == acked  # nothing lost, nothing twice
    assert held(admin, NY) == acked
    consumed = Counter(app.consumed)
    assert set(consumed) == set(acked), (len(set(acked) - set(consumed)), len(set(consumed) - set(acked)))
    assert [k for k, n in consumed.items() if n > 1] == []  # the group read each message once


# -- live gateways through link changes (issue 29, item 6) ----------------------------------------
NY2 = "/mapr/newyork/second"


@ON_BOTH
def test_a_replica_removed_while_a_pass_is_planned_is_left_out_and_the_others_are_served(linked):
    """The link into NY goes away between the moment a pass reads the flows and the moment it sets
    up NY's topics (the stream is really deleted then): the pass leaves NY out and serves NY2."""
    admin = linked
    admin.create_stream(NY2, copymetafrom=SF)
    admin.add_replica(SF, NY2)
    admin.add_upstream(NY2, SF)
    produce(admin, SF, ["a", "b", "c"])
    gateway = Gateway(own_admin(admin), "newyork", "gw1")
    read_flows = gateway.active_flows

    def flows_then_ny_deleted():
        flows = read_flows()
        gateway.active_flows = read_flows  # once
        admin.remove_upstream(NY, SF)
        admin.remove_replica(SF, NY)
        admin.delete_stream(NY)
        return flows

    gateway.active_flows = flows_then_ny_deleted
    assert gateway.run_once(whole=True) == 3  # no error: NY was left out, NY2 got the batch
    assert held(admin, NY2) == Counter(["a", "b", "c"])
    (row,) = replica_status(admin, SF)  # while the gateway is live
    assert (row.replica_path, row.state, row.errors) == (NY2, "REPLICA_STATE_REPLICATING", None)
    gateway.stop()


@pytest.mark.backends("kafka")
def test_a_failback_whose_cached_writer_a_gateway_fenced_finishes_in_one_run(linked):
    """The failback's writes into a replica partition share its transactional id with the gateway's
    apply writer there. A second round trip's ``reverse`` caches writers for sanfrancisco's partitions
    (clearing the first round trip's stop marks); the sanfrancisco gateway, another process with its
    own writers, then applies into the same partitions and fences them. ``return`` still finishes."""
    admin = linked
    produce(admin, SF, ["a"])
    drain(admin, "newyork")
    failover(admin, SF, NY, timeout=30, grace=0)
    failback(admin, SF, NY, timeout=30, grace=0)  # leaves stop marks on sanfrancisco for the next one
    drain(admin, "newyork")
    failover(admin, SF, NY, timeout=30, grace=0)
    produce(admin, NY, ["b", "c"])
    failback(admin, SF, NY, phase="reverse", timeout=30, grace=0)
    gateway = Gateway(own_admin(admin), "sanfrancisco", "gw-sf")  # its own producers: it fences the cached ones
    while gateway.run_once(whole=True):
        pass
    gateway.stop()
    failback(admin, SF, NY, phase="return", timeout=30, grace=0)
    assert admin.entry(NY).failover is None and admin.entry(SF).failover is None
    assert held(admin, SF) == Counter(["a", "b", "c"])


# Kafka's cell (four minutes on a loaded CI machine) runs with STREAMREP_FULL_MATRIX=1; CI's Kafka case
# is one secured round trip (tests/kafka/test_secure_permissions.py), and the fenced failback has its own test.
@pytest.mark.backends("embedded", *(("kafka",) if FULL_MATRIX else ()))
@pytest.mark.slow
def test_ten_round_trips_with_live_gateway_services_and_producers_count_every_message(linked, tmp_path):
    """Issue 29, item 6: ten failovers and failbacks in a row, each one call that succeeds, while both
    clusters' gateway services (real ``gateway run`` processes) and the application run; bystander
    pairs in both directions keep replicating; every message is counted (``round_trips``)."""
    with_bystanders(linked)
    done = round_trips(linked, clean_env(linked.clusters.home), tmp_path, cycles=10)
    print(
        f"\nten round trips: {sum(done.acked.values())} messages ({dict(done.written_to)}), "
        f"copied back {sum(done.copied_back)}, {min(done.seconds):.1f}-{max(done.seconds):.1f} s each"
    )


def test_cli_failover_and_failback(linked, monkeypatch):
    import io

    monkeypatch.setenv("STREAMREP_USER", "alice")
    from streamrep.cli.main import run

    def cli(*args):
        out, err = io.StringIO(), io.StringIO()
        return run(list(args), out, err), out.getvalue(), err.getvalue()

    produce(linked, SF, ["a", "b"])
    status, out, _ = cli("stream", "replica", "failover", "-path", SF, "-replica", NY, "-plan", "true", "-json")
    assert status == 0, (out, _)
    rows = {row["item"]: row["value"] for row in json.loads(out)["data"]}
    assert status == 0 and rows["pendingMessages"] == 2 and rows["stage"] == "linked"
    assert linked.entry(SF).failover is None  # -plan changes nothing
    status, _, err = cli("stream", "replica", "failover", "-path", SF, "-replica", NY, "-timeout", "0.2")
    assert status == 1 and err.count("\n") == 1 and "still lacks 2 messages" in err
    drain(linked, "newyork")
    status, out, _ = cli("stream", "replica", "failover", "-path", SF, "-replica", NY, "-timeout", "5")
    assert status == 0 and "promoted: replaces" in out
    status, out, _ = cli("stream", "replica", "failover", "-path", SF, "-replica", NY)
    assert status == 0 and "already failed over" in out
    status, _, err = cli("stream", "replica", "failback", "-path", SF, "-replica", NY, "-phase", "return")
    assert status == 1 and "phase reverse" in err
    status, _, err = cli("stream", "replica", "failback", "-path", SF, "-replica", NY, "-phase", "sideways")
    assert status == 2 and "-phase takes all, reverse, return" in err


def test_operators_show_the_plan_to_the_approver_and_fail_over(linked):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from streamrep.airflow.assets import REPLICAS_ALIAS
    from streamrep.airflow.operators import FailbackOperator, FailoverOperator, FailoverPlanOperator

    produce(linked, SF, ["a", "b", "c"])
    Consumer(f"{SF}:t", group="billing", from_start=True, admin=linked).commit()
    plan = FailoverPlanOperator(task_id="plan", path=SF, replica=NY).run(linked, {})
    body = plan["markdown"]
    assert "- pending messages: **3**" in body and "| t | 3 |" in body
    assert "- consumer groups affected: billing" in body and "- live gateways: none" in body
    assert "1. refuse producers on" in body
    drain(linked, "newyork")
    context = {"outlet_events": OutletEventAccessors()}
    done = FailoverOperator(task_id="failover", path=SF, replica=NY, timeout="10", outlets=[REPLICAS_ALIAS]).run(
        linked, context
    )
    assert done["result"].endswith(f"promoted: replaces {SF}")
    (event,) = context["outlet_events"][REPLICAS_ALIAS].asset_alias_events  # the promoted replica's
    assert event.dest_asset_key.name == NY and event.extra["source"] == SF
    back = FailoverPlanOperator(task_id="plan", procedure="failback", path=SF, replica=NY).run(linked, {})
    assert "- messages to copy back: **0**" in back["markdown"]
    with gateways(linked, "sanfrancisco", "newyork"):
        result = FailbackOperator(task_id="failback", path=SF, replica=NY, timeout=30, outlets=[REPLICAS_ALIAS]).run(
            linked, context
        )
    assert result["copiedBack"] == 0 and linked.entry(NY).failover is None
    first, back_event = context["outlet_events"][REPLICAS_ALIAS].asset_alias_events  # the source caught up
    assert back_event.dest_asset_key.name == SF and back_event.extra["source"] == NY
    assert event.extra["isUptodate"] is True and back_event.extra["isUptodate"] is True


def test_a_forced_failover_that_may_lack_messages_emits_no_up_to_date_event(linked, home, tmp_path):
    """Issue 21, item 12: the replica's asset event means up to date, so a failover forced past
    messages the replica may lack emits none (and says why in the task log)."""
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from streamrep.airflow.assets import REPLICAS_ALIAS
    from streamrep.airflow.operators import FailoverOperator

    produce(linked, SF, ["a"])
    drain(linked, "newyork")
    produce(linked, SF, ["lagging"])
    lost = unreachable_source(home, tmp_path, "embedded")
    context = {"outlet_events": OutletEventAccessors()}
    done = FailoverOperator(task_id="failover", path=SF, replica=NY, force="true", outlets=[REPLICAS_ALIAS]).run(
        lost, context
    )
    assert "may be missing" in done["result"] and lost.entry(NY).failover.state == "PROMOTED"
    assert list(context["outlet_events"][REPLICAS_ALIAS].asset_alias_events) == []
