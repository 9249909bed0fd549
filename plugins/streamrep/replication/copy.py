"""copystream: copy everything a stream holds now into another stream, on any cluster.

The copy records the same positions a gateway keeps, in the same transactions as the
messages, so running it again, resuming after a crash, or handing over to the gateways
(the manual steps: copystream, then resume) never duplicates or skips a message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, NotFound, StreamrepError
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.paths import StreamPath, parse_stream_path
from streamrep.model.replication import ReplicaState
from streamrep.replication.reads import read_source
from streamrep.replication.transfer import SourcePartition, apply_batch, ensure_topics, next_position
from streamrep.store.base import Store

COPY_BATCH = 10_000


@dataclass
class CopyPlan:
    """What to copy: each source partition up to the end it had when the copy started."""

    source: StreamPath
    source_uuid: str
    destination: StreamPath
    destination_uuid: str
    ends: dict[SourcePartition, int] = field(default_factory=dict)

    def total(self, admin: StreamAdmin) -> int:
        """Messages still to copy."""
        source_store, dest_store = admin.store(self.source), admin.store(self.destination)
        pending = 0
        for unit, end in self.ends.items():
            start = source_store.offsets(self.source_uuid, unit.topic, unit.partition)[0]
            pending += max(0, end - next_position(dest_store, self.destination_uuid, unit, start))
        return pending


def check_copy(
    admin: StreamAdmin, source: str | StreamPath, destination: str | StreamPath
) -> tuple[StreamEntry, StreamEntry | None]:
    """The rights a copy needs, as MapR's copystream: consumeperm or copyperm on the source, and on
    the destination copyperm, or produceperm, consumeperm and topicperm; it must be another
    stream, by UUID. A destination that does not exist yet will be created with the source's
    metadata, so the caller must hold the adminperm it will have there. Every copy (in-process,
    Spark driver and tasks) checks here, before anything is created or written. Gateways do not:
    they have the implicit authority to publish into replicas.

    :return: the source's entry and the destination's (None if it does not exist yet).
    """
    src, dst = admin.path(source), admin.path(destination)
    if src == dst:
        raise InvalidArgument(f"cannot copy stream {src} into itself")
    src_entry = admin.entry(src)
    admin.require_any(src_entry, src, "consumeperm", "copyperm")
    try:
        dst_entry = admin.entry(dst)
    except NotFound:
        admin.require_on_new(src_entry, src, dst, "adminperm")
        return src_entry, None
    if dst_entry.uuid == src_entry.uuid:
        raise InvalidArgument(f"cannot copy stream {src} into itself: {dst} is the same stream {src_entry.uuid}")
    admin.require_all_of_any(dst_entry, dst, ("copyperm",), ("produceperm", "consumeperm", "topicperm"))
    return src_entry, dst_entry


def plan_copy(admin: StreamAdmin, source: str, destination: str) -> CopyPlan:
    """Check permissions (``check_copy``), create the destination with the source's metadata
    if it does not exist, give it the source's topics, and fix the end of each source
    partition now."""
    src, dst = admin.path(source), admin.path(destination)
    src_entry, dst_entry = check_copy(admin, src, dst)
    if dst_entry is None:
        dst_entry = admin.create_stream(str(dst), copymetafrom=str(src))
    source_store, dest_store = admin.store(src), admin.store(dst)
    topics = ensure_topics(source_store, src_entry.uuid, dest_store, dst_entry.uuid)
    plan = CopyPlan(src, src_entry.uuid, dst, dst_entry.uuid)
    for topic, count in topics.items():
        for partition in range(count):
            unit = SourcePartition(src_entry.uuid, topic, partition, src)
            plan.ends[unit] = source_store.offsets(src_entry.uuid, topic, partition)[1]
    return plan


def copy_partition(
    source_store: Store, dest_store: Store, plan: CopyPlan, unit: SourcePartition, batch_size: int = COPY_BATCH
) -> int:
    """Copy one source partition up to its planned end; returns messages written."""
    end = plan.ends[unit]
    written = 0
    previous = None
    while True:
        start_held = source_store.offsets(unit.source_uuid, unit.topic, unit.partition)[0]
        position = next_position(dest_store, plan.destination_uuid, unit, start_held)
        if position >= end or position == previous:
            return written  # done, or (never with a correct store) stuck: stop rather than spin
        previous = position
        read = read_source(source_store, unit, position, batch_size, end)
        if read.span[1] <= position:
            return written  # nothing left to read before the end
        written += apply_batch(dest_store, plan.destination_uuid, unit, read.messages, read.source_start, read.span)


def _is_its_replica(admin: StreamAdmin, plan: CopyPlan) -> bool:
    """Whether the destination is the registered replica of the source (by identity)."""
    link = rules.find_link(admin.entry(plan.source).replicas, plan.destination)
    return link is not None and rules.binds(link, plan.destination_uuid, admin.entry(plan.destination).created)


def copy_ended(admin: StreamAdmin, plan: CopyPlan, error: str | None = None) -> None:
    """A copy into a registered replica is over: WAITING_FOR_GATEWAY, or UNEXPECTED with
    ``error`` if it stopped before finishing. Only a link still showing COPY_IN_PROGRESS changes,
    so a state a gateway recorded meanwhile (an error, a fallback) is kept."""
    if _is_its_replica(admin, plan):
        state = ReplicaState.UNEXPECTED if error else ReplicaState.WAITING_FOR_GATEWAY
        admin.set_replica_state(plan.source, plan.destination, state, error, only_from=ReplicaState.COPY_IN_PROGRESS)


@contextmanager
def copying(admin: StreamAdmin, plan: CopyPlan) -> Iterator[None]:
    """Show COPY_IN_PROGRESS on the replica link while the copy runs (if the destination is a
    registered replica of the source), and say how it ended. Only a killed process leaves
    COPY_IN_PROGRESS behind; running the copy again ends it."""
    if _is_its_replica(admin, plan):
        admin.set_replica_state(plan.source, plan.destination, ReplicaState.COPY_IN_PROGRESS)
    try:
        yield
    except BaseException as err:
        reason = f": {err}" if isinstance(err, StreamrepError) else f" ({type(err).__name__})"
        copy_ended(admin, plan, f"copystream stopped before it finished{reason}; run it again")
        raise
    copy_ended(admin, plan)


def copy_stream(admin: StreamAdmin, source: str, destination: str, batch_size: int = COPY_BATCH) -> CopySummary:
    """Copy ``source`` into ``destination`` in this process. Returns a summary with the
    source positions reached."""
    plan = plan_copy(admin, source, destination)
    source_store, dest_store = admin.store(plan.source), admin.store(plan.destination)
    with copying(admin, plan):
        written = sum(copy_partition(source_store, dest_store, plan, unit, batch_size) for unit in sorted(plan.ends))
    return summary(plan, written)


@dataclass(frozen=True)
class CopySummary:
    """What a copy did: the ``messages`` it wrote into ``destination``, and the source
    positions it reached, each (topic, partition, end offset), in order."""

    source: StreamPath
    destination: StreamPath
    messages: int
    positions: tuple[tuple[str, int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As the copystream Spark application prints it (one JSON object; ``from_dict`` reads it):
        ``source``, ``destination``, ``messages``, ``positions`` by ``topic:partition``."""
        return {
            "source": str(self.source),
            "destination": str(self.destination),
            "messages": self.messages,
            "positions": {f"{topic}:{partition}": end for topic, partition, end in self.positions},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CopySummary:
        positions = []
        for key, end in (data.get("positions") or {}).items():
            topic, _, partition = key.rpartition(":")
            positions.append((topic, int(partition), int(end)))
        return cls(
            parse_stream_path(data["source"], None),
            parse_stream_path(data["destination"], None),
            int(data["messages"]),
            tuple(positions),
        )


def summary(plan: CopyPlan, written: int) -> CopySummary:
    return CopySummary(
        plan.source,
        plan.destination,
        written,
        tuple((u.topic, u.partition, end) for u, end in sorted(plan.ends.items())),
    )
