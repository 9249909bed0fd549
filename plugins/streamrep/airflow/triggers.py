"""Triggers: one that polls a replica's status in the triggerer until it is up to date, and one
that fires an ``AssetWatcher`` when new messages arrive in a topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from airflow.triggers.base import BaseEventTrigger, BaseTrigger, TriggerEvent

from streamrep.airflow import rows as presented
from streamrep.airflow.hook import ConnectionClusters, StreamrepHook
from streamrep.client.admin import StreamAdmin
from streamrep.client.consumer import Consumer
from streamrep.client.identity import current_identity
from streamrep.errors import NotFound, StreamrepError, Unavailable
from streamrep.model import replication as rules
from streamrep.model.message import Message
from streamrep.model.replication import ReplicaState
from streamrep.replication.status import replica_status

# The states a replica leaves by itself (a copy ends, gateways come back, an upstream is
# added): worth waiting for. Any other state (an error, a pause) needs someone to act first.
WAITING_STATES = frozenset(
    {
        ReplicaState.WAITING_FOR_UPSTREAM,
        ReplicaState.WAITING_FOR_GATEWAY,
        ReplicaState.COPY_IN_PROGRESS,
        ReplicaState.REPLICATING,
        ReplicaState.SYNC_FALLBACK,
    }
)

DEFAULT_WATCHER_GROUP = "airflow-asset-watcher"
MAX_VALUE_CHARS = 4096  # of each message's value in an event: events are stored in Airflow's database


def event(payload: dict[str, Any]) -> TriggerEvent:
    """Airflow's ``TriggerEvent`` of ``payload``, typed."""
    return TriggerEvent(payload)  # type: ignore[no-untyped-call, unused-ignore]  # Airflow's TriggerEvent.__init__ is unannotated


def replica_row(admin: StreamAdmin, path: str, replica: str) -> dict[str, Any]:
    """The ``replica list`` row of ``replica`` on source ``path`` (NotFound if not registered,
    for instance once removed)."""
    src, dst = admin.path(path), admin.path(replica)
    for status in replica_status(admin, str(src)):
        if status.replica_path == str(dst):
            return presented.replica_status_row(status)
    rules.require_link((), dst, src, "replica")  # raises the usual NotFound
    raise AssertionError("unreachable")


def stuck_reason(path: str, row: dict[str, Any]) -> str | None:
    """Why the replica of ``row`` cannot become up to date without someone acting (paused, or
    in an error state), as one line; None while waiting can still succeed."""
    replica = row["replicaPath"]
    if row["isUptodate"]:
        return None
    if row["paused"]:
        return (
            f"replica {replica} of {path} is paused, so it cannot become up to date: "
            f"resume it with 'stream replica resume'"
        )
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

    def __init__(
        self, path: str, replica: str, home: str, clusters: dict[str, Any] | None = None, poll_interval: float = 10.0
    ):
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]  # Airflow's BaseTrigger.__init__ is unannotated
        self.path = path
        self.replica = replica
        self.home = home
        self.clusters = dict(clusters or {})
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "path": self.path,
                "replica": self.replica,
                "home": self.home,
                "clusters": self.clusters,
                "poll_interval": self.poll_interval,
            },
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
                yield event({"status": "error", "message": f"streamrep: {err}"})
                return
            if row["isUptodate"]:
                yield event({"status": "uptodate", "row": row})
                return
            reason = stuck_reason(self.path, row)
            if reason:
                yield event({"status": "error", "message": f"streamrep: {reason}"})
                return
            self.log.info(
                "%s is not up to date yet: %s, %s messages pending",
                self.replica,
                row["replicaState"],
                row["pendingMessages"],
            )
            await asyncio.sleep(self.poll_interval)


class StreamMessageTrigger(BaseEventTrigger):
    """Fire for new messages in a streamrep topic: the trigger of an ``AssetWatcher``, so that a
    DAG scheduled on the topic's Asset runs when messages arrive (``dags/stream_messages_example.py``)::

        Asset(..., watchers=[AssetWatcher(name="clicks", trigger=StreamMessageTrigger(
            path="/mapr/sanfrancisco/activity:clicks"))])

    It reads as the consumer group ``group``, whose cursors are committed in the stream's own
    cluster, so each message fires once and a restarted triggerer goes on after the last
    message fired (the cursor, not the trigger's arguments, says where it is). Each event is one
    batch of up to ``max_messages`` messages: ``path``, ``group``, ``messages`` (``partition``,
    ``offset``, ``key``, ``value`` as text, ``timestamp``) and ``cursors`` (the next offset per
    partition). The cursors are committed as the event is handed to the triggerer: a triggerer
    killed between the two loses that one event rather than firing it twice.

    A new group starts at the topic's end (or its start with ``from_start``) and commits that
    position at once, so messages produced while the triggerer is down still fire later. Give
    two watchers of one topic different groups if each is to see every message.

    Clusters are resolved as the operators resolve them (``StreamrepHook``: the cluster's
    ``streamrep_<cluster>`` connection, else the registry), in the triggerer. A stream or topic
    that does not exist yet, or a cluster that cannot be reached, is logged and tried again every
    ``poll_interval``; any other streamrep error (no ``consumeperm``, a malformed path) fails the
    trigger with streamrep's message.

    :param path: the topic, ``/mapr/<cluster>/<stream>:<topic>``.
    :param group: the consumer group whose cursors hold the trigger's place.
    :param streamrep_conn_id: the streamrep connection with settings common to all clusters.
    :param cluster_conn_ids: the connection of each cluster not named ``streamrep_<cluster>``,
        by cluster name, as the operators take it.
    :param poll_interval: seconds between two reads that found nothing.
    :param max_messages: the most messages in one event.
    :param from_start: with no committed cursor yet, start at the oldest message held.
    """

    def __init__(
        self,
        path: str,
        group: str = DEFAULT_WATCHER_GROUP,
        streamrep_conn_id: str = "streamrep_default",
        poll_interval: float = 5.0,
        max_messages: int = 100,
        from_start: bool = False,
        cluster_conn_ids: dict[str, str] | None = None,
    ):
        super().__init__()  # type: ignore[no-untyped-call, unused-ignore]  # Airflow's BaseTrigger.__init__ is unannotated
        self.path = path
        self.group = group
        self.streamrep_conn_id = streamrep_conn_id
        self.cluster_conn_ids = dict(cluster_conn_ids or {})
        self.poll_interval = float(poll_interval)
        self.max_messages = int(max_messages)
        self.from_start = bool(from_start)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "path": self.path,
                "group": self.group,
                "streamrep_conn_id": self.streamrep_conn_id,
                "poll_interval": self.poll_interval,
                "max_messages": self.max_messages,
                "from_start": self.from_start,
                "cluster_conn_ids": self.cluster_conn_ids,
            },
        )

    # The blocking parts run on one thread of the trigger's own, so the consumer's connections
    # stay with the thread that opened them.
    def _open(self) -> tuple[StreamrepHook, Consumer]:
        hook = StreamrepHook(self.streamrep_conn_id, cluster_conn_ids=self.cluster_conn_ids)
        try:
            consumer = Consumer(self.path, group=self.group, from_start=self.from_start, admin=hook.admin)
            if not consumer.store.cursors(self.group, consumer.entry.uuid, consumer.topic.topic):
                consumer.commit()  # the starting place is durable before anything is fired
            return hook, consumer
        except BaseException:
            hook.close()
            raise

    def _take(self, consumer: Consumer) -> list[Message]:
        batch = consumer.poll(self.max_messages)
        if batch:
            consumer.commit()
        return batch

    def _event(self, consumer: Consumer, batch: list[Message]) -> TriggerEvent:
        return event(
            {
                "path": str(consumer.topic),
                "group": self.group,
                "messages": [
                    {
                        "partition": m.partition,
                        "offset": m.offset,
                        "key": None if m.key is None else m.key.decode("utf-8", "replace"),
                        "value": m.value.decode("utf-8", "replace")[:MAX_VALUE_CHARS],
                        "timestamp": m.timestamp,
                    }
                    for m in batch
                ],
                "cursors": {str(p): o for p, o in sorted(consumer.positions.items())},
            }
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamrep-watcher")
        opened: tuple[StreamrepHook, Consumer] | None = None
        try:
            while True:
                try:
                    if opened is None:
                        opened = await loop.run_in_executor(executor, self._open)
                        self.log.info(
                            "watching %s as group %s from %s", opened[1].topic, self.group, opened[1].positions
                        )
                    batch = await loop.run_in_executor(executor, self._take, opened[1])
                except (NotFound, Unavailable) as err:  # may end by itself: a topic created, a cluster back
                    self.log.warning("streamrep: %s; trying again in %ss", err, self.poll_interval)
                    if opened is not None:
                        await loop.run_in_executor(executor, opened[0].close)
                        opened = None
                    await asyncio.sleep(self.poll_interval)
                    continue
                if batch:
                    self.log.info("%s: %d new messages", opened[1].topic, len(batch))
                    yield self._event(opened[1], batch)
                else:
                    await asyncio.sleep(self.poll_interval)
        finally:
            if opened is not None:
                try:
                    await loop.run_in_executor(executor, opened[0].close)
                except Exception:  # closing is best effort; nothing is lost (logged with its traceback)
                    self.log.warning("could not close the connections of %s", self.path, exc_info=True)
            executor.shutdown(wait=False)
