"""The steps that failover and failback share: the waits (the grace after refusing producers,
the drain), writing a mark into a replica partition, stopping a flow with stop marks and clearing
them, placing consumer cursors, and recording a source as failed over. Each finds its work done or
does it, so a retry is safe."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.client.producer import FAILOVER_CHECK_SECONDS
from streamrep.errors import Conflict, InvalidArgument, RetryNow
from streamrep.model import replication as rules
from streamrep.model.failover import FailoverRecord, FailoverState
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState, stop_key, stop_prefix
from streamrep.replication.cursors import Row as CursorSyncRow
from streamrep.replication.cursors import adopt_cursors, sync_partitions
from streamrep.replication.failover.stage import Pair
from streamrep.replication.transfer import CONFLICT_RETRIES, ensure_topics
from streamrep.store.base import Store

# Longer than a producer's view of a failover record may be stale, plus an append in flight.
FENCE_GRACE_SECONDS = 2 * FAILOVER_CHECK_SECONDS + 0.5
DEFAULT_TIMEOUT = 300.0  # seconds a failover waits for the replica to catch up
MAX_WAIT_SECONDS = 86_400.0  # a day: a longer timeout is a typo (the DAGs' param schema says the same)
POLL_SECONDS = 0.1


def checked_seconds(value: Any, what: str) -> float:
    """``value`` as a number of seconds from 0 to ``MAX_WAIT_SECONDS`` (InvalidArgument if it is not one)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_SECONDS or isinstance(value, bool):
        raise InvalidArgument(f"{what} must be a number of seconds from 0 to {MAX_WAIT_SECONDS:g}, not {value!r}")
    return seconds


def wait_until(what: Callable[[], int], until: Callable[[int], bool], timeout: float) -> tuple[bool, int]:
    """Poll ``what()`` until ``until(value)`` or ``timeout`` seconds: ``(reached, last value)``."""
    deadline = time.monotonic() + timeout
    while True:
        value = what()
        if until(value):
            return True, value
        if time.monotonic() >= deadline:
            return False, value
        time.sleep(POLL_SECONDS)


def wait_out_grace(record: FailoverRecord | None, grace: float) -> None:
    """Sleep until ``grace`` seconds have passed since writes were refused (``record.since``)."""
    if record is not None:
        left = record.since / 1000 + grace - time.time()
        if left > 0:
            time.sleep(left)


def stop_flow(
    admin: StreamAdmin, src: StreamPath, source_uuid: str, src_store_readable: bool, dst: StreamPath, dst_uuid: str
) -> int:
    """Write a stop mark (``stop_key``) for every partition of ``source_uuid`` into the replica
    ``dst``: from then on no apply from it commits. Returns how many partitions were stopped."""
    store = admin.store(dst)
    if src_store_readable:  # every source partition needs its replica partition to hold the mark
        ensure_topics(admin.store(src), source_uuid, store, dst_uuid)
    stopped = 0
    marks = store.marks(dst_uuid)
    for topic, count in store.topics(dst_uuid).items():
        for partition in range(count):
            key = stop_key(source_uuid, topic, partition)
            if key not in marks:
                marks = write_mark(
                    store, dst, dst_uuid, (topic, partition), (key, now_ms()), marks, "the failover's stop mark"
                )
            stopped += 1
    return stopped


def write_mark(
    store: Store,
    dst: StreamPath,
    dst_uuid: str,
    where: tuple[str, int],
    mark: tuple[str, int],
    marks: Mapping[str, int],
    what: str,
) -> dict[str, int]:
    """Commit ``mark`` (key, value) into one replica partition (``where``: topic, partition), over
    the value it has in the replica's ``marks`` as the caller read them; returns the replica's marks
    after. ``what`` names the mark in an error.

    The apply shares its transactional id with the running gateway's writer of that partition, so
    each may fence the other (a gateway's next apply fences the producer this process cached): a
    mark's plan never changes, so a refused one is tried again, after a short random wait that
    lets the gateway's apply finish, until the mark is there."""
    topic, partition = where
    key, value = mark
    refused: RetryNow | None = None
    for attempt in range(CONFLICT_RETRIES):
        try:
            store.apply(dst_uuid, topic, partition, [], {key: value}, {key: marks.get(key)})
        except RetryNow as retry:
            refused = retry
        marks = store.marks(dst_uuid)
        if marks.get(key) == value:
            return marks
        time.sleep(random.uniform(0, 0.05 * (attempt + 1)))
    raise Conflict(
        f"{what} on {dst} {topic}/{partition} was refused {CONFLICT_RETRIES} times "
        f"({refused}); run the same command again to finish it"
    )


def clear_stops(admin: StreamAdmin, dst: StreamPath, dst_uuid: str, source_uuid: str) -> int:
    """Remove the stop marks of ``source_uuid`` from ``dst``, before that flow is restored."""
    store = admin.store(dst)
    prefix = stop_prefix(source_uuid)
    stops = {key: value for key, value in store.marks(dst_uuid).items() if key.startswith(prefix)}
    return store.drop_marks(dst_uuid, stops) if stops else 0


def place_cursors(
    admin: StreamAdmin, src: StreamPath, src_uuid: str, dst: StreamPath, dst_uuid: str
) -> list[CursorSyncRow]:
    """``cursors.sync_cursors`` for every partition of the source, with the authority of the
    procedure (the caller administers both streams; consumeperm is not needed, as for a gateway)."""
    source_store = admin.store(src)
    partitions = [(t, p) for t, n in source_store.topics(src_uuid).items() for p in range(n)]
    return sync_partitions(source_store, src_uuid, admin.store(dst), dst_uuid, partitions)


def demote_source(admin: StreamAdmin, pair: Pair, since: int) -> None:
    """The source's side of a failover (later, for one forced while it was unreachable)."""
    _mark_link_failed_over(admin, pair.src, pair.dst)
    # its consumers' cursors become the sync's to move forward at failback
    adopt_cursors(admin.store(pair.src), admin.entry(pair.src).uuid, pair.dst_entry.uuid)
    admin.set_failover(pair.src, FailoverRecord(FailoverState.FAILED_OVER, str(pair.dst), pair.dst_entry.uuid, since))


def _mark_link_failed_over(admin: StreamAdmin, src: StreamPath, dst: StreamPath) -> None:
    """The source's replica link: paused, and REPLICA_STATE_FAILED_OVER (kept, so ``replica
    list`` shows the failover and failback can restore it)."""
    if rules.find_link(admin.entry(src).replicas, dst) is None:
        return
    admin.pause_replica(str(src), str(dst))
    admin.set_replica_state(src, dst, ReplicaState.FAILED_OVER)
