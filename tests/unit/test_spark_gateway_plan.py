"""The Spark gateway's pass plan (``tasks.plan_share``): what each pass reads, from where to where."""

from types import SimpleNamespace

from streamrep.model.paths import parse_stream_path
from streamrep.replication.gateway_passes import Progress
from streamrep.replication.transfer import SourcePartition
from streamrep.spark.offsets import offset_key
from streamrep.spark.tasks import next_holders, plan_share, slot_share

SRC = parse_stream_path("/mapr/sf/s", None)
A, B, C = (SourcePartition("u1", "t", p, SRC) for p in range(3))
FLOWS = [SimpleNamespace(replica_uuid="r1"), SimpleNamespace(replica_uuid="r2")]
UNITS = {A: FLOWS, B: FLOWS, C: FLOWS}


def ends(plan):
    return {p.unit.partition: (p.end, p.replica_uuids) for p in plan}


def test_a_pass_reads_every_partition_with_pending_messages_up_to_the_source_end():
    progress = {A: Progress(0, 100, 40), B: Progress(0, 50, 50), C: Progress(10, 30, 10)}
    assert ends(plan_share(UNITS, progress)) == {0: (100, ("r1", "r2")), 2: (30, ("r1", "r2"))}


def test_the_budget_is_shared_and_a_drain_stops_at_its_target():
    progress = {A: Progress(0, 1000, 0), B: Progress(0, 1000, 0), C: Progress(0, 10, 0)}
    assert {k: v[0] for k, v in ends(plan_share(UNITS, progress, budget=210)).items()} == {0: 100, 1: 100, 2: 10}
    target = {offset_key(A): 500, offset_key(B): 0}  # C appeared after the drain started: not in it
    assert {k: v[0] for k, v in ends(plan_share(UNITS, progress, target=target)).items()} == {0: 500}


def test_skipped_partitions_are_left_out():
    progress = {A: Progress(0, 100, 0), B: Progress(0, 100, 0), C: Progress(0, 0, 0)}
    assert set(ends(plan_share(UNITS, progress, skip=[offset_key(A)]))) == {1}


def test_a_pass_keeps_each_partition_in_the_worker_that_applied_it_and_deals_the_rest_by_slot():
    """Spark gives a pass's tasks to any idle Python worker: each task takes what its worker
    applied last (its Kafka transactional producers are there), and what no worker holds by slot."""
    plan = plan_share(UNITS, {A: Progress(0, 9, 0), B: Progress(0, 9, 0), C: Progress(0, 9, 0)})
    holders = {offset_key(A): "h:1", offset_key(C): "h:2"}
    parts = {
        (w, slot): [p.unit.partition for p in slot_share(plan, holders, 2, slot, w)]
        for w in ("h:1", "h:2")
        for slot in (0, 1)
    }
    assert parts[("h:2", 0)] == [2] and parts[("h:1", 1)] == [0, 1]  # B (index 1) falls to slot 1
    assert parts[("h:1", 0)] == [0] and parts[("h:2", 1)] == [1, 2]  # the tasks swapped workers: same
    assert slot_share(plan, holders, 2, 0, "h:3") == []  # a new worker: only unheld partitions of its slot
    assert slot_share(plan, holders, 1, 0, "h:3") == plan  # one task applies everything


def test_a_task_takes_whole_apply_lanes():
    """Partitions of one lane (0 and 16 of a topic) share a transactional id: two tasks applying them
    at once would fence each other, so one task takes both, held or not."""
    units = {SourcePartition("u1", "t", p, SRC): FLOWS for p in (0, 1, 16, 17)}
    plan = plan_share(units, {u: Progress(0, 9, 0) for u in units})
    for holders in ({}, {offset_key(SourcePartition("u1", "t", 16, SRC)): "h:2"}):
        taken = {
            slot: {p.unit.partition for p in slot_share(plan, holders, 2, slot, f"h:{slot + 1}")} for slot in (0, 1)
        }
        assert sorted(taken[0] | taken[1]) == [0, 1, 16, 17] and not taken[0] & taken[1]
        assert all({0, 16} <= t or not {0, 16} & t for t in taken.values()), taken
        assert all({1, 17} <= t or not {1, 17} & t for t in taken.values()), taken
    assert {
        p.unit.partition
        for p in slot_share(plan, {offset_key(SourcePartition("u1", "t", 16, SRC)): "h:2"}, 2, 1, "h:2")
    } >= {0, 16}


def test_holders_follow_the_workers_forget_the_unapplied_and_stay_balanced():
    a, b, c, d = (offset_key(SourcePartition("u1", "t", p, SRC)) for p in range(4))
    held = next_holders({}, [a, b, c, d], {a: "w1", b: "w1", c: "w2", d: "w2"}, 2)
    assert held == {a: "w1", b: "w1", c: "w2", d: "w2"}
    # w2 ran no task (gone): its partitions are dealt again by slot at the next pass.
    assert next_holders(held, [a, b, c, d], {a: "w1", b: "w1"}, 2) == {a: "w1", b: "w1"}
    # One worker applied all four (it ran both tasks): it keeps its fair half, the rest is released.
    assert next_holders(held, [a, b, c, d], dict.fromkeys([a, b, c, d], "w1"), 2) == {a: "w1", b: "w1"}
    # a moved to w2, which then holds three of four: it releases one beyond its fair two.
    assert next_holders(held, [a], {a: "w2"}, 2) == {a: "w2", b: "w1", c: "w2"}
