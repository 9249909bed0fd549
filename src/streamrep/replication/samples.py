"""A replica's lag as measured (``LagSample``) and the thresholds it is held to (``Thresholds``):
the values ``lag.py`` records and checks, and ``metrics.py`` exports."""

from __future__ import annotations

from dataclasses import dataclass

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
