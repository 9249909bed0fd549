"""What a comparison found: each ``Difference`` by its ``Kind``, the consistent point of each
partition (``PartitionPoint``), the messages lost to retention before replication (``Loss``), and
the counts and one-line summary of the whole run (``DiffResult``).

**Exit 1** (``DiffResult.same`` false) when there is a difference or an unacknowledged loss: a
replica about to take over lacks messages nobody accepted losing. Expired messages, acknowledged
losses and what is in flight do not make it differ; the summary line counts each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, NamedTuple

from streamrep.model.paths import StreamPath
from streamrep.replication.diff.identity import Origin, Place


class Kind(str, Enum):
    """What differs about one identity."""

    MISSING_IN_DST = "missing in dst"  # the source holds it, the destination does not
    EXTRA_IN_DST = "extra in dst"  # the destination holds it, the source does not
    CHANGED = "changed"  # both hold it, with another key, value, headers, timestamp or partition
    OUT_OF_ORDER = "out of order"  # both hold it, but not in the same order among its origin's messages
    DUPLICATED = "duplicated"  # one stream holds it twice


@dataclass(frozen=True)
class Difference:
    """One difference: ``kind``, the identity (``topic``, ``origin``), and where each side holds it
    (None: not there). ``duplicate`` is the second copy's place, for ``DUPLICATED`` (on ``side``)."""

    kind: Kind
    topic: str
    origin: Origin
    src: Place | None
    dst: Place | None
    side: str = ""  # for DUPLICATED: "src" or "dst"
    duplicate: Place | None = None


class PartitionPoint(NamedTuple):
    """The consistent point of one topic partition: each side's ``[start, end)`` when the run
    started (None: the side has no such partition), and what each had applied of the other (its
    position mark; None: it does not replicate the other)."""

    topic: str
    partition: int
    src: tuple[int, int] | None
    dst: tuple[int, int] | None
    dst_applied: int | None
    src_applied: int | None


@dataclass(frozen=True)
class Loss:
    """Offsets ``first`` to ``last`` of a partition of ``source`` ("src" or "dst") that its retention
    removed before the other stream, its replica, applied them: neither holds them. From the
    replica's loss records (``model.replication.loss_key``), or its position below the source's
    start (a loss a gateway has yet to record); ``acknowledged`` by ``stream replica acknowledge``."""

    source: str
    topic: str
    partition: int
    first: int
    last: int
    acknowledged: bool

    @property
    def messages(self) -> int:
        return self.last - self.first + 1


@dataclass
class DiffResult:
    """What a comparison found, up to its consistent point."""

    src: StreamPath
    src_uuid: str
    dst: StreamPath
    dst_uuid: str
    crc: bool
    dst_replicates_src: bool
    src_replicates_dst: bool
    points: list[PartitionPoint] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    compared: int = 0  # messages compared (both sides)
    dst_behind: int = 0  # source messages the destination has not applied yet (in flight)
    src_behind: int = 0  # destination messages the source has not applied yet (multi-master)
    read_messages: int = 0  # messages read from both stores (the CRC variant reads some twice)
    read_bytes: int = 0  # their keys and values
    runs: int = 0  # CRC runs compared (the CRC variant)
    runs_differing: int = 0
    stopped_early: bool = False  # -first_exit stopped at the first difference
    expired_in_src: int = 0  # the destination holds them; the source's retention removed them since
    expired_in_dst: int = 0  # the source holds them; the destination's retention removed them since
    losses: list[Loss] = field(default_factory=list)

    def count(self, kind: Kind) -> int:
        return sum(1 for d in self.differences if d.kind is kind)

    @property
    def lost(self) -> int:
        """Messages lost to retention before replication that no admin has acknowledged."""
        return sum(loss.messages for loss in self.losses if not loss.acknowledged)

    @property
    def lost_acknowledged(self) -> int:
        return sum(loss.messages for loss in self.losses if loss.acknowledged)

    @property
    def same(self) -> bool:
        """No difference and no unacknowledged loss (the rule of exit 1: the module's docstring)."""
        return not self.differences and not self.lost

    def summary(self) -> str:
        """The one line: ``same: ...`` or ``differ: 3 missing in dst, ...``."""
        behind = f"dst {self.dst_behind} behind"
        if self.src_replicates_dst:
            behind += f", src {self.src_behind} behind"
        notes = [f"{behind}, not counted"]
        for count, text in (
            (self.expired_in_src, "expired in src"),
            (self.expired_in_dst, "expired in dst"),
            (self.lost_acknowledged, "lost to retention before replication, acknowledged"),
        ):
            if count:
                notes.append(f"{count} {text}")
        if self.same:
            return f"same: {self.compared} messages compared ({'; '.join(notes)})"
        counts = [f"{self.count(k)} {k.value}" for k in Kind if k is not Kind.DUPLICATED]
        if self.count(Kind.DUPLICATED):
            counts.append(f"{self.count(Kind.DUPLICATED)} duplicated")
        if self.lost:
            counts.append(f"{self.lost} lost to retention before replication, not acknowledged")
        stopped = "; stopped at the first difference" if self.stopped_early else ""
        return f"differ: {', '.join(counts)} ({'; '.join(notes)}){stopped}"

    def to_dict(self, outdir: str) -> dict[str, Any]:
        """The result as the CLI's ``-json`` row, the Spark app's JSON line and the operators'
        return value: the counts and the summary line (``outdir``: where the ops were written)."""
        return {
            "src": str(self.src),
            "srcUuid": self.src_uuid,
            "dst": str(self.dst),
            "dstUuid": self.dst_uuid,
            "same": self.same,
            "missingInDst": self.count(Kind.MISSING_IN_DST),
            "extraInDst": self.count(Kind.EXTRA_IN_DST),
            "changed": self.count(Kind.CHANGED),
            "outOfOrder": self.count(Kind.OUT_OF_ORDER),
            "duplicated": self.count(Kind.DUPLICATED),
            "dstBehind": self.dst_behind,
            "srcBehind": self.src_behind,
            "expiredInSrc": self.expired_in_src,
            "expiredInDst": self.expired_in_dst,
            "lost": self.lost,
            "lostAcknowledged": self.lost_acknowledged,
            "compared": self.compared,
            "readMessages": self.read_messages,
            "readBytes": self.read_bytes,
            "stoppedEarly": self.stopped_early,
            "outdir": outdir,
            "summary": self.summary(),
        }
