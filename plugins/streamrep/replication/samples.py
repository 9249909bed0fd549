"""A replica's lag as measured (``LagSample``) and the thresholds it is held to (``Thresholds``):
the values ``lag.py`` records and checks, and ``metrics.py`` exports."""

from __future__ import annotations

from dataclasses import dataclass

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
