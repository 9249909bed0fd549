"""The documents gateways keep in their cluster's catalog, and why a running gateway ended.

- ``ServiceDoc`` (``gateway-service/desired``): the desired state of a cluster's gateways
  (``DesiredState``), who asked and when, and the supervisor's last ``LaunchRecord``.
- ``HeartbeatDoc`` (``gateway-heartbeat/<gateway id>``): a gateway's last beat, where it runs and
  the share it holds.
- ``GatewayStop``: why ``Gateway.run`` ended or did not start (``StopCause``), as one line.

Each document reads (``from_doc``) and writes (``to_doc``) the JSON that ``replication/service.py``
always wrote: a missing key takes its default, an unknown one (a newer streamrep's) is ignored, and
an optional field left unset is not written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any


class DesiredState(str, Enum):
    """What ``gateway start`` / ``gateway stop`` asked of a cluster's gateways."""

    RUNNING = "running"
    STOPPED = "stopped"


@dataclass(frozen=True)
class LaunchRecord:
    """The supervisor's last launch of a cluster's gateways: the ``stream_gateways`` run it
    triggered (``run_id``), when (``at``, seconds since the epoch), the launches since a gateway
    was last live (``attempts``, the backoff's count) and since the last start (``seq``, the run
    ids' count)."""

    run_id: str | None = None
    at: float = 0.0
    attempts: int = 0
    seq: int = 0

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"at": self.at, "attempts": self.attempts, "seq": self.seq}
        if self.run_id is not None:
            doc = {"runId": self.run_id, **doc}
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> LaunchRecord | None:
        if not doc:
            return None
        return cls(
            run_id=doc.get("runId"),
            at=float(doc.get("at") or 0),
            attempts=int(doc.get("attempts") or 0),
            seq=int(doc.get("seq") or 0),
        )


@dataclass(frozen=True)
class ServiceDoc:
    """A cluster's ``gateway-service/desired`` document: the ``state`` asked for, ``by`` whom and
    ``at`` what time, ``since`` when that state holds (a repeated start keeps it: the supervisor's
    run ids count from it), and the supervisor's last ``launch``."""

    state: DesiredState
    by: str | None = None
    at: float | None = None
    since: float | None = None
    launch: LaunchRecord | None = None

    @property
    def stopped(self) -> bool:
        return self.state is DesiredState.STOPPED

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"state": self.state.value, "by": self.by, "at": self.at}
        if self.launch is not None:
            doc["launch"] = self.launch.to_doc()
        if self.since is not None:
            doc["since"] = self.since
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> ServiceDoc:
        return cls(
            state=DesiredState(doc["state"]),
            by=doc.get("by"),
            at=doc.get("at"),
            since=doc.get("since"),
            launch=LaunchRecord.from_doc(doc.get("launch")),
        )


# The heartbeat document's optional keys, by field: written only when set.
_PLACEMENT = {"engine": "engine", "master": "master", "app_id": "appId", "airflow": "airflow"}


@dataclass(frozen=True)
class HeartbeatDoc:
    """A gateway's ``gateway-heartbeat/<id>`` document.

    :param ts: its last beat (seconds since the epoch).
    :param host: where it runs, with ``pid``; ``engine`` (``local`` or ``spark``), and on Spark
        ``master`` and ``app_id`` (None: unknown, or not on Spark).
    :param airflow: the Airflow task it runs in (``dagId``, ``runId``, ``taskId``, ``try``), or None.
    :param share: the source partitions it holds (``stream:topic/partition``), or None before it
        first wrote them.
    """

    ts: float
    host: str | None = None
    pid: int | None = None
    engine: str | None = None
    master: str | None = None
    app_id: str | None = None
    airflow: Mapping[str, str] | None = None
    share: tuple[str, ...] | None = None

    def to_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"ts": self.ts, "host": self.host, "pid": self.pid}
        for name, key in _PLACEMENT.items():
            if getattr(self, name):
                doc[key] = dict(self.airflow or {}) if name == "airflow" else getattr(self, name)
        if self.share is not None:
            doc["share"] = list(self.share)
        return doc

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> HeartbeatDoc:
        share = doc.get("share")
        return cls(
            ts=float(doc.get("ts", 0)),
            host=doc.get("host"),
            pid=doc.get("pid"),
            engine=doc.get("engine"),
            master=doc.get("master"),
            app_id=doc.get("appId"),
            airflow=doc.get("airflow") or None,
            share=None if share is None else tuple(share),
        )


class StopCause(Enum):
    """Why a running gateway ended: its cluster's gateways were stopped before it started
    (``NOT_STARTED``) or while it ran (``SERVICE_STOPPED``: ``gateway stop``), or it was asked
    to end directly (``REQUESTED``: a signal, another thread)."""

    NOT_STARTED = "not started"
    SERVICE_STOPPED = "stopped"
    REQUESTED = "requested"


@dataclass(frozen=True)
class GatewayStop:
    """How ``Gateway.run`` ended (``cause``), for ``gateway`` ``gateway_id``; ``detail`` says why
    in words (the stop request, or the reason given to ``Gateway.request_stop``). ``str()`` is
    the one line the front ends print."""

    gateway_id: str
    cause: StopCause
    detail: str

    def __str__(self) -> str:
        if self.cause is StopCause.REQUESTED:
            return f"gateway {self.gateway_id} {self.detail}"
        return f"gateway {self.gateway_id} {self.cause.value}: {self.detail}"
