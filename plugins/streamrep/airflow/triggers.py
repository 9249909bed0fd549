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
from streamrep.replication.status import replica_status


def replica_row(admin: StreamAdmin, path: str, replica: str) -> dict[str, Any]:
    """The ``replica list`` row of ``replica`` on source ``path`` (NotFound if not registered)."""
    src, dst = admin.path(path), admin.path(replica)
    for row in replica_status(admin, str(src)):
        if row["replicaPath"] == str(dst):
            return row
    rules.require_link((), dst, src, "replica")  # raises the usual NotFound
    raise AssertionError("unreachable")


class ReplicaUpToDateTrigger(BaseTrigger):
    """Fire once ``replica`` of ``path`` is up to date (``isUptodate`` in ``replica list``).

    :param path: the source stream.
    :param replica: the replica stream.
    :param home: the cluster registry folder.
    :param clusters: cluster URLs that override the registry (resolved from connections by the
        task before deferring), by name.
    :param poll_interval: seconds between two status checks.
    """

    def __init__(self, path: str, replica: str, home: str, clusters: dict[str, str] | None = None,
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
        clusters = ConnectionClusters(self.home, self.clusters.get)
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
            self.log.info("%s is not up to date yet: %s, %s messages pending", self.replica,
                          row["replicaState"], row["pendingMessages"])
            await asyncio.sleep(self.poll_interval)
