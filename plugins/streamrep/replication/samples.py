"""A replica's lag as measured (``LagSample``), its recorded history (``LagHistory``) and the
thresholds it is held to (``Thresholds``): the values ``lag.py`` records and checks, and
``metrics.py`` exports."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamrep.model.paths import StreamPath

FIELDS = ("t", "messages", "bytes", "ms")  # a stored sample row, in this order


@dataclass(frozen=True)
class LagSample:
    """One measurement of a replica's lag: at ``t`` (ms since the epoch) it lacked ``messages``
    (``bytes`` of values), the oldest of which had waited ``ms``."""

    t: int
    messages: int
    bytes: int
    ms: int

    def row(self) -> list[int]:
        """As stored: ``FIELDS`` in order."""
        return [int(getattr(self, name)) for name in FIELDS]


@dataclass(frozen=True)
class LagHistory:
    """A flow's ``replica-lag`` document: its ``source`` and ``replica`` paths, the sampling
    interval it was written with (``every``, seconds) and its ``samples``, oldest first (stored
    as compact ``FIELDS`` rows). A field missing from an older document is None."""

    source: str | None = None
    replica: str | None = None
    every: float | None = None
    samples: tuple[LagSample, ...] = ()

    @property
    def newest(self) -> int | None:
        """When the newest sample was taken (ms since the epoch), or None."""
        return self.samples[-1].t if self.samples else None

    def to_doc(self) -> dict[str, Any]:
        rows = [sample.row() for sample in self.samples]
        return {"source": self.source, "replica": self.replica, "every": self.every, "samples": rows}

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> LagHistory:
        doc = doc or {}
        rows = doc.get("samples") or ()
        return cls(doc.get("source"), doc.get("replica"), doc.get("every"), tuple(LagSample(*row) for row in rows))


@dataclass(frozen=True)
class Thresholds:
    """A replica's alert thresholds (None: no threshold)."""

    max_lag_millis: int | None = None
    max_lag_messages: int | None = None


NO_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class AlertSetting:
    """``stream replica alert``: a replica's thresholds once set."""

    source: StreamPath
    replica: StreamPath
    thresholds: Thresholds


@dataclass(frozen=True)
class AlertCheck:
    """One flow checked by the monitor (``lag.check_alerts``), or a cluster that could not be.

    :param source: the source stream (None: ``cluster`` itself could not be checked).
    :param replica: the replica stream (None likewise).
    :param paused: whether the flow is paused (None likewise).
    :param thresholds: the replica's thresholds, and ``sample`` its lag now (both None when
        they could not be read).
    :param problems: what is wrong, one phrase each (empty: nothing).
    """

    source: StreamPath | None
    replica: StreamPath | None
    cluster: str
    paused: bool | None
    problems: tuple[str, ...]
    thresholds: Thresholds | None = None
    sample: LagSample | None = None
