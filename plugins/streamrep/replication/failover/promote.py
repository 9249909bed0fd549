"""``stream replica failover``: promote a replica to take its source's place (``failover``), and
``-abort``: undo one that stopped before it promoted (``abort_failover``). The procedure, step by
step, is in the package's docstring."""

from __future__ import annotations

import time
from dataclasses import dataclass

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.errors import Conflict, Interrupted, NotFound, Unavailable
from streamrep.model import replication as rules
from streamrep.model.failover import FailoverRecord, FailoverStage, FailoverState, lag_known
from streamrep.model.paths import StreamPath
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.failover.plan import last_lag_sample, live_gateways
from streamrep.replication.failover.stage import Pair, pair_of, stage
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
)
from streamrep.replication.pending import pending
from streamrep.replication.setup import ensure_upstream


@dataclass(frozen=True)
class FailoverResult:
    """What ``failover`` did.

    :param result: one line saying it.
    :param already_done: the replica had been promoted already (a retry).
    :param forced: promoted without the replica having every message of the source.
    :param missing: messages the replica may lack (None: unknown).
    :param late_messages: written to the source after it drained (they reach the replica when
        failback restores the link).
    :param cursors: the consumer cursors placed on the replica.
    :param aborted: ``-abort`` (``result`` says what it undid).
    """

    path: StreamPath
    replica: StreamPath
    result: str
    already_done: bool = False
    aborted: bool = False
    forced: bool = False
    missing: int | None = 0
    late_messages: int = 0
    cursors: tuple[CursorSyncRow, ...] = ()


def failover(
    admin: StreamAdmin,
    source: str,
    replica: str,
    force: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    grace: float = FENCE_GRACE_SECONDS,
    abort: bool = False,
) -> FailoverResult:
    """``stream replica failover``: promote ``replica`` to take the place of ``source`` (see the
    package's docstring). Needs adminperm on both streams (on the replica only, when the source
    is unreachable) and what the link commands need.

    :param force: promote even if the source is unreachable, or the replica has not caught up
        within ``timeout``; the result says how many messages it may lack.
    :param timeout: seconds to wait for the replica to catch up.
    :param grace: seconds between refusing producers on the source and draining.
    :param abort: undo a failover that stopped before promoting (``abort_failover``).
    :return: what was done (``FailoverResult``).

    Interrupted (KeyboardInterrupt: Ctrl-C, or SIGTERM as the CLI maps it) while producers are
    refused and it has not promoted yet, it lifts the fence and raises ``Interrupted``; a kill -9
    leaves the source FENCED, and a rerun finishes the failover or ``abort`` undoes it.
    """
    timeout = checked_seconds(timeout, "timeout")
    pair = pair_of(admin, source, replica)
    where = stage(pair)
    if abort:
        return abort_failover(admin, pair, where)
    started = time.monotonic()
    try:
        return _failover(admin, pair, where, force, timeout, grace)
    except KeyboardInterrupt:
        after = f"{time.monotonic() - started:.1f} s"
        src, dst = pair.src, pair.dst
        now = pair_of(admin, str(src), str(dst))
        if stage(now) == FailoverStage.FAILING_OVER and now.dst_entry.failover is None:
            undone = abort_failover(admin, now, FailoverStage.FAILING_OVER)
            raise Interrupted(f"failover of {src} to {dst} interrupted after {after}: {undone.result}") from None
        raise Interrupted(
            f"failover of {src} to {dst} interrupted after {after}, after {dst} was promoted: "
            f"run the same failover again to finish it"
        ) from None


def abort_failover(admin: StreamAdmin, pair: Pair, where: FailoverStage) -> FailoverResult:
    """``failover -abort``: undo a failover that stopped (killed, interrupted) before it promoted
    the replica: remove its stop marks from the replica, restore the replica's upstream agreement
    if it was withdrawn, and lift the fence on the source. The result says what it undid."""
    src, dst = pair.src, pair.dst
    if where.promoted:
        raise Conflict(
            f"{dst} is already {pair.promoted.describe()}: -abort undoes only a failover that has not "
            f"promoted the replica; give the role back with 'stream replica failback -path {src} -replica {dst}'"
        )
    source = pair.source  # the fence is on the source: it must be readable to lift it
    if where == FailoverStage.LINKED and pair.source_state != FailoverState.FENCED:
        return FailoverResult(
            src, dst, f"nothing to abort: no failover of {src} to {dst} is under way", already_done=True, aborted=True
        )
    undone = []
    stops = clear_stops(admin, dst, pair.dst_entry.uuid, source.uuid)
    if stops:
        undone.append(f"removed {stops} stop marks from {dst}")
    if rules.find_link(pair.dst_entry.upstreams, src) is None:
        ensure_upstream(admin, dst, src)
        undone.append(f"restored {dst}'s upstream {src}")
    _unfence(admin, src)
    undone.append(f"lifted the fence on {src} (producers write there again)")
    return FailoverResult(
        src, dst, f"failover aborted: {'; '.join(undone)}; {dst} is a replica of {src} again", aborted=True
    )


def _failover(
    admin: StreamAdmin, pair: Pair, where: FailoverStage, force: bool, timeout: float, grace: float
) -> FailoverResult:
    src, dst = pair.src, pair.dst
    if where in (FailoverStage.FAILING_BACK, FailoverStage.RETURNING):
        raise Conflict(
            f"{dst} is already {pair.promoted.describe()} and a failback is under way "
            f"({where.value}): finish it with 'stream replica failback -path {src} -replica {dst}'"
        )
    if where == FailoverStage.FAILED_OVER:
        return _finish(admin, pair)
    sample = None if pair.reachable else last_lag_sample(admin, pair)
    if not pair.reachable and not force:
        raise Unavailable(
            f"source {src} is unreachable ({pair.unreachable}); use -force true to promote {dst} "
            f"anyway ({lag_known(str(src), *(sample or (None, None)))})"
        )
    missing: int | None = 0
    cursors: list[CursorSyncRow] = []
    late = 0
    if pair.reachable:
        missing, cursors, late = _drain_and_stop(admin, pair, force, timeout, grace)
    else:
        missing = None if sample is None else sample[0]
        if pair.source_uuid is not None:
            stop_flow(admin, src, pair.source_uuid, False, dst, pair.dst_entry.uuid)
    forced = not pair.reachable or bool(missing)
    promoted = FailoverRecord(
        FailoverState.PROMOTED,
        str(src),
        pair.source_uuid,
        now_ms(),
        forced,
        missing if forced else 0,
        missing_since=_sampled(sample) if not pair.reachable else (now_ms() if forced else None),
    )
    admin.set_failover(dst, promoted)  # first: a retry from here on finds it failed over and completes it
    _withdraw(admin, pair)
    if pair.reachable:
        demote_source(admin, pair, promoted.since)
    return FailoverResult(
        src,
        dst,
        f"{dst} is {promoted.describe()}",
        forced=forced,
        missing=missing,
        late_messages=late,
        cursors=tuple(cursors),
    )


def _finish(admin: StreamAdmin, pair: Pair) -> FailoverResult:
    """A retry that finds the replica promoted: completes what an earlier try left undone."""
    record = pair.promoted
    _withdraw(admin, pair)  # an earlier try may have stopped after promoting
    if pair.reachable and pair.source_state != FailoverState.FAILED_OVER:
        demote_source(admin, pair, record.since)  # a forced failover's source is back: refuse its producers
    return FailoverResult(
        pair.src,
        pair.dst,
        f"already failed over: {pair.dst} is {record.describe()}",
        already_done=True,
        forced=record.forced,
        missing=record.missing,
    )


def _drain_and_stop(
    admin: StreamAdmin, pair: Pair, force: bool, timeout: float, grace: float
) -> tuple[int, list[CursorSyncRow], int]:
    """Steps 1 to 4 with the source reachable: fence it, drain, stop the flow, place the cursors.
    Returns the messages the replica still lacked, the cursors placed, and the late messages."""
    src, dst = pair.src, pair.dst
    fence = pair.source.failover
    if fence is None:
        fence = FailoverRecord(FailoverState.FENCED, str(dst), pair.dst_entry.uuid, now_ms())
        admin.set_failover(src, fence)
    wait_out_grace(fence, grace)
    link = rules.find_link(pair.source.replicas, dst)

    def count() -> int:
        return pending(admin, str(src), str(dst)).messages

    if link is not None and link.paused and count() and not force:
        _unfence(admin, src)
        raise Conflict(
            f"replica {dst} is paused with {count()} messages pending: resume it "
            f"('stream replica resume -path {src} -replica {dst}') or use -force true"
        )
    drained, missing = wait_until(count, lambda n: n == 0, timeout)
    if not drained and not force:
        _unfence(admin, src)
        gateways = live_gateways(admin, pair)
        raise Unavailable(
            f"replica {dst} still lacks {missing} messages of {src} after {timeout:g} s "
            f"(live gateways: {', '.join(gateways or []) or 'none'}); nothing was changed and "
            f"producers write to {src} again: start the gateways of cluster {dst.cluster} "
            f"or use -force true"
        )
    stop_flow(admin, src, pair.source.uuid, True, dst, pair.dst_entry.uuid)
    cursors = place_cursors(admin, src, pair.source.uuid, dst, pair.dst_entry.uuid)
    return missing, cursors, count()


def _sampled(sample: tuple[int, int] | None) -> int | None:
    return None if sample is None else sample[1]


def _withdraw(admin: StreamAdmin, pair: Pair) -> None:
    """The replica withdraws its agreement to receive from the source."""
    if rules.find_link(admin.entry(pair.dst).upstreams, pair.src) is not None:
        try:
            admin.remove_upstream(str(pair.dst), str(pair.src))
        except NotFound:
            pass  # removed meanwhile


def _unfence(admin: StreamAdmin, src: StreamPath) -> None:
    """Undo a failover's first step: producers may write to the source again."""
    admin.set_failover(src, None, only_state=FailoverState.FENCED)
