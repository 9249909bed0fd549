"""Failover and failback records: what a stream's catalog entry says about its role, and the
rule producers follow.

A failover moves the role of the writable stream from a source to one of its replicas. Each of
the two streams records where it stands (``StreamEntry.failover``), so ``stream info`` and
``stream replica list`` show it, producers know where to write, and failback knows what is done:

========================  =====================  =====================  ==============================
step                      source record          replica record         producers
========================  =====================  =====================  ==============================
failover: draining        FENCED                 (none)                 refused everywhere, retry
failover: done            FAILED_OVER            PROMOTED               to the replica
failback: reverse link    FAILING_BACK           PROMOTED               to the replica
failback: return          TAKING_BACK            RETURNING              to the source, which says retry
failback: done            (none)                 (none)                 to the source
========================  =====================  =====================  ==============================

The short refusals (FENCED, TAKING_BACK) are the clean cut: nothing is written anywhere while the
last messages drain, so nothing is written on the side being left that the other side lacks.

Where the pair stands, from both records, is its ``FailoverStage`` (``replication/failover/stage.py``
reads it): a plan shows it and each procedure starts from it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from enum import Enum
from typing import Any

from streamrep.errors import Conflict


class FailoverState(str, Enum):
    FENCED = "FENCED"  # a source being failed over: writes refused while the replica drains
    FAILED_OVER = "FAILED_OVER"  # a former source: its replica was promoted; writes go there
    PROMOTED = "PROMOTED"  # a replica that was promoted: producers write here
    FAILING_BACK = "FAILING_BACK"  # a former source receiving back what the promoted stream has
    RETURNING = "RETURNING"  # a promoted stream handing the role back: writes go to the source
    TAKING_BACK = "TAKING_BACK"  # a former source taking its role back: writes refused while it drains


class FailoverStage(str, Enum):
    """Where a source and its replica stand, read from both streams' records and links (one
    stream's own side is its ``FailoverState``). The values are what plans show."""

    LINKED = "linked"  # source -> replica flows (or may): a failover can start
    FAILING_OVER = "failing over"  # an earlier failover stopped part-way (the source is FENCED)
    FAILED_OVER = "failed over"  # the replica is PROMOTED
    FAILING_BACK = "failing back"  # the reverse link is in place
    RETURNING = "returning"  # the return step stopped part-way (the replica is RETURNING)

    @property
    def promoted(self) -> bool:
        """The replica has been promoted: failed over, or a failback is under way."""
        return self in (FailoverStage.FAILED_OVER, FailoverStage.FAILING_BACK, FailoverStage.RETURNING)


# A stream in one of these states refuses producers.
REFUSING = {
    FailoverState.FENCED,
    FailoverState.FAILED_OVER,
    FailoverState.FAILING_BACK,
    FailoverState.RETURNING,
    FailoverState.TAKING_BACK,
}
# Refused, and producers should write to the peer (in the others a step is under way: retry here).
REDIRECTING = {FailoverState.FAILED_OVER, FailoverState.FAILING_BACK, FailoverState.RETURNING}


@dataclass(frozen=True)
class FailoverRecord:
    """One stream's side of a failover.

    :param state: where this side stands.
    :param peer: the other stream's path (the replica for a source, the source for a replica).
    :param peer_uuid: the other stream's UUID (None if it was unreachable when recorded).
    :param since: when the failover began (ms since the epoch).
    :param forced: promoted without draining (the source was unreachable).
    :param missing: messages the replica may lack (the last known lag) for a forced failover; on a
        source failing back, the exact count of its messages the replica lacked (counted when it
        could be read again).
    :param missing_since: when that lag was sampled (ms since the epoch; None if none was).
    """

    state: FailoverState
    peer: str
    peer_uuid: str | None = None
    since: int = 0
    forced: bool = False
    missing: int | None = None
    missing_since: int | None = None
    # Failback: the source's end offset per ``topic/partition`` when the reverse link was added,
    # so the return step can count the messages copied back.
    baseline: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> FailoverRecord | None:
        if not data:
            return None
        names = {f.name for f in fields(cls)}
        known = {k: v for k, v in data.items() if k in names}
        known["state"] = FailoverState(known["state"])
        return cls(**known)

    def with_changes(self, **changes: Any) -> FailoverRecord:
        return replace(self, **changes)

    def describe(self) -> str:
        """One line for ``stream info`` and ``replica list``."""
        text = {
            FailoverState.FENCED: f"failing over to {self.peer} since {utc(self.since)}: writes paused; "
            "finish it with 'stream replica failover' or undo it with -abort true",
            FailoverState.FAILED_OVER: f"failed over to {self.peer}",
            FailoverState.PROMOTED: f"promoted: replaces {self.peer}",
            FailoverState.FAILING_BACK: f"failing back from {self.peer}",
            FailoverState.RETURNING: f"returning the role to {self.peer}",
            FailoverState.TAKING_BACK: f"taking its role back from {self.peer}: writes paused",
        }[self.state]
        if self.forced:
            text += f" (forced; {self.lag_known()})"
        return text

    def lag_known(self) -> str:
        """What a forced failover knew of the messages the replica lacks: the last lag sample and
        its time; whatever the source received after that time may be missing as well."""
        return lag_known(self.peer, self.missing, self.missing_since)


def utc(ms: int) -> str:
    """A time in ms since the epoch, as ``2026-11-27T20:31:05Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def lag_known(source: str, messages: int | None, at: int | None) -> str:
    """The last lag sample of a replica whose ``source`` cannot be read, in words."""
    if messages is None or at is None:
        return f"no lag was recorded: an unknown number of messages of {source} may be missing"
    return (
        f"the last lag sample, at {utc(at)}, was {messages} messages behind; anything produced on "
        f"{source} after that time may be missing as well"
    )


class WritesRefused(Conflict):
    """A producer wrote to a stream that a failover or failback has taken the role from.

    :param target: the stream to write to now, or None while a step is under way (retry).
    """

    def __init__(self, message: str, target: str | None = None):
        super().__init__(message)
        self.target = target


def check_writable(path: str, record: FailoverRecord | None) -> None:
    """Raise ``WritesRefused`` if producers may not write to the stream at ``path`` now."""
    if record is None or record.state not in REFUSING:
        return
    if record.state in REDIRECTING:
        raise WritesRefused(f"stream {path} {record.describe()}: produce to {record.peer}", record.peer)
    raise WritesRefused(f"stream {path} is {record.describe()}; retry in a moment", None)
