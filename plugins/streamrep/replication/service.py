"""Gateways as a service: the desired state of a cluster's gateways and what each live gateway
reports about itself. One place for these rules; the CLI (``gateway start/stop/list``), the
page, the supervisor (``airflow/supervisor.py``) and the gateways themselves call it.

Documents, all in the catalog of the destination cluster the gateways serve (a gateway acts
with its cluster's authority, so its cluster is where its state belongs, and a cluster's state
travels with it):

- ``gateway-heartbeat/<gateway id>`` (``model.gateways.HeartbeatDoc``): written by the gateway. ``ts`` (its last beat), ``host``,
  ``pid``, where it runs (``engine`` local|spark; on Spark the ``master`` and ``appId``; under
  Airflow the ``airflow`` task: dag id, run id, task id and try, from the ``AIRFLOW_CTX_*``
  variables Airflow exports to the task process), and its ``share``: the source partitions it
  holds, written whenever its assignment changes (not per beat: the catalog is not written more
  than needed). A gateway withdraws the document when it stops.
- ``gateway-service/desired`` (``model.gateways.ServiceDoc``): ``state`` running|stopped, ``by`` and ``at`` of the last request,
  and the supervisor's ``launch`` record. No document means the gateways are not managed: they
  run when someone starts them (``gateway run``) and the supervisor leaves the cluster alone.

Stopping is cooperative, not a kill: every gateway reads the desired state at its heartbeat,
finishes the micro-batch in progress (its positions are committed with that batch), withdraws
its heartbeat and returns normally. So a stopped gateway's Airflow task succeeds, its run ends
SUCCESS, and nothing is replayed at the next start. A gateway that starts while the desired
state is ``stopped`` exits at once with status 0 and one line saying so: stopped is the state
that was asked for, so finding it is not an error (a stop that races a supervisor's launch, or a
task retried after ``gateway stop``, must not turn into a failed run), and the line names the
command that starts them again. ``gateway run -once`` (a drain) ignores the desired state.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError
from streamrep.model.gateways import DesiredState, HeartbeatDoc, LaunchRecord, ServiceDoc
from streamrep.model.paths import validate_cluster_name
from streamrep.replication.assignment import (
    HEARTBEAT_EXPIRY_SECONDS,
    HEARTBEAT_INTERVAL_SECONDS,
    eligible,
    live_gateways,
)
from streamrep.store.base import CatalogDoc, Store

HEARTBEAT_KIND = "gateway-heartbeat"
SERVICE_KIND = "gateway-service"
SERVICE_KEY = "desired"
AIRFLOW_CONTEXT = {
    "dagId": "AIRFLOW_CTX_DAG_ID",
    "runId": "AIRFLOW_CTX_DAG_RUN_ID",
    "taskId": "AIRFLOW_CTX_TASK_ID",
    "try": "AIRFLOW_CTX_TRY_NUMBER",
}


class GatewayStatus(Enum):
    """A gateway's status in ``gateway list``: its heartbeat is fresh (``LIVE``; ``STOPPING``
    when its cluster's gateways are asked to stop), too old (``EXPIRED``), or there is none
    (``DOWN``: a gateway only listed by a source cluster)."""

    LIVE = "live"
    STOPPING = "stopping"
    EXPIRED = "expired"
    DOWN = "down"

    @property
    def holds_share(self) -> bool:
        """Whether it still holds its share of the source partitions (an expired gateway's went to the others)."""
        return self in (GatewayStatus.LIVE, GatewayStatus.STOPPING)


@dataclass(frozen=True)
class GatewayRow:
    """One gateway of a cluster (``gateways``).

    :param host: where it runs, with ``pid``, ``engine`` (``local`` or ``spark``), and on Spark
        ``master`` and ``app_id`` (None when unknown or not on Spark).
    :param airflow: ``dag/run/task try N`` of the Airflow task it runs in, or None.
    :param heartbeat_age: seconds since its last heartbeat (None: it has none).
    :param share: the source partitions it holds (``stream:topic/partition``), sorted.
    :param listed_by: the source clusters listing it for this cluster (``cluster gateway set``).
    :param desired: its cluster's desired state (None: not managed).
    """

    id: str
    status: GatewayStatus
    host: str | None
    pid: int | None
    engine: str | None
    master: str | None
    app_id: str | None
    airflow: str | None
    heartbeat_age: float | None
    share: tuple[str, ...]
    listed_by: tuple[str, ...]
    desired: DesiredState | None

    @property
    def partitions(self) -> int:
        return len(self.share)


@dataclass(frozen=True)
class ClusterGateways:
    """A cluster's gateways for the page (``all_gateways``): its ``desired`` state and its gateways."""

    desired: DesiredState | None
    gateways: tuple[GatewayRow, ...]


@dataclass(frozen=True)
class ServiceRequest:
    """``gateway start`` / ``stop`` as recorded: the ``desired`` state, who asked (``by``) and
    when (``at``, seconds since the epoch), and the gateways ``live`` now."""

    cluster: str
    desired: DesiredState
    by: str | None
    at: float | None
    live: tuple[str, ...]


# -- what a gateway writes about itself ------------------------------------------------
def placement(
    engine: str, master: str | None = None, app_id: str | None = None, env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Where a gateway runs, for its heartbeat document.

    :param engine: ``local`` (in the process that called) or ``spark``.
    :param master: the Spark master URL (Spark only).
    :param app_id: the Spark application id (Spark only).
    :param env: the environment to read Airflow's task context from (default: this process's).
    """
    env = os.environ if env is None else env
    doc: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "engine": engine}
    if master:
        doc["master"] = master
    if app_id:
        doc["appId"] = app_id
    airflow = {key: env[var] for key, var in AIRFLOW_CONTEXT.items() if env.get(var)}
    if airflow:
        doc["airflow"] = airflow
    return doc


def announce(store: Store, gateway_id: str, where: Mapping[str, Any]) -> None:
    """A gateway's first beat: its whole document (``where``: ``placement``), replacing what an
    earlier run left."""
    doc = HeartbeatDoc.from_doc({**where, "ts": time.time()})
    store.catalog_update(HEARTBEAT_KIND, gateway_id, lambda _: doc.to_doc())


def beat(store: Store, gateway_id: str, share: Sequence[str] | None = None) -> None:
    """A heartbeat (and the gateway's ``share``, when given), keeping what the gateway announced.
    A gateway that never announced (a Spark reader process, ``run_once``) records this process."""

    def change(old: CatalogDoc | None) -> CatalogDoc:
        doc = HeartbeatDoc.from_doc(old) if old else HeartbeatDoc(0.0, socket.gethostname(), os.getpid())
        doc = replace(doc, ts=time.time(), share=doc.share if share is None else tuple(share))
        return doc.to_doc()

    store.catalog_update(HEARTBEAT_KIND, gateway_id, change)


def withdraw(store: Store, gateway_id: str) -> None:
    store.catalog_update(HEARTBEAT_KIND, gateway_id, lambda _: None)


def share_names(units: Iterable[Any]) -> list[str]:
    """A gateway's share as ``stream:topic/partition`` names, sorted (``units``: SourcePartitions)."""
    return sorted(f"{u.source}:{u.topic}/{u.partition}" for u in units)


# -- desired state ----------------------------------------------------------------------
def desired(store: Store) -> ServiceDoc | None:
    """The cluster's service document, or None when its gateways are not managed."""
    doc = store.catalog_get(SERVICE_KIND, SERVICE_KEY)
    return None if doc is None else ServiceDoc.from_doc(doc)


def desired_state(store: Store) -> DesiredState | None:
    doc = desired(store)
    return None if doc is None else doc.state


def is_stopped(doc: ServiceDoc | None) -> bool:
    """Whether a service document (``desired``) asks the gateways to stop."""
    return doc is not None and doc.stopped


def stopped_reason(store: Store, cluster: str) -> str | None:
    """Why a gateway of ``cluster`` must not start now (``stopped_line``), or None when its
    gateways are started or not managed."""
    doc = desired(store)
    return stopped_line(cluster, doc) if is_stopped(doc) else None


def stopped_line(cluster: str, doc: ServiceDoc | None) -> str:
    """Why a gateway of ``cluster`` does not run: the stop request, and how to start again."""
    by = f" by {doc.by}" if doc and doc.by else ""
    at = f" at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(doc.at))}" if doc and doc.at else ""
    return (
        f"the gateways of cluster {cluster} are stopped (gateway stop{by}{at}); "
        f"start them with 'streamrep gateway start -cluster {cluster}'"
    )


class StopWatch:
    """Whether a gateway has been asked to stop, read from the catalog at most every
    ``interval`` seconds (a gateway checks at its heartbeat, not per batch).

    :param store: the gateway's cluster.
    :param interval: seconds between two reads.
    """

    def __init__(self, store: Store, interval: float = HEARTBEAT_INTERVAL_SECONDS):
        self.store = store
        self.interval = interval
        self.doc: ServiceDoc | None = None
        self._read_at: float | None = None

    def stop_requested(self, force: bool = False) -> bool:
        now = time.monotonic()
        if force or self._read_at is None or now - self._read_at >= self.interval:
            self.doc = desired(self.store)
            self._read_at = now
        return is_stopped(self.doc)


def request(admin: StreamAdmin, cluster: str, state: DesiredState) -> ServiceRequest:
    """``gateway start`` / ``gateway stop``: record the desired state of ``cluster``'s gateways.
    Needs adminperm on the cluster. Safe to repeat: asking for the state in force records the
    new request and changes nothing else.

    :return: the request as recorded, and the gateways live now.
    """
    admin.clusters.get(validate_cluster_name(cluster))  # NotFound for an unknown cluster
    admin.require_cluster_admin(cluster)
    store = admin.clusters.store(cluster)
    now = time.time()

    def change(old: CatalogDoc | None) -> CatalogDoc:
        doc = ServiceDoc(state, admin.identity.user, now, since=now)  # a new generation: run ids start afresh
        if old and state is DesiredState.RUNNING:
            seen = ServiceDoc.from_doc(old)
            if seen.state is state:  # a repeated start keeps the supervisor's backoff
                doc = replace(doc, launch=seen.launch, since=now if seen.since is None else seen.since)
        return doc.to_doc()

    doc = ServiceDoc.from_doc(store.catalog_update(SERVICE_KIND, SERVICE_KEY, change) or {"state": state})
    return ServiceRequest(cluster, doc.state, doc.by, doc.at, tuple(_live(admin, cluster)))


def record_launch(store: Store, seen: ServiceDoc, launch: LaunchRecord) -> None:
    """Record the supervisor's ``launch`` in the service document read as ``seen``, unless the
    desired state changed since (a stop or a new start came in between: it is left as it is)."""

    def change(old: CatalogDoc | None) -> CatalogDoc | None:
        if old is None:
            return old
        doc = ServiceDoc.from_doc(old)
        if (doc.state, doc.since) != (seen.state, seen.since):
            return old
        return replace(doc, launch=launch).to_doc()

    store.catalog_update(SERVICE_KIND, SERVICE_KEY, change)


def next_step(req: ServiceRequest, supervisor: str) -> str:
    """What happens after ``req``, in words: who starts the gateways (``supervisor`` says what the
    supervisor DAG will do), or which ones are still to stop."""
    if req.desired is DesiredState.RUNNING:
        if req.live:
            return f"already running: {', '.join(req.live)}"
        return f"{supervisor}, or run 'streamrep gateway run -cluster {req.cluster}'"
    if not req.live:
        return "stopped"
    return f"{', '.join(req.live)} stop after their current batch"


def _live(admin: StreamAdmin, cluster: str) -> list[str]:
    return [row.id for row in gateways(admin, cluster) if row.status.holds_share]


def wait_stopped(admin: StreamAdmin, cluster: str, timeout: float, poll: float = 0.5) -> list[str]:
    """Wait up to ``timeout`` seconds until no gateway of ``cluster`` has a live heartbeat;
    returns those still live (empty when all stopped)."""
    deadline = time.monotonic() + timeout
    while True:
        live = _live(admin, cluster)
        if not live or time.monotonic() >= deadline:
            return live
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


# -- what is running: one function for the CLI and the page ------------------------------
def _listed_by(admin: StreamAdmin, sources: Iterable[str]) -> dict[str, dict[str, list[str]]]:
    """destination cluster -> gateway -> the source clusters listing it (``cluster gateway set``)."""
    listed: dict[str, dict[str, list[str]]] = {}
    for source in sources:
        try:
            lists = admin.gateways(source)
        except StreamrepError:
            continue  # an unreachable source cluster hides only its own lists
        for dst, names in lists.items():
            for gateway in names:
                listed.setdefault(dst, {}).setdefault(gateway, []).append(source)
    return listed


def gateway_rows(
    beats: Mapping[str, Mapping[str, Any]],
    wanted: DesiredState | None,
    listed: Mapping[str, list[str]],
    now: float,
    expiry: float = HEARTBEAT_EXPIRY_SECONDS,
) -> list[GatewayRow]:
    """The rows of one cluster's gateways: those heartbeating (``beats``: the heartbeat
    documents) and those listed (gateway -> source clusters), given the ``wanted`` state."""
    rows = []
    for gid in sorted(set(beats) | set(listed)):
        found = beats.get(gid)
        hb = HeartbeatDoc.from_doc(found) if found else HeartbeatDoc(ts=0.0)
        age = None if not found else max(0.0, now - hb.ts)
        if age is None:
            status = GatewayStatus.DOWN
        elif age >= expiry:
            status = GatewayStatus.EXPIRED
        else:
            status = GatewayStatus.STOPPING if wanted is DesiredState.STOPPED else GatewayStatus.LIVE
        share = (hb.share or ()) if status.holds_share else ()
        rows.append(
            GatewayRow(
                id=gid,
                status=status,
                host=hb.host,
                pid=hb.pid,
                engine=hb.engine,
                master=hb.master,
                app_id=hb.app_id,
                airflow=airflow_text(hb.airflow),
                heartbeat_age=age,
                share=share,
                listed_by=tuple(sorted(listed.get(gid, []))),
                desired=wanted,
            )
        )
    return rows


def airflow_text(task: Mapping[str, Any] | None) -> str | None:
    """``dag/run/task try N`` of the Airflow task a gateway runs in, or None."""
    if not task:
        return None
    text = "/".join(str(task[k]) for k in ("dagId", "runId", "taskId") if task.get(k))
    return f"{text} try {task['try']}" if task.get("try") else text


def gateways(admin: StreamAdmin, cluster: str, now: float | None = None) -> list[GatewayRow]:
    """``gateway list -cluster C``: every gateway of ``cluster`` (heartbeating or listed by a
    registered source cluster) with its status (live, expired, down, or stopping: live while its
    cluster's desired state is stopped), where it runs, its heartbeat's age, the source
    partitions it holds (``partitions`` and ``share``), who lists it, and the ``desired`` state."""
    admin.clusters.get(validate_cluster_name(cluster))
    now = time.time() if now is None else now
    listed = _listed_by(admin, [c.name for c in admin.clusters.list()])
    store = admin.clusters.store(cluster)
    return gateway_rows(store.catalog_list(HEARTBEAT_KIND), desired_state(store), listed.get(cluster, {}), now)


def all_gateways(
    admin: StreamAdmin, names: list[str], now: float, sources: list[str] | None = None
) -> dict[str, ClusterGateways]:
    """For the page: per cluster of ``names``, its ``desired`` state and its gateway rows
    (``gateways``), with the gateways that ``sources`` (default ``names``) list for it; a
    cluster that cannot be read has none."""
    listed = _listed_by(admin, names if sources is None else sources)
    result: dict[str, ClusterGateways] = {}
    for cluster in names:
        try:
            store = admin.clusters.store(cluster)
            beats, wanted = store.catalog_list(HEARTBEAT_KIND), desired_state(store)
        except StreamrepError:
            beats, wanted = {}, None
        result[cluster] = ClusterGateways(wanted, tuple(gateway_rows(beats, wanted, listed.get(cluster, {}), now)))
    return result


def heartbeats(store: Store) -> dict[str, float]:
    """The last heartbeat (seconds since the epoch) of every gateway of ``store``'s cluster."""
    return {gid: HeartbeatDoc.from_doc(doc).ts for gid, doc in store.catalog_list(HEARTBEAT_KIND).items()}


def gateway_outage(
    admin: StreamAdmin, source_cluster: str, cluster: str, expiry: float = HEARTBEAT_EXPIRY_SECONDS
) -> str | None:
    """Why no gateway replicates from ``source_cluster`` into ``cluster`` now (MapR's
    ErrAllGatewaysUnreachable), or None while one is live: one the source cluster lists for
    ``cluster`` (``cluster gateway set``), or any gateway of ``cluster`` if it lists none."""
    listed = admin.gateways(source_cluster).get(cluster)
    if live_gateways(eligible(heartbeats(admin.clusters.store(cluster)), listed), time.time(), expiry):
        return None
    if listed:
        return (
            f"ErrAllGatewaysUnreachable: none of the gateways {', '.join(listed)} that cluster "
            f"{source_cluster} lists for cluster {cluster} has a live heartbeat"
        )
    return f"ErrAllGatewaysUnreachable: no gateway of cluster {cluster} has a live heartbeat"


def live_gateways_of(
    store: Store,
    now: float | None = None,
    listed: Iterable[str] | None = None,
    expiry: float = HEARTBEAT_EXPIRY_SECONDS,
) -> list[str]:
    """The gateways of ``store``'s cluster with a live heartbeat (only those in ``listed``, if given)."""
    now = time.time() if now is None else now
    names = None if listed is None else set(listed)
    return sorted(gid for gid, ts in heartbeats(store).items() if now - ts < expiry and (names is None or gid in names))
