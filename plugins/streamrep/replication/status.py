"""Replica status for ``stream replica list``: state, whether up to date, what is pending, lag."""

from __future__ import annotations

import time
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError
from streamrep.model.message import Message
from streamrep.model.replication import position_key
from streamrep.replication.apply import ORIGIN_HEADER


# Up to this many pending messages per partition are read to leave out those that came from
# the replica itself (multi-master): they will be skipped, not applied. Above it, the count is
# an upper bound.
PRECISE_PENDING_MAX = 10_000


def to_apply(messages: list[Message], replica_uuid: str) -> tuple[int, int, int | None, int | None]:
    """``range_stats`` of the messages a gateway would apply to the replica (not its own)."""
    prefix = f"{replica_uuid}/".encode("ascii")
    kept = [m for m in messages if not (m.header(ORIGIN_HEADER) or b"").startswith(prefix)]
    if not kept:
        return 0, 0, None, None
    stamps = [m.timestamp for m in kept]
    return len(kept), sum(len(m.value or b"") for m in kept), min(stamps), max(stamps)


def pending(admin: StreamAdmin, source: str, replica: str) -> dict[str, Any]:
    """What the source holds that ``replica`` has not applied: messages, bytes, and the
    timestamps of the oldest and newest of them."""
    src, dst = admin.path(source), admin.path(replica)
    src_entry, dst_entry = admin.entry(src), admin.entry(dst)
    source_store, replica_store = admin.store(src), admin.store(dst)
    marks = replica_store.marks(dst_entry.uuid)
    messages = size = 0
    oldest = newest = None
    for topic, count in source_store.topics(src_entry.uuid).items():
        for partition in range(count):
            start, _ = source_store.offsets(src_entry.uuid, topic, partition)
            position = max(marks.get(position_key(src_entry.uuid, topic, partition), start), start)
            n, b, lo, hi = source_store.range_stats(src_entry.uuid, topic, partition, position)
            if 0 < n <= PRECISE_PENDING_MAX:
                n, b, lo, hi = to_apply(source_store.read(src_entry.uuid, topic, partition, position, n),
                                        dst_entry.uuid)
            messages, size = messages + n, size + b
            if n:
                oldest = lo if oldest is None else min(oldest, lo)
                newest = hi if newest is None else max(newest, hi)
    return {"pendingMessages": messages, "bytesPending": size, "minPendingTS": oldest, "maxPendingTS": newest}


def replica_status(admin: StreamAdmin, source: str) -> list[dict[str, Any]]:
    """``stream replica list`` rows: MapR's fields, plus pending counts and the lag in ms
    (how long the oldest unreplicated message has waited)."""
    rows = admin.list_replicas(source)
    now = int(time.time() * 1000)
    for row in rows:
        try:
            info = pending(admin, source, row["replica"])
        except StreamrepError as err:
            info = {"pendingMessages": None, "bytesPending": None, "minPendingTS": None, "maxPendingTS": None}
            row["errors"] = row["errors"] or str(err)
        waiting = info["pendingMessages"]
        row["isUptodate"] = waiting == 0 and row["replicaState"] in UP_TO_DATE_STATES
        row.update(info)
        row["replicationLagMillis"] = max(0, now - info["minPendingTS"]) if info["minPendingTS"] is not None else 0
    return rows


UP_TO_DATE_STATES = {"REPLICA_STATE_REPLICATING", "REPLICA_STATE_WAITING_FOR_GATEWAY",
                     "REPLICA_STATE_SYNC_FELL_BACK_TO_ASYNC"}
