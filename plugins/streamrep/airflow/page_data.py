"""What the "Stream replication" page shows, one cluster at a time: its streams, the links whose
source is one of them (and the half-links into them), its gateways and their desired state.

Each cluster is read on its own (``cluster_view``), so the page draws every cluster as soon as
its answer comes, and one that is down costs only its own answer. Reading changes nothing: the
stores are opened read-only (``Clusters.read_only``), and a Kafka cluster that does not answer is
refused within seconds (``ClusterHealth``) instead of after the client's timeouts, also when
another cluster's links lead to it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from streamrep.airflow import rows as presented
from streamrep.client.admin import StreamAdmin
from streamrep.client.config import ClusterInfo, kafka_bootstrap, open_store
from streamrep.errors import StreamrepError, Unavailable
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.paths import StreamPath, parse_stream_path
from streamrep.replication.flows import flows_into
from streamrep.replication.lag import SAMPLE_SECONDS, lag_history
from streamrep.replication.service import all_gateways
from streamrep.replication.status import ReplicaStatus, replica_status

PROBE_SECONDS = 2.0  # a Kafka cluster whose catalog is not read within this is down for the page
PROBE_MEMORY_SECONDS = 15.0  # one probe answers every read of that cluster for this long


def read_catalog(info: ClusterInfo) -> None:
    """Reads ``info``'s catalog of streams from a store of its own, opened read-only."""
    store = open_store(info, "", read_only=True)
    try:
        store.catalog_list(STREAM_KIND)
    finally:
        store.close()


def cluster_list(infos: list[ClusterInfo]) -> list[dict[str, Any]]:
    """The clusters the page asks about, without opening any of them."""
    return [{"name": info.name, "kind": info.kind, "url": info.url} for info in infos]


def blank_view(info: ClusterInfo) -> dict[str, Any]:
    """A cluster's answer with nothing read yet."""
    return {
        "name": info.name,
        "kind": info.kind,
        "url": info.url,
        "error": None,
        "elapsedMs": None,
        "sampleSeconds": SAMPLE_SECONDS,
        "desired": None,
        "gateways": [],
        "streams": [],
        "links": [],
    }


def cluster_view(admin: StreamAdmin, info: ClusterInfo) -> dict[str, Any]:
    """Everything the page shows of one cluster, as JSON-ready data. A cluster that cannot be
    read answers with its ``error`` and nothing else."""
    view = blank_view(info)
    try:
        entries = sorted(admin.list_streams(info.name), key=lambda e: e.path)
    except StreamrepError as err:
        view["error"] = str(err)
        return view
    # The clusters that replicate into this one list its gateways (cluster gateway set): those of
    # its streams' upstreams. Not every cluster: one with no link here must not slow this answer.
    sources = sorted({info.name, *(parse_stream_path(u.path, None).cluster for e in entries for u in e.upstreams)})
    service = all_gateways(admin, [info.name], time.time(), sources=sources)[info.name]
    view["desired"] = service.desired
    view["gateways"] = [presented.gateway_row(gw) for gw in service.gateways]
    for entry in entries:
        path = str(StreamPath(info.name, entry.path))
        stream: dict[str, Any] = {
            "path": path,
            "name": entry.path,
            "uuid": entry.uuid,
            "topics": 0,
            "partitions": 0,
            "messages": 0,
            "upstreams": [u.path for u in entry.upstreams],
            "error": None,
        }
        # Two reads, each failing on its own: topic counts need a read right on the stream, the
        # replica list its adminperm, so a stream the page may count but not administer still shows.
        try:
            topics = admin.list_topics(path)
            stream.update(
                topics=len(topics),
                partitions=sum(t.partitions for t in topics),
                messages=sum(t.messages for t in topics),
            )
        except StreamrepError as err:
            stream["error"] = str(err)
        try:
            view["links"] += [_replica_link(admin, path, status) for status in replica_status(admin, path)]
        except StreamrepError as err:
            stream["error"] = stream["error"] or str(err)
        view["streams"].append(stream)
    view["links"] += _half_links(admin, info.name, view["links"])
    return view


def _replica_link(admin: StreamAdmin, source: str, status: ReplicaStatus) -> dict[str, Any]:
    """A link as ``replica list`` shows it, with its lag history and its last verification whole
    (``lastVerification``: when in ms, the counts, command, engine and who ran it; None: never)."""
    row = presented.replica_status_row(status)
    return {
        "kind": "replica",
        "source": source,
        "replica": row["replicaPath"],
        **row,
        "lagHistory": _history(admin, source, row["replicaPath"]),
        "lastVerification": None if status.verification is None else status.verification.to_dict(),
    }


def _half_links(admin: StreamAdmin, cluster: str, listed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstreams of this cluster's streams whose source does not list the replica: half of an
    agreement, drawn so that nobody takes it for a working link."""
    try:
        _, blocked = flows_into(admin, cluster)
    except StreamrepError:
        return []
    known = {(link["source"], link["replica"]) for link in listed}
    return [
        {
            "kind": "upstream-only",
            "source": str(b.source),
            "replica": str(b.replica),
            "replicaState": "UPSTREAM_ONLY",
            "errors": b.reason,
            "paused": False,
            "lagHistory": [],
            "verification": None,
            "lastVerification": None,
        }
        for b in blocked
        if (str(b.source), str(b.replica)) not in known
    ]


def _history(admin: StreamAdmin, source: str, replica: str) -> list[dict[str, int]]:
    """The replica's recorded lag (``lag.lag_history``); none when its cluster cannot be read."""
    try:
        return [presented.lag_sample_row(sample) for sample in lag_history(admin, source, replica)]
    except StreamrepError:
        return []


class ClusterHealth:
    """Refuses, before its store is opened, a Kafka cluster that does not answer: Kafka's client
    retries each call until its timeout (15 s), and reading one cluster touches others (the links
    into them, the gateways they list), so one cluster that hangs would hold up every answer.

    A Kafka cluster answers when one of its bootstrap servers accepts a TCP connection (else it
    is refused at once, with the reason) and its catalog is read within ``PROBE_SECONDS``. The
    verdict is remembered for ``PROBE_MEMORY_SECONDS`` and shared by every request of the process;
    one probe per cluster runs at a time. An embedded cluster is a local file: never probed.

    :param read_catalog: reads a cluster's catalog (from a store of its own, opened read-only).
    :param connect: opens a TCP connection (``socket.create_connection``).
    """

    def __init__(
        self,
        read_catalog: Callable[[ClusterInfo], None] = read_catalog,
        connect: Callable[..., socket.socket] = socket.create_connection,
    ):
        self._read_catalog = read_catalog
        self._connect = connect
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="streamrep-probe")
        self._lock = threading.Lock()
        self._verdicts: dict[str, tuple[float, str | None]] = {}  # url -> (when, why it is down or None)
        self._probing: dict[str, Future[str | None]] = {}

    def __call__(self, info: ClusterInfo) -> None:
        if info.kind != "kafka":
            return
        now = time.monotonic()
        future: Future[str | None] | None = None
        with self._lock:
            when, reason = self._verdicts.get(info.url, (-PROBE_MEMORY_SECONDS, None))
            if now - when >= PROBE_MEMORY_SECONDS:
                future = self._probing.get(info.url)
                if future is None or future.done():
                    future = self._probing[info.url] = self._pool.submit(self._probe, info)
        if future is not None:
            try:
                reason = future.result(timeout=PROBE_SECONDS + 0.5)
            except FutureTimeout:
                reason = f"it did not answer within {PROBE_SECONDS:g} s"
            with self._lock:
                self._verdicts[info.url] = (time.monotonic(), reason)
        if reason is not None:
            raise Unavailable(f"Kafka cluster {info.name} is unreachable: {reason}")

    def _probe(self, info: ClusterInfo) -> str | None:
        failures = []
        for server in kafka_bootstrap(info.url).split(","):
            host, _, port = server.rpartition(":")
            try:
                self._connect((host.strip("[]"), int(port)), timeout=PROBE_SECONDS).close()
                break
            except OSError as err:
                failures.append(f"{server}: {err.strerror or err}")
        else:
            return "no bootstrap server accepts a connection (" + "; ".join(failures) + ")"
        try:
            self._read_catalog(info)
        except StreamrepError as err:
            return str(err)
        return None
