"""The gateways' supervisor: the ``stream_gateway_service`` DAG's decision, for each cluster whose
gateways should run, whether to launch a ``stream_gateways`` run now.

For a cluster whose desired state is ``running`` (``replication/service.py``) with no live
gateway and no launch in flight, launch. Each launch is recorded in the cluster's service
document with a deterministic run id (so a retried supervisor triggers the same run twice,
harmlessly), and while launches produce no live heartbeat the wait before the next one doubles
from 30 s to 5 minutes. A launch is in flight while its run is queued or running (the run's own
task retries bring a dying gateway back), or, when the caller cannot tell, until the backoff
has passed. The supervisor keeps no state of its own: all of it is in the clusters' catalogs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, Protocol

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.model.gateways import DesiredState, LaunchRecord
from streamrep.replication import service

GATEWAYS_DAG_ID = "stream_gateways"  # the DAG whose runs are a cluster's gateways
LAUNCH_BACKOFF_MIN_SECONDS = 30.0
LAUNCH_BACKOFF_MAX_SECONDS = 300.0
# The stream_gateways run states in which a launch is still in flight.
ACTIVE_RUN_STATES = ("queued", "running")

# The state of a ``stream_gateways`` run by run id (``queued``, ``running``, ``success``, ...;
# None when unknown).
RunState = Callable[[str], "str | None"]


class Log(Protocol):
    """Where ``launches`` says what it decided: a task's logger (Airflow's or ``logging``'s)."""

    def info(self, msg: Any, /, *args: Any) -> Any: ...

    def error(self, msg: Any, /, *args: Any) -> Any: ...


class ServiceAction(str, Enum):
    """What a ``stream_gateway_service`` run does: ``SUPERVISE`` (every scheduled run), or
    ``START`` / ``STOP`` a cluster's gateways (``START`` then supervises it at once)."""

    SUPERVISE = "supervise"
    START = "start"
    STOP = "stop"

    @classmethod
    def parse(cls, text: str) -> ServiceAction:
        try:
            return cls(text)
        except ValueError:
            names = ", ".join(action.value for action in cls)
            raise InvalidArgument(f"action must be one of {names}, not {text!r}") from None

    @property
    def desired(self) -> DesiredState:
        """The desired state ``START`` or ``STOP`` asks for."""
        return DesiredState.RUNNING if self is ServiceAction.START else DesiredState.STOPPED


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

    @classmethod
    def wait(cls, cluster: str, reason: str) -> Decision:
        return cls(cluster, False, None, f"{cluster}: {reason}")


def launch_backoff(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th launch that produced no live gateway."""
    return min(LAUNCH_BACKOFF_MAX_SECONDS, LAUNCH_BACKOFF_MIN_SECONDS * 2.0 ** max(0, attempts - 1))


def launch_run_id(cluster: str, since: float, attempt: int) -> str:
    return f"gateway_service__{cluster}__{int(since * 1000)}__{attempt}"


def supervise(
    admin: StreamAdmin, cluster: str, run_state: RunState | None = None, now: float | None = None
) -> Decision:
    """The supervisor's decision for ``cluster`` (and its record of a launch). Needs adminperm
    on the cluster, as starting a gateway does.

    :param run_state: the state of a ``stream_gateways`` run by run id: a launch whose run is
        still active is in flight, whatever the backoff says.
    :param now: the time (seconds since the epoch).
    """
    now = time.time() if now is None else now
    store = admin.clusters.store(cluster)
    doc = service.desired(store)
    if doc is None or doc.state is not DesiredState.RUNNING:
        state = "not managed" if doc is None else doc.state.value
        return Decision.wait(cluster, f"desired state is {state}: nothing to supervise")
    live = service.live_gateways_of(store, now)
    launch = doc.launch or LaunchRecord()
    if live:
        if launch.attempts:  # healthy again: the next outage starts from the shortest wait
            service.record_launch(store, doc, replace(launch, attempts=0))
        return Decision.wait(cluster, f"live gateways {', '.join(live)}")
    if launch.run_id and run_state is not None:
        run = _safe_state(run_state, launch.run_id)
        if run in ACTIVE_RUN_STATES:
            return Decision.wait(cluster, f"launch {launch.run_id} is {run}: in flight")
    if launch.run_id and now < launch.at + launch_backoff(launch.attempts):
        wait = launch.at + launch_backoff(launch.attempts) - now
        return Decision.wait(
            cluster, f"no live gateway; next launch in {wait:.0f} s (backoff after {launch.attempts} launches)"
        )
    admin.require_cluster_admin(cluster)
    run_id = launch_run_id(cluster, float(doc.since or doc.at or now), launch.seq + 1)
    service.record_launch(store, doc, LaunchRecord(run_id, now, launch.attempts + 1, launch.seq + 1))
    return Decision(cluster, True, run_id, f"{cluster}: no live gateway: launching {run_id}")


def _safe_state(run_state: RunState, run_id: str) -> str | None:
    try:
        state = run_state(run_id)
    except Exception:  # noqa: BLE001 - unknown (never created, or Airflow cannot say): use the backoff
        return None
    return None if state is None else str(getattr(state, "value", state)).lower()


def managed_clusters(admin: StreamAdmin, names: Iterable[str]) -> list[str]:
    """The clusters of ``names`` whose gateways' desired state is running (unreadable ones skipped)."""
    result = []
    for name in names:
        try:
            if service.desired_state(admin.clusters.store(name)) is DesiredState.RUNNING:
                result.append(name)
        except StreamrepError:
            continue
    return sorted(result)


def launches(admin: StreamAdmin, names: list[str], run_state: RunState | None, log: Log) -> list[dict[str, Any]]:
    """Supervise each cluster of ``names``: the ``stream_gateways`` runs to trigger, as
    ``TriggerDagRunOperator`` kwargs (``trigger_run_id``; ``conf``: ``cluster``, ``once: false``).
    One cluster down or refused does not keep the others down; if none can be supervised, the
    first error is raised."""
    result, failed = [], []
    for name in names:
        try:
            decision = supervise(admin, name, run_state)
        except StreamrepError as err:
            log.error("%s: cannot supervise: %s", name, err)
            failed.append(err)
            continue
        log.info("%s", decision.reason)
        if decision.launch:
            result.append({"trigger_run_id": decision.run_id, "conf": {"cluster": name, "once": False}})
    if failed and len(failed) == len(names):
        raise failed[0]  # nothing could be supervised: the run says so
    return result
