"""The Spark gateway's pass plan (``source.plan_share``): what each pass reads, from where to where."""

from types import SimpleNamespace

from streamrep.model.paths import parse_stream_path
from streamrep.replication.gateway import Progress
from streamrep.replication.transfer import SourcePartition
from streamrep.spark.source import offset_key, plan_share

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
