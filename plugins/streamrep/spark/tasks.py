"""What the two Spark jobs (``jobs.py``) run in Spark's Python workers, and the gateway's pass plan.

- copystream: ``copy_task`` copies its source partitions with ``copy.copy_partition``.
- the gateway: the driver plans a pass (``plan_share``: each source partition of the gateway's
  share with messages to move, and the end of this pass); each task (``replicate_slot``) takes
  the partitions its worker applied last (``slot_share``) and reads and applies each
  (``replicate_share``), straight from the source read to the transactional apply into every
  replica; ``record_pass`` records the replica states the pass's commits show.

Exactly-once is the destinations' transactional apply: each task starts from the stored
positions, so a task that fails or is killed is repeated without duplicating or skipping.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError
from streamrep.replication.copy import CopyPlan, check_copy, copy_partition
from streamrep.replication.flows import Flow
from streamrep.replication.gateway import Gateway
from streamrep.replication.gateway_passes import Progress
from streamrep.replication.lag import flow_key
from streamrep.replication.reads import SourceRead, SourceSpan, read_sources
from streamrep.replication.transfer import SourcePartition, by_source_cluster
from streamrep.spark.offsets import offset_key, spread
from streamrep.spark.rows import READ_CHUNK
from streamrep.spark.runtime import admin_for, gateway_for
from streamrep.spark.writer import ApplyCommit


@dataclass
class GatewayPartition:
    """One source partition of a gateway's pass: from the lowest stored position of its
    replicas (``replica_uuids``) up to ``end``."""

    unit: SourcePartition
    end: int
    replica_uuids: tuple[str, ...]


def plan_share(
    units: Mapping[SourcePartition, Sequence[Flow]],
    progress: Mapping[SourcePartition, Progress],
    budget: int | None = None,
    target: Mapping[str, int] | None = None,
    skip: Iterable[str] = (),
) -> list[GatewayPartition]:
    """The source partitions of a gateway's share that have messages to move now, each with the
    end of this pass: the source's end (capped by ``target``), ``budget`` rows at most in all.

    :param units: the share, each source partition with its flows (``Gateway.assignment``).
    :param progress: where each stands (``Gateway.progress``).
    :param budget: rows per pass at most (``maxRecordsPerTrigger``); None: no limit.
    :param target: offset key -> the end an availableNow run drains to.
    :param skip: offset keys to leave out of this pass.
    """
    skip = set(skip)
    keyed = {offset_key(u): (u, p) for u, p in sorted(progress.items()) if offset_key(u) not in skip}
    highs = {
        k: p.source_end if target is None else min(p.source_end, target.get(k, p.position))
        for k, (_, p) in keyed.items()
    }
    shares = spread({k: max(0, highs[k] - p.position) for k, (_, p) in keyed.items()}, budget)
    return [
        GatewayPartition(u, p.position + shares[k], tuple(f.replica_uuid for f in units[u]))
        for k, (u, p) in keyed.items()
        if shares[k] > 0
    ]


def _read_round(
    admin: StreamAdmin, positions: Mapping[SourcePartition, int], ends: Mapping[SourcePartition, int]
) -> dict[SourcePartition, SourceRead]:
    """The next chunk of each partition from its position, up to its end: one ``read_sources`` per source
    cluster (a Kafka source fetches them all with one consumer). A partition that cannot be read fails the
    task (Spark runs it again, from the stored positions)."""
    reads: dict[SourcePartition, SourceRead] = {}
    for source_cluster, units in by_source_cluster(positions).items():
        spans = [SourceSpan(unit, positions[unit], READ_CHUNK, ends[unit]) for unit in units]
        for unit, read in zip(units, read_sources(admin.clusters.store(source_cluster), spans), strict=True):
            if isinstance(read, StreamrepError):
                raise read
            reads[unit] = read
    return reads


def apply_runs(
    gateway: Gateway,
    reads: Mapping[SourcePartition, SourceRead],
    commits: dict[SourcePartition, ApplyCommit] | None = None,
    failed: set[tuple[SourcePartition, str]] | None = None,
) -> dict[SourcePartition, ApplyCommit]:
    """Apply one round of reads (one per source partition) at once (``Gateway.apply_reads``; on Kafka
    one transaction per apply lane) into every unpaused replica on the gateway's cluster that their
    source feeds, adding to ``commits``. A replica that fails is reported and added to ``failed``
    (unit, replica UUID), which later rounds skip; the others go on."""
    commits = {} if commits is None else commits
    failed = set() if failed is None else failed
    by_source = gateway.active_flows()
    applies = {}
    for unit, read in reads.items():
        flows = [f for f in by_source.get(unit.source_uuid, ()) if (unit, f.replica_uuid) not in failed]
        applies[unit] = (flows, read.messages, read.source_start, read.span)
    for unit, (written, errors) in gateway.apply_reads(applies).items():
        commit = commits.setdefault(unit, ApplyCommit(key=offset_key(unit)))
        commit.rows += len(reads[unit].messages)
        for flow, n in written.items():
            key = flow_key(flow.source_uuid, flow.replica_uuid)
            commit.written[key] = commit.written.get(key, 0) + n
        for flow, error in errors.items():
            failed.add((unit, flow.replica_uuid))
            commit.errors[flow_key(flow.source_uuid, flow.replica_uuid)] = error
    return commits


def replicate_share(
    home: str | None,
    cluster: str,
    gateway_id: str,
    partitions: Iterable[GatewayPartition],
    parts: Mapping[str, float] | None = None,
) -> Iterator[ApplyCommit]:
    """Read and apply the source partitions of this task (one Spark task of the gateway's driver
    loop) in rounds, from the lowest stored position of each one's replicas, so the stored positions
    stay the only truth: a round reads the next chunk of every partition at once and applies them all
    at once (``apply_runs``), straight from the read (no Arrow rows). Yields one ApplyCommit per
    partition (``key`` set to its offset key).

    :param parts: this task's part of each replica's byte-rate limit, by replica UUID
        (``throttle.Pacer.share``; None: the whole limit)."""
    gateway = gateway_for(home, cluster, gateway_id)
    if parts is not None:
        gateway.pacer.share(parts)
    admin = admin_for(home)
    partitions = list(partitions)
    ends = {p.unit: p.end for p in partitions}
    commits = {unit: ApplyCommit(key=offset_key(unit)) for unit in ends}
    failed: set[tuple[SourcePartition, str]] = set()
    active = gateway.active_flows()
    units = {
        p.unit: [f for f in active.get(p.unit.source_uuid, ()) if f.replica_uuid in p.replica_uuids] for p in partitions
    }
    positions = {u: p.position for u, p in gateway.progress(units).items() if p.position < ends[u]}
    while positions:
        # A read that did not move on (nothing readable up to its end now) ends its partition's part.
        moved = {u: r for u, r in _read_round(admin, positions, ends).items() if r.span[1] > r.span[0]}
        if moved:
            apply_runs(gateway, moved, commits, failed)
        positions = {u: r.span[1] for u, r in moved.items() if r.span[1] < ends[u]}
    yield from commits.values()


def worker_id() -> str:
    """This Python worker process, as the driver of a gateway remembers it: ``<host>:<pid>``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def slot_share(
    plan: Sequence[GatewayPartition], holders: Mapping[str, str], slices: int, slot: int, worker: str
) -> list[GatewayPartition]:
    """The source partitions of ``plan`` that the task of ``slot`` (of ``slices``) applies when it
    runs in ``worker``, whole apply lanes at a time (``SourcePartition.lane_group``), so that no two
    tasks write one lane's transactional id at once: the lanes this worker applied last (``holders``:
    offset key -> worker id, of any partition of the lane), and of those no worker holds, every
    ``slices``-th from ``slot`` on. A lane held by a worker that runs no task of this pass is left to
    the next pass (the driver forgets its holder); so a single task (``slices`` 1) applies the whole plan."""
    if slices <= 1:
        return list(plan)
    lanes: dict[tuple[str, int], list[GatewayPartition]] = {}
    for p in plan:
        lanes.setdefault(p.unit.lane_group(), []).append(p)
    taken: list[GatewayPartition] = []
    for i, lane in enumerate(lanes.values()):
        holder = next((holders[k] for p in lane if (k := offset_key(p.unit)) in holders), None)
        if holder == worker or (holder is None and i % slices == slot):
            taken.extend(lane)
    return taken


def next_holders(
    holders: Mapping[str, str], keys: Iterable[str], applied: Mapping[str, str], slices: int
) -> dict[str, str]:
    """Which worker holds each source partition after a pass: the one that applied it
    (``applied``: offset key -> worker id); none for a key of the pass (``keys``) that nobody
    applied (its worker ran no task: gone, or one worker ran two tasks). A worker holding more
    than its fair share (of ``slices`` tasks) releases the rest, so no core stays idle for good.
    """
    held = dict(holders)
    keys = list(keys)
    fair = -(-len(held.keys() | set(keys)) // max(1, slices))  # of every partition, held or not
    for key in keys:
        if key in applied:
            held[key] = applied[key]
        else:
            held.pop(key, None)
    by_worker: dict[str, list[str]] = {}
    for key, worker in sorted(held.items()):
        by_worker.setdefault(worker, []).append(key)
    for keys_held in by_worker.values():
        for key in keys_held[fair:]:
            del held[key]
    return held


def replicate_slot(
    home: str | None,
    cluster: str,
    gateway_id: str,
    plan: Sequence[GatewayPartition],
    holders: Mapping[str, str],
    slices: int,
    slots: Iterable[int],
    parts: Mapping[str, float] | None = None,
) -> Iterator[ApplyCommit]:
    """One task of a gateway pass (``jobs._Passes``): ``replicate_share`` over this task's
    ``slot_share``, each ApplyCommit naming this worker. Spark gives a task to any idle Python
    worker, so the task picks its partitions by the worker it finds itself in: a replica
    partition applied by another worker than last time must initialise its transactional
    producer there, fencing the first (106 ms a pass in one process, 275 ms alternating:
    bench/kafka_fencing.py).

    :param parts: the gateway's part of each replica's byte-rate limit (``Gateway.assignment``);
        the pass's tasks run at once, so this task takes its slots' fraction of it."""
    me = worker_id()
    slots = list(slots)
    mine = None if parts is None else {r: p * len(slots) / max(1, slices) for r, p in parts.items()}
    for slot in slots:
        for commit in replicate_share(home, cluster, gateway_id, slot_share(plan, holders, slices, slot, me), mine):
            commit.worker = me
            yield commit


def warm_worker(home: str | None, cluster: str, gateway_id: str, _slice: Iterable[int]) -> Iterator[int]:
    """One task of the gateway's warm-up job (``jobs._Passes.warm``): this Python worker imports
    what a pass's task needs and opens its gateway, so the first pass with data does not wait
    for it. Yields the worker's process id.

    :param home: STREAMREP_HOME (None: the default).
    :param cluster: the gateway's (destination) cluster.
    :param gateway_id: the gateway's id.
    """
    gateway_for(home, cluster, gateway_id)
    yield os.getpid()


def record_pass(gateway: Gateway, total: ApplyCommit, by_source: Mapping[str, Sequence[Flow]] | None = None) -> None:
    """Record REPLICATING or UNEXPECTED (with the error) on each replica link a pass touched.

    :param by_source: the active flows (``Gateway.active_flows``), if the caller has them.
    """
    touched = set(total.written) | set(total.errors)
    if not touched:
        return
    by_source = gateway.active_flows() if by_source is None else by_source
    flows = [f for fs in by_source.values() for f in fs if flow_key(f.source_uuid, f.replica_uuid) in touched]
    errors = {
        f: total.errors[flow_key(f.source_uuid, f.replica_uuid)]
        for f in flows
        if flow_key(f.source_uuid, f.replica_uuid) in total.errors
    }
    changed = {f for f in errors if not gateway.still_agreed(f)}  # a failover or a removal: its error was the change
    gateway.record_states([f for f in flows if f not in changed], errors)


def copy_task(
    home: str | None, plan: CopyPlan, units: Sequence[SourcePartition], ids: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """copystream's Spark task (``mapInArrow`` over the indexes ``ids`` into ``units``): copies
    its source partitions in this process with ``copy_partition``, so no message crosses into
    the JVM and back (the reader-into-writer path cost a Python object, an Arrow row and a JVM
    row per message, twice). Yields one row, ``written``. The rights are checked again here, as
    the caller (``STREAMREP_USER``) the task runs as.

    :param plan: the copy, planned once on the driver (``plan_copy``: the ends, the topics).
    :param units: the plan's source partitions, in the order the indexes refer to.
    """
    admin = admin_for(home)
    check_copy(admin, plan.source, plan.destination)
    source_store, dest_store = admin.store(plan.source), admin.store(plan.destination)
    written = 0
    for batch in ids:
        for index in batch.column(0).to_pylist():
            written += copy_partition(source_store, dest_store, plan, units[index], READ_CHUNK)
    yield pa.RecordBatch.from_pydict({"written": pa.array([written], pa.int64())})
