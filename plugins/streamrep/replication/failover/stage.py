"""Where a failover's two streams stand: ``Pair`` (both streams as found now, with the caller's
adminperm checked) and ``stage`` (the pair's ``FailoverStage``, or why no failover or failback
applies to it)."""

from __future__ import annotations

from dataclasses import dataclass

from streamrep.client.admin import StreamAdmin
from streamrep.errors import Conflict, CorruptStore, InvalidArgument, NotFound, Unavailable
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import FailoverRecord, FailoverStage, FailoverState
from streamrep.model.paths import StreamPath


@dataclass
class Pair:
    """The two streams of a failover, as found now.

    :param unreachable: why the source cannot be read (None when it can).
    """

    src: StreamPath
    dst: StreamPath
    dst_entry: StreamEntry
    src_entry: StreamEntry | None
    unreachable: str | None

    @property
    def reachable(self) -> bool:
        return self.src_entry is not None

    @property
    def source(self) -> StreamEntry:
        """The source's entry, for a step that needs the source (Unavailable if it cannot be read)."""
        if self.src_entry is None:
            raise Unavailable(f"source {self.src} is unreachable ({self.unreachable})")
        return self.src_entry

    @property
    def promoted(self) -> FailoverRecord:
        """The replica's failover record, in a stage that has one (Conflict if it has none)."""
        if self.dst_entry.failover is None:
            raise Conflict(f"{self.dst} has no failover record")
        return self.dst_entry.failover

    @property
    def source_state(self) -> FailoverState | None:
        """The source's side of the failover (None when it has none or cannot be read)."""
        record = None if self.src_entry is None else self.src_entry.failover
        return None if record is None else record.state

    @property
    def source_uuid(self) -> str | None:
        if self.src_entry is not None:
            return self.src_entry.uuid
        link = rules.find_link(self.dst_entry.upstreams, self.src)
        if link is not None and link.uuid is not None:
            return link.uuid
        record = self.dst_entry.failover
        return record.peer_uuid if record is not None and record.peer == str(self.src) else None


def pair_of(admin: StreamAdmin, source: str, replica: str) -> Pair:
    """Both streams, with the caller's adminperm checked on each one that can be read."""
    src, dst = admin.path(source), admin.path(replica)
    if src == dst:
        raise InvalidArgument(f"stream {src} cannot fail over to itself")
    dst_entry = admin.entry(dst)
    admin.require(dst_entry, dst, "adminperm")
    try:
        src_entry = admin.entry(src)
    except (Unavailable, CorruptStore) as err:  # unreachable or unreadable: as lost, for -force to decide
        return Pair(src, dst, dst_entry, None, str(err))
    except NotFound as err:
        record = dst_entry.failover
        if rules.find_link(dst_entry.upstreams, src) is None and (record is None or record.peer != str(src)):
            raise
        return Pair(src, dst, dst_entry, None, str(err))  # a linked source that is gone is as lost
    admin.require(src_entry, src, "adminperm")
    return Pair(src, dst, dst_entry, src_entry, None)


def stage(pair: Pair) -> FailoverStage:
    """Where the pair stands; NotFound or Conflict when no failover or failback applies to it."""
    src, dst, record = pair.src, pair.dst, pair.dst_entry.failover
    if record is not None and record.state in (
        FailoverState.FAILED_OVER,
        FailoverState.FAILING_BACK,
        FailoverState.TAKING_BACK,
    ):
        raise Conflict(
            f"stream {dst} {record.describe()}: it is not a replica now; to give it its role back "
            f"use 'stream replica failback -path {dst} -replica {record.peer}'"
        )
    if record is not None and record.peer == str(src):
        if record.state == FailoverState.RETURNING:
            return FailoverStage.RETURNING
        if record.state == FailoverState.PROMOTED:
            return _promoted_stage(pair)
    if record is not None and record.state == FailoverState.PROMOTED:
        raise Conflict(f"stream {dst} was promoted to replace {record.peer}, not {src}")
    return _unpromoted_stage(pair)


def _promoted_stage(pair: Pair) -> FailoverStage:
    """FAILING_BACK once the reverse link is in place and the source knows, else FAILED_OVER."""
    reverse = rules.find_link(pair.dst_entry.replicas, pair.src) is not None
    failing_back = pair.source_state in (FailoverState.FAILING_BACK, FailoverState.TAKING_BACK)
    return FailoverStage.FAILING_BACK if reverse and failing_back else FailoverStage.FAILED_OVER


def _unpromoted_stage(pair: Pair) -> FailoverStage:
    """A replica not promoted: FAILING_OVER while the source is fenced for it, else LINKED if the
    two streams agree to replicate."""
    src, dst = pair.src, pair.dst
    src_record = pair.src_entry.failover if pair.src_entry is not None else None
    if src_record is not None and src_record.peer != str(dst):
        raise Conflict(f"stream {src} is {src_record.describe()}; it cannot fail over to {dst} too")
    if src_record is not None and src_record.state == FailoverState.FENCED:
        return FailoverStage.FAILING_OVER  # an earlier try may have withdrawn the agreement already
    if rules.find_link(pair.dst_entry.upstreams, src) is None:
        raise NotFound(f"{dst} is not a replica of {src}: it does not list {src} as an upstream")
    if pair.src_entry is not None:
        found = rules.agreement(src, pair.src_entry, dst, pair.dst_entry)
        if not found.agreed:
            raise Conflict(f"{dst} is not a replica of {src}: {found.reason}")
    return FailoverStage.LINKED


def failback_stage(pair: Pair) -> FailoverStage:
    """``stage`` for failback: LINKED is 'nothing to fail back' (or done); the source must be reachable."""
    if not pair.reachable:
        raise Unavailable(f"source {pair.src} is unreachable ({pair.unreachable}): failback needs it back")
    try:
        where = stage(pair)
    except NotFound:
        raise NotFound(f"{pair.dst} was not failed over from {pair.src}: there is nothing to fail back") from None
    if where == FailoverStage.FAILING_OVER:
        raise Conflict(f"the failover of {pair.src} to {pair.dst} did not finish: run failover again first")
    return where
