"""``stream replica failback``: give a failed-over source its role back from the promoted
stream, in two phases (``FailbackPhase``): the reverse link (``_reverse``), then the switch back
(``_return``). The procedure is in the package's docstring."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import Enum

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.errors import Conflict, Interrupted, InvalidArgument, NotFound, StreamrepError, Unavailable
from streamrep.model import replication as rules
from streamrep.model.applied import applied_offsets, into_partition
from streamrep.model.failover import FailoverRecord, FailoverStage, FailoverState
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.cursors import adopt_cursors
from streamrep.replication.failover.plan import lag_by_topic, live_gateways
from streamrep.replication.failover.stage import Pair, failback_stage, pair_of
from streamrep.replication.failover.steps import (
    DEFAULT_TIMEOUT,
    FENCE_GRACE_SECONDS,
    checked_seconds,
    clear_stops,
    demote_source,
    place_cursors,
    stop_flow,
    wait_out_grace,
    wait_until,
    write_mark,
)
from streamrep.replication.pending import pending
from streamrep.replication.setup import ensure_replica, ensure_upstream

# phase "all": the reverse copy is near enough to return (pause writes) at this many pending messages.
RETURN_BACKLOG = 1000


class FailbackPhase(str, Enum):
    """What one failback run does: both phases, or one of them."""

    ALL = "all"  # the reverse link, a bounded wait for the copy back, then the return
    REVERSE = "reverse"  # the reverse link only: the long copy back, producers keep writing
    RETURN = "return"  # the switch back: the short write pause


@dataclass(frozen=True)
class FailbackResult:
    """What ``failback`` did.

    :param phase: ``all``, ``reverse`` or ``return``.
    :param result: one line saying it.
    :param already_done: nothing (left) to do for this phase.
    :param copied_back: messages the source received (only those produced on the promoted
        stream); None when not counted.
    :param lacked: the source's messages that the replica lacked, counted exactly once the
        source could be read (what a forced failover could only estimate); they reach the
        replica when the return restores the flow. None when not counted.
    :param cursors: the consumer cursors placed back on the source.
    """

    path: StreamPath
    replica: StreamPath
    phase: FailbackPhase
    result: str
    already_done: bool = False
    copied_back: int | None = None
    lacked: int | None = None
    cursors: tuple[CursorSyncRow, ...] = ()


def failback(
    admin: StreamAdmin,
    source: str,
    replica: str,
    phase: FailbackPhase | str = FailbackPhase.ALL,
    timeout: float = DEFAULT_TIMEOUT,
    grace: float = FENCE_GRACE_SECONDS,
) -> FailbackResult:
    """``stream replica failback``: give ``source`` its role back from the promoted ``replica``
    (see the package's docstring). Needs adminperm on both streams, and copyperm on the promoted
    stream (it becomes the source of the reverse link).

    :param phase: ``all``, ``reverse`` (add the reverse link only) or ``return`` (the switch back).
    :param timeout: seconds to wait for the reverse copy to catch up (each wait).
    :param grace: seconds between refusing producers on the promoted stream and draining.
    :return: what was done (``FailbackResult``).
    """
    run = _phase(phase)
    timeout = checked_seconds(timeout, "timeout")
    pair = pair_of(admin, source, replica)
    where = failback_stage(pair)
    src, dst = pair.src, pair.dst
    if where == FailoverStage.LINKED:
        return FailbackResult(src, dst, run, f"nothing to fail back: {src} replicates to {dst}", already_done=True)
    already_done = False
    if run != FailbackPhase.RETURN and where == FailoverStage.FAILED_OVER:
        admin.require(pair.dst_entry, dst, "copyperm")  # the promoted stream becomes a source
        _reverse(admin, pair)
        pair = pair_of(admin, source, replica)
    elif run == FailbackPhase.REVERSE:
        already_done = True
    if run == FailbackPhase.REVERSE:
        return _reversed(admin, pair, where, already_done)
    where = failback_stage(pair)
    if where == FailoverStage.FAILED_OVER:
        raise Conflict(f"no reverse link {dst} -> {src} yet: run failback with phase reverse (or all) first")
    if run == FailbackPhase.ALL and where == FailoverStage.FAILING_BACK:
        wait_until(lambda: pending(admin, str(dst), str(src)).messages, lambda n: n <= RETURN_BACKLOG, timeout)
    copied, lacked, cursors = _return(admin, pair, timeout, grace)
    return FailbackResult(
        src,
        dst,
        run,
        f"failed back: producers write to {src}, which replicates to {dst} again"
        + ("" if not lacked else f"; it sends {dst} the {lacked} messages {dst} lacked at the failover"),
        copied_back=copied,
        lacked=lacked,
        cursors=tuple(cursors),
    )


def _phase(phase: FailbackPhase | str) -> FailbackPhase:
    try:
        return FailbackPhase(phase)
    except ValueError:
        choices = ", ".join(p.value for p in FailbackPhase)
        raise InvalidArgument(f"phase must be one of {choices}, not {phase!r}") from None


def _reversed(admin: StreamAdmin, pair: Pair, where: FailoverStage, already_done: bool) -> FailbackResult:
    """The result of phase ``reverse``: the reverse link is in place, and what it has to copy."""
    src, dst = pair.src, pair.dst
    if where == FailoverStage.RETURNING:
        raise Conflict(f"the return of {dst} to {src} is under way: finish it with phase return")
    record = admin.entry(src).failover
    lacked = record.missing if record is not None else None
    return FailbackResult(
        src,
        dst,
        FailbackPhase.REVERSE,
        f"reverse link {dst} -> {src} in place: {pending(admin, str(dst), str(src)).messages} messages to copy back"
        + ("" if lacked is None else f"; {dst} lacks {lacked} messages of {src} (they flow at the return)"),
        already_done=already_done,
        lacked=lacked,
    )


def _reverse(admin: StreamAdmin, pair: Pair) -> None:
    """Failback's first phase: the promoted stream replicates back into the old source."""
    src, dst = pair.src, pair.dst
    source = pair.source
    if pair.source_state != FailoverState.FAILED_OVER:
        demote_source(admin, pair, pair.promoted.since)  # forced: the source was never told
    clear_stops(admin, src, source.uuid, pair.dst_entry.uuid)  # left by an earlier failback
    baseline = _end_offsets(admin, src, source.uuid)
    # The source is readable: what it holds that the replica lacks is exact now (a forced
    # failover knew only the last lag sample). The restored flow brings these at the return.
    lacked = sum(t.pending_messages for t in lag_by_topic(admin, src, source, dst, pair.dst_entry))
    admin.set_failover(
        src,
        FailoverRecord(
            FailoverState.FAILING_BACK, str(dst), pair.dst_entry.uuid, now_ms(), missing=lacked, baseline=baseline
        ),
        only_state=FailoverState.FAILED_OVER,
    )
    ensure_replica(admin, dst, src, paused=False)
    ensure_upstream(admin, src, dst)


def _return(
    admin: StreamAdmin, pair: Pair, timeout: float, grace: float
) -> tuple[int | None, int | None, list[CursorSyncRow]]:
    """Failback's second phase: the switch back to the source. Returns the messages the source
    received (None when not counted), the source's messages the replica lacked (``_reverse``
    counted them) and the cursors placed back on it."""
    src, dst = pair.src, pair.dst
    src_record = pair.source.failover
    if src_record is not None and src_record.state != FailoverState.TAKING_BACK:
        # first: the producers that RETURNING sends back wait there
        src_record = src_record.with_changes(state=FailoverState.TAKING_BACK, since=now_ms())
        admin.set_failover(src, src_record, only_state=FailoverState.FAILING_BACK)
    record = pair.promoted
    if record.state != FailoverState.RETURNING:
        record = record.with_changes(state=FailoverState.RETURNING, since=now_ms())
        admin.set_failover(dst, record, only_state=FailoverState.PROMOTED)
    _drain_back(admin, pair, timeout, grace, record, src_record)
    src_entry = admin.entry(src)
    baseline = src_entry.failover.baseline if src_entry.failover is not None else None
    copied = None if baseline is None else _written_since(admin, src, src_entry.uuid, baseline)
    lacked = src_entry.failover.missing if src_entry.failover is not None else None
    if rules.find_link(pair.dst_entry.replicas, src) is not None:
        stop_flow(admin, dst, pair.dst_entry.uuid, True, src, src_entry.uuid)
        cursors = place_cursors(admin, dst, pair.dst_entry.uuid, src, src_entry.uuid)
        # Its consumers' cursors become the sync's to move forward at the next failover, as the
        # source's do at a failover (``demote_source``): else they count as commits of a group
        # active there, and a second failover would leave the group where it read last time.
        adopt_cursors(admin.store(dst), pair.dst_entry.uuid, src_entry.uuid)
        admin.remove_replica(str(dst), str(src))
    else:
        cursors = []  # an earlier try got past this
    try:
        admin.remove_upstream(str(src), str(dst))
    except NotFound:
        pass
    # The original flow again, from the replica's stored positions.
    _mark_own_writes(admin, dst, pair.dst_entry.uuid, src_entry.uuid)
    clear_stops(admin, dst, pair.dst_entry.uuid, src_entry.uuid)
    ensure_upstream(admin, dst, src)
    if rules.find_link(src_entry.replicas, dst) is None:
        ensure_replica(admin, src, dst, paused=False)
    else:
        admin.set_replica_state(src, dst, ReplicaState.WAITING_FOR_GATEWAY, only_from=ReplicaState.FAILED_OVER)
        admin.resume_replica(str(src), str(dst))
    admin.set_failover(src, None)  # first: producers sent to the source write there at once
    admin.set_failover(dst, None)
    return copied, lacked, cursors


def _drain_back(
    admin: StreamAdmin,
    pair: Pair,
    timeout: float,
    grace: float,
    record: FailoverRecord,
    src_record: FailoverRecord | None,
) -> None:
    """After the grace, wait until the source has every message of the promoted stream; else undo
    the switch (``_undo_return``) and say why."""
    src, dst = pair.src, pair.dst
    started = time.monotonic()
    try:
        wait_out_grace(record, grace)
        count = lambda: pending(admin, str(dst), str(src)).messages  # noqa: E731
        drained, left = wait_until(count, lambda n: n == 0, timeout)
    except BaseException as stopped:
        # Producers are refused on both streams while the source catches up: never left so, whether
        # a signal, Airflow's termination of the task or an unreachable cluster ended the wait.
        _undo_return(admin, pair, record, src_record)
        if isinstance(stopped, KeyboardInterrupt):
            raise Interrupted(
                f"failback of {dst} to {src} interrupted after {time.monotonic() - started:.1f} s, while {src} "
                f"caught up: producers write to {dst} again; run the same failback again to finish it"
            ) from None
        raise
    if not drained:
        _undo_return(admin, pair, record, src_record)
        raise Unavailable(
            f"{src} still lacks {left} messages of {dst} after {timeout:g} s (live gateways of "
            f"cluster {src.cluster}: {', '.join(live_gateways(admin, pair, True) or []) or 'none'}); "
            f"producers write to {dst} again; run failback again once the gateways run"
        )


def _undo_return(admin: StreamAdmin, pair: Pair, record: FailoverRecord, src_record: FailoverRecord | None) -> None:
    """The switch back did not finish: the promoted stream takes producers again, and the source
    waits for the next failback (FAILING_BACK) instead of holding producers back (TAKING_BACK)."""
    admin.set_failover(pair.dst, record.with_changes(state=FailoverState.PROMOTED), only_state=FailoverState.RETURNING)
    if src_record is not None:
        admin.set_failover(
            pair.src, src_record.with_changes(state=FailoverState.FAILING_BACK), only_state=FailoverState.TAKING_BACK
        )


def _mark_own_writes(admin: StreamAdmin, path: StreamPath, uuid: str, source_uuid: str) -> None:
    """In every partition of ``path`` (a replica again) that nothing was applied to from its source,
    mark where its own writes end (``own_writes_key``): produced while it was promoted, they were
    copied back to the source, and the planted-topic check (``replication/held.py``) must not take
    them for a plant. Its producers are refused and the flow is stopped meanwhile: the ends hold."""
    store = admin.store(path)
    parts = [(topic, p) for topic, count in store.topics(uuid).items() for p in range(count)]
    syncs = store.offset_syncs_many([(uuid, rules.position_key(source_uuid, t, p)) for t, p in parts])
    bounds = store.offsets_many([(uuid, t, p) for t, p in parts])
    marks = store.marks(uuid)
    for (topic, p), found, held in zip(parts, syncs, bounds, strict=True):
        if isinstance(held, StreamrepError):
            raise held
        key = rules.own_writes_key(source_uuid, topic, p)
        if applied_offsets(into_partition(found, p)) is None and held[1] > held[0] and marks.get(key) != held[1]:
            marks = write_mark(store, path, uuid, (topic, p), (key, held[1]), marks, "the failback's own-writes mark")


def _end_offsets(admin: StreamAdmin, path: StreamPath, uuid: str) -> dict[str, int]:
    """Every partition's end offset, by ``topic/partition``."""
    store = admin.store(path)
    return {
        f"{topic}/{p}": store.offsets(uuid, topic, p)[1]
        for topic, count in store.topics(uuid).items()
        for p in range(count)
    }


def _written_since(admin: StreamAdmin, path: StreamPath, uuid: str, ends: dict[str, int]) -> int:
    """Messages written to the stream after the end offsets ``ends`` (offsets are not a count:
    Kafka's transaction markers take some)."""
    store = admin.store(path)
    return sum(
        store.range_stats(uuid, topic, p, ends.get(f"{topic}/{p}", 0))[0]
        for topic, count in store.topics(uuid).items()
        for p in range(count)
    )
