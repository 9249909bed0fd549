"""Gateways as a service: the desired state of a cluster's gateways, what each live gateway
reports about itself, and the supervisor's decision. One place for these rules; the CLI
(``gateway start/stop/list``), the page, the supervisor DAG and the gateways themselves call it.

Documents, all in the catalog of the destination cluster the gateways serve (a gateway acts
with its cluster's authority, so its cluster is where its state belongs, and a cluster's state
travels with it):

- ``gateway-heartbeat/<gateway id>``: written by the gateway. ``ts`` (its last beat), ``host``,
  ``pid``, where it runs (``engine`` local|spark; on Spark the ``master`` and ``appId``; under
  Airflow the ``airflow`` task: dag id, run id, task id and try, from the ``AIRFLOW_CTX_*``
  variables Airflow exports to the task process), and its ``share``: the source partitions it
  holds, written whenever its assignment changes (not per beat: the catalog is not written more
  than needed). A gateway withdraws the document when it stops.
- ``gateway-service/desired``: ``state`` running|stopped, ``by`` and ``at`` of the last request,
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

Supervision (``supervise``): for a cluster whose desired state is ``running`` with no live
gateway and no launch in flight, launch (the caller triggers a ``stream_gateways`` run). Each
launch is recorded with a deterministic run id (so a retried supervisor triggers the same run
twice, harmlessly), and while launches produce no live heartbeat the wait before the next one
doubles from 30 s to 5 minutes. A launch is in flight while its run is queued or running (the
run's own task retries bring a dying gateway back), or, when the caller cannot tell, until the
backoff has passed.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.model.paths import validate_cluster_name
from streamrep.replication.assignment import (
    HEARTBEAT_EXPIRY_SECONDS,
    HEARTBEAT_INTERVAL_SECONDS,
    eligible,
    live_gateways,
)
from streamrep.store.base import Store

HEARTBEAT_KIND = "gateway-heartbeat"
SERVICE_KIND = "gateway-service"
SERVICE_KEY = "desired"
RUNNING, STOPPED = "running", "stopped"
STATES = (RUNNING, STOPPED)
LAUNCH_BACKOFF_MIN_SECONDS = 30.0
LAUNCH_BACKOFF_MAX_SECONDS = 300.0
# The stream_gateways run states in which a launch is still in flight.
ACTIVE_RUN_STATES = ("queued", "running")
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
    :param desired: its cluster's desired state (``RUNNING``, ``STOPPED``; None: not managed).
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
    desired: str | None

    @property
    def partitions(self) -> int:
        return len(self.share)


@dataclass(frozen=True)
class ClusterGateways:
    """A cluster's gateways for the page (``all_gateways``): its ``desired`` state and its gateways."""

    desired: str | None
    gateways: tuple[GatewayRow, ...]


@dataclass(frozen=True)
class ServiceRequest:
    """``gateway start`` / ``stop`` as recorded: the ``desired`` state, who asked (``by``) and
    when (``at``, seconds since the epoch), and the gateways ``live`` now."""

    cluster: str
    desired: str
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
    """A gateway's first beat: its whole document, replacing what an earlier run left."""
    store.catalog_update(HEARTBEAT_KIND, gateway_id, lambda _: {"ts": time.time(), **where})


def beat(store: Store, gateway_id: str, **fields: Any) -> None:
    """A heartbeat (and ``fields``, e.g. the share), keeping what the gateway announced. A
    gateway that never announced (a Spark reader process, ``run_once``) records this process."""

    def change(old: dict | None) -> dict:
        doc = dict(old) if old else {"host": socket.gethostname(), "pid": os.getpid()}
        doc.update(fields, ts=time.time())
        return doc

    store.catalog_update(HEARTBEAT_KIND, gateway_id, change)


def withdraw(store: Store, gateway_id: str) -> None:
    store.catalog_update(HEARTBEAT_KIND, gateway_id, lambda _: None)


def share_names(units: Iterable[Any]) -> list[str]:
    """A gateway's share as ``stream:topic/partition`` names, sorted (``units``: SourcePartitions)."""
    return sorted(f"{u.source}:{u.topic}/{u.partition}" for u in units)


# -- desired state ----------------------------------------------------------------------
def desired(store: Store) -> dict[str, Any] | None:
    """The cluster's service document, or None when its gateways are not managed."""
    return store.catalog_get(SERVICE_KIND, SERVICE_KEY)


def desired_state(store: Store) -> str | None:
    doc = desired(store)
    return None if doc is None else doc.get("state")


def is_stopped(doc: Mapping[str, Any] | None) -> bool:
    """Whether a service document (``desired``) asks the gateways to stop."""
    return doc is not None and doc.get("state") == STOPPED


def stopped_reason(store: Store, cluster: str) -> str | None:
    """Why a gateway of ``cluster`` must not start now (``stopped_line``), or None when its
    gateways are started or not managed."""
    doc = desired(store)
    return stopped_line(cluster, doc) if is_stopped(doc) else None


def stopped_line(cluster: str, doc: Mapping[str, Any] | None) -> str:
    """Why a gateway of ``cluster`` does not run: the stop request, and how to start again."""
    by = f" by {doc.get('by')}" if doc and doc.get("by") else ""
    at = f" at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(doc['at']))}" if doc and doc.get("at") else ""
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
        self.doc: dict[str, Any] | None = None
        self._read_at: float | None = None

    def stop_requested(self, force: bool = False) -> bool:
        now = time.monotonic()
        if force or self._read_at is None or now - self._read_at >= self.interval:
            self.doc = desired(self.store)
            self._read_at = now
        return is_stopped(self.doc)


def request(admin: StreamAdmin, cluster: str, state: str) -> ServiceRequest:
    """``gateway start`` / ``gateway stop``: record the desired state of ``cluster``'s gateways.
    Needs adminperm on the cluster. Safe to repeat: asking for the state in force records the
    new request and changes nothing else.

    :return: the request as recorded, and the gateways live now.
    """
    if state not in STATES:
        raise InvalidArgument(f"gateway state must be one of {', '.join(STATES)}, not {state!r}")
    admin.clusters.get(validate_cluster_name(cluster))  # NotFound for an unknown cluster
    admin.require_cluster_admin(cluster)
    store = admin.clusters.store(cluster)
    now = time.time()

    def change(old: dict | None) -> dict:
        doc = {"state": state, "by": admin.identity.user, "at": now}
        if old and old.get("state") == state and state == RUNNING:
            doc["launch"] = old.get("launch")  # a repeated start keeps the supervisor's backoff
            doc["since"] = old.get("since", now)
        else:
            doc["since"] = now  # a new generation: the supervisor's run ids start afresh
        return doc

    doc = store.catalog_update(SERVICE_KIND, SERVICE_KEY, change) or {}
    return ServiceRequest(cluster, doc.get("state", state), doc.get("by"), doc.get("at"), tuple(_live(admin, cluster)))


def next_step(req: ServiceRequest, supervisor: str) -> str:
    """What happens after ``req``, in words: who starts the gateways (``supervisor`` says what the
    supervisor DAG will do), or which ones are still to stop."""
    if req.desired == RUNNING:
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
    wanted: str | None,
    listed: Mapping[str, list[str]],
    now: float,
    expiry: float = HEARTBEAT_EXPIRY_SECONDS,
) -> list[GatewayRow]:
    """The rows of one cluster's gateways: those heartbeating (``beats``: the heartbeat
    documents) and those listed (gateway -> source clusters), given the ``wanted`` state."""
    rows = []
    for gid in sorted(set(beats) | set(listed)):
        beat_doc = beats.get(gid) or {}
        age = None if not beat_doc else max(0.0, now - float(beat_doc.get("ts", 0)))
        if age is None:
            status = GatewayStatus.DOWN
        elif age >= expiry:
            status = GatewayStatus.EXPIRED
        else:
            status = GatewayStatus.STOPPING if wanted == STOPPED else GatewayStatus.LIVE
        share = tuple(beat_doc.get("share") or ()) if status.holds_share else ()
        rows.append(
            GatewayRow(
                id=gid,
                status=status,
                host=beat_doc.get("host"),
                pid=beat_doc.get("pid"),
                engine=beat_doc.get("engine"),
                master=beat_doc.get("master"),
                app_id=beat_doc.get("appId"),
                airflow=airflow_text(beat_doc.get("airflow")),
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
    return {gid: doc["ts"] for gid, doc in store.catalog_list(HEARTBEAT_KIND).items()}


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
    return sorted(
        gid
        for gid, doc in store.catalog_list(HEARTBEAT_KIND).items()
        if now - float(doc.get("ts", 0)) < expiry and (names is None or gid in names)
    )


# -- supervision --------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """What the supervisor does for one cluster.

    :param cluster: the destination cluster.
    :param launch: whether to trigger a ``stream_gateways`` run now.
    :param run_id: the run to trigger (deterministic: the same launch always has the same id).
    :param reason: one line for the log.
    """

    cluster: str
    launch: bool
    run_id: str | None
    reason: str


def launch_backoff(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th launch that produced no live gateway."""
    return min(LAUNCH_BACKOFF_MAX_SECONDS, LAUNCH_BACKOFF_MIN_SECONDS * 2 ** max(0, attempts - 1))


def launch_run_id(cluster: str, since: float, attempt: int) -> str:
    return f"gateway_service__{cluster}__{int(since * 1000)}__{attempt}"


RunState = Callable[[str], "str | None"]


def supervise(
    admin: StreamAdmin, cluster: str, run_state: RunState | None = None, now: float | None = None
) -> Decision:
    """The supervisor's decision for ``cluster`` (and its record of a launch). Needs adminperm
    on the cluster, as starting a gateway does.

    :param run_state: the state of a ``stream_gateways`` run by run id (``queued``, ``running``,
        ``success``, ``failed``; None when unknown): a launch whose run is still active is in
        flight, whatever the backoff says.
    :param now: the time (seconds since the epoch).
    """
    now = time.time() if now is None else now
    store = admin.clusters.store(cluster)
    doc = desired(store)
    if doc is None or doc.get("state") != RUNNING:
        state = "not managed" if doc is None else doc.get("state")
        return Decision(cluster, False, None, f"{cluster}: desired state is {state}: nothing to supervise")
    live = live_gateways_of(store, now)
    launch = dict(doc.get("launch") or {})
    if live:
        if launch.get("attempts"):  # healthy again: the next outage starts from the shortest wait
            _record(store, doc, {**launch, "attempts": 0})
        return Decision(cluster, False, None, f"{cluster}: live gateways {', '.join(live)}")
    last_run = launch.get("runId")
    if last_run and run_state is not None:
        state = _safe_state(run_state, last_run)
        if state in ACTIVE_RUN_STATES:
            return Decision(cluster, False, None, f"{cluster}: launch {last_run} is {state}: in flight")
    attempts = int(launch.get("attempts") or 0)
    if last_run and now < float(launch.get("at") or 0) + launch_backoff(attempts):
        wait = float(launch["at"]) + launch_backoff(attempts) - now
        return Decision(
            cluster,
            False,
            None,
            f"{cluster}: no live gateway; next launch in {wait:.0f} s (backoff after {attempts} launches)",
        )
    admin.require_cluster_admin(cluster)
    run_id = launch_run_id(cluster, float(doc.get("since") or doc.get("at") or now), int(launch.get("seq") or 0) + 1)
    _record(store, doc, {"runId": run_id, "at": now, "attempts": attempts + 1, "seq": int(launch.get("seq") or 0) + 1})
    return Decision(cluster, True, run_id, f"{cluster}: no live gateway: launching {run_id}")


def _safe_state(run_state: RunState, run_id: str) -> str | None:
    try:
        state = run_state(run_id)
    except Exception:  # noqa: BLE001 - unknown (never created, or Airflow cannot say): use the backoff
        return None
    return None if state is None else str(getattr(state, "value", state)).lower()


def _record(store: Store, seen: Mapping[str, Any], launch: dict[str, Any]) -> None:
    """Record the supervisor's launch, unless the desired state changed since it was read."""

    def change(old: dict | None) -> dict | None:
        if old is None or old.get("state") != seen.get("state") or old.get("since") != seen.get("since"):
            return old  # a stop or a new start came in between: leave it as it is
        return {**old, "launch": launch}

    store.catalog_update(SERVICE_KIND, SERVICE_KEY, change)


def managed_clusters(admin: StreamAdmin, names: Iterable[str]) -> list[str]:
    """The clusters of ``names`` whose gateways' desired state is running (unreadable ones skipped)."""
    result = []
    for name in names:
        try:
            if desired_state(admin.clusters.store(name)) == RUNNING:
                result.append(name)
        except StreamrepError:
            continue
    return sorted(result)
