"""A trigger that polls a replica's status in the triggerer until it is up to date."""

from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from streamrep.airflow.hook import ConnectionClusters
from streamrep.client.admin import StreamAdmin
from streamrep.client.identity import current_identity
from streamrep.errors import StreamrepError
from streamrep.model import replication as rules
from streamrep.model.replication import ReplicaState
from streamrep.replication.status import replica_status

# The states a replica leaves by itself (a copy ends, gateways come back, an upstream is
# added): worth waiting for. Any other state (an error, a pause) needs someone to act first.
WAITING_STATES = frozenset(s.value for s in (
    ReplicaState.WAITING_FOR_UPSTREAM, ReplicaState.WAITING_FOR_GATEWAY, ReplicaState.COPY_IN_PROGRESS,
    ReplicaState.REPLICATING, ReplicaState.SYNC_FALLBACK))


def replica_row(admin: StreamAdmin, path: str, replica: str) -> dict[str, Any]:
    """The ``replica list`` row of ``replica`` on source ``path`` (NotFound if not registered,
    for instance once removed)."""
    src, dst = admin.path(path), admin.path(replica)
    for row in replica_status(admin, str(src)):
        if row["replicaPath"] == str(dst):
            return row
    rules.require_link((), dst, src, "replica")  # raises the usual NotFound
    raise AssertionError("unreachable")


def stuck_reason(path: str, row: dict[str, Any]) -> str | None:
    """Why the replica of ``row`` cannot become up to date without someone acting (paused, or
    in an error state), as one line; None while waiting can still succeed."""
    replica = row["replicaPath"]
    if row["isUptodate"]:
        return None
    if row["paused"]:
        return (f"replica {replica} of {path} is paused, so it cannot become up to date: "
                f"resume it with 'stream replica resume'")
    if row["replicaState"] not in WAITING_STATES:
        errors = f": {row['errors']}" if row.get("errors") else ""
        return f"replica {replica} of {path} is in state {row['replicaState']}{errors}"
    return None


class ReplicaUpToDateTrigger(BaseTrigger):
    """Fire once ``replica`` of ``path`` is up to date (``isUptodate`` in ``replica list``).

    :param path: the source stream.
    :param replica: the replica stream.
    :param home: the cluster registry folder.
    :param clusters: clusters that override the registry (resolved from connections by the task
        before deferring), by name, as registry entries (``{"url": ..., "settings": {...}}``).
    :param poll_interval: seconds between two status checks.
    """

    def __init__(self, path: str, replica: str, home: str, clusters: dict[str, Any] | None = None,
                 poll_interval: float = 10.0):
        super().__init__()
        self.path = path
        self.replica = replica
        self.home = home
        self.clusters = dict(clusters or {})
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {"path": self.path, "replica": self.replica, "home": self.home, "clusters": self.clusters,
             "poll_interval": self.poll_interval},
        )

    def check(self) -> dict[str, Any]:
        """One status check, with its own connections (it runs in a worker thread)."""
        clusters = ConnectionClusters(self.home, ConnectionClusters.lookup_in(self.clusters))
        try:
            return replica_row(StreamAdmin(clusters, current_identity()), self.path, self.replica)
        finally:
            clusters.close()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            try:
                row = await asyncio.to_thread(self.check)
            except StreamrepError as err:
                yield TriggerEvent({"status": "error", "message": f"streamrep: {err}"})
                return
            if row["isUptodate"]:
                yield TriggerEvent({"status": "uptodate", "row": row})
                return
            reason = stuck_reason(self.path, row)
            if reason:
                yield TriggerEvent({"status": "error", "message": f"streamrep: {reason}"})
                return
            self.log.info("%s is not up to date yet: %s, %s messages pending", self.replica,
                          row["replicaState"], row["pendingMessages"])
            await asyncio.sleep(self.poll_interval)
