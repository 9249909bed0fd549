"""How fast a gateway applies into a replica: streamrep's byte-rate limit (``-maxbytespersec``)
and MapR's ``-throttle`` (back off while the replica's cluster is under load). Both act in
``Gateway._apply_reads``, the apply path of both engines (in-process and the Spark tasks), around the
transactional apply; neither touches what is applied, so exactly-once is the apply's as before.

**Byte-rate limit.** The bytes counted are the keys and values of the messages a batch carries
into the replica. Each gateway (each Spark task) keeps a token bucket per replica, filled at
its part of the limit and holding at most BURST_SECONDS of it; a batch takes its bytes first
and waits until the bucket is no longer in debt before it is applied. So the bytes a gateway
has written after t seconds are at most ``rate * (t + BURST_SECONDS)``: an upper bound no load
can break (load only makes it slower). The limit is shared without any coordination: every
gateway deals the source partitions the same way from the same heartbeats
(``assignment.deal``), so each knows how many live gateways hold partitions of the replica and
takes ``1/holders`` of its limit; the parts sum to the limit. A gateway that holds no partition
of the replica takes no part (a replica fed by one partition gets the whole limit at the one
gateway holding it). A Spark gateway's pass splits its part again among its tasks. What this
costs: a holder whose partitions are idle leaves its part unused, and while a gateway joins or
expires the gateways may briefly count different holders (for at most the heartbeat expiry).

**Load signal (``-throttle true``).** How long an apply takes on the replica's cluster against
that cluster's own recent baseline: the cost of an apply is its seconds over
``1 + bytes / COST_BYTES`` (a fixed part, the commit, and a part that grows with the batch),
the recent cost a moving average of it, and the baseline the lowest cost seen in the last
BASELINE_SECONDS (never below BASELINE_FLOOR_SECONDS: scheduling noise is not load). The cluster is under load while the recent cost is LOAD_FACTOR or more times
the baseline: a competing writer of the same SQLite file (its busy waits), a Kafka broker slow
to append or to commit (including one that throttles the producer by quota), or a machine short
of CPU. Under load the gateway waits ``(ratio - 1)`` times the apply's own time after it, at
most MAX_BACKOFF_SECONDS: it then keeps the cluster busy no longer than an apply took at the
baseline, and yields the rest to the competing load. A load lasting longer than the baseline
window becomes the new baseline, so replication never stalls for good. A batch feeds every
replica of its source partition in one transaction, so it backs off if any of them has
``-throttle true``.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from streamrep.model.message import Message

BURST_SECONDS = 0.25  # a bucket holds at most this many seconds of its rate
COST_BYTES = 1 << 20  # an apply of this many bytes costs twice its fixed part
LOAD_FACTOR = 2.0  # recent apply cost over the baseline at which the cluster is under load
BASELINE_SECONDS = 300.0  # the baseline is the lowest cost seen this long ago at most
BASELINE_SLOT_SECONDS = 30.0  # ... kept as the lowest of each slot of this length
RECENT_WEIGHT = 0.3  # of the newest apply in the moving average of the recent cost
MAX_BACKOFF_SECONDS = 5.0
# The baseline is never taken below this: sub-millisecond applies (embedded) vary by multiples
# with scheduling alone, which is no load on the cluster.
BASELINE_FLOOR_SECONDS = 0.002


def batch_bytes(batch: Sequence[Message]) -> int:
    """The bytes a batch counts against ``-maxbytespersec``: its keys and values."""
    return sum(len(m[0]) + len(m[1] or b"") for m in batch)


class ByteBucket:
    """A token bucket for one replica: ``take`` charges a batch and says how long to wait."""

    def __init__(self) -> None:
        self.tokens = 0.0  # starts empty: the bound holds from the first batch on
        self.at: float | None = None

    def take(self, rate: float, nbytes: int, now: float) -> float:
        """Charge ``nbytes`` at ``rate`` bytes a second; the seconds to wait before writing them."""
        if self.at is not None:
            self.tokens = min(self.tokens + (now - self.at) * rate, rate * BURST_SECONDS)
        self.at = now
        self.tokens -= nbytes
        return max(0.0, -self.tokens / rate)


class LoadSignal:
    """The replica cluster's load, from the gateway's own apply times (see the module's docstring)."""

    def __init__(self) -> None:
        self.recent: float | None = None
        self.slots: deque[tuple[float, float]] = deque()  # (slot start, lowest cost in it)

    def observe(self, seconds: float, nbytes: int, now: float) -> float:
        """Record one apply; returns the load ratio (recent cost over baseline, 1 when idle)."""
        cost = max(seconds, 1e-6) / (1 + nbytes / COST_BYTES)
        while self.slots and now - self.slots[0][0] > BASELINE_SECONDS:
            self.slots.popleft()
        if self.slots and now - self.slots[-1][0] < BASELINE_SLOT_SECONDS:
            start, low = self.slots[-1]
            self.slots[-1] = (start, min(low, cost))
        else:
            self.slots.append((now, cost))
        self.recent = cost if self.recent is None else self.recent + RECENT_WEIGHT * (cost - self.recent)
        baseline = max(min(low for _, low in self.slots), BASELINE_FLOOR_SECONDS)
        return max(1.0, self.recent / baseline)

    @staticmethod
    def backoff(seconds: float, ratio: float) -> float:
        """How long to wait after an apply that took ``seconds`` at load ``ratio``."""
        if ratio < LOAD_FACTOR:
            return 0.0
        return min(seconds * (ratio - 1), MAX_BACKOFF_SECONDS)


class Pacer:
    """A gateway's (or a Spark task's) byte buckets, its part of each replica's limit, and its
    load signal.

    :param clock: seconds, monotonic.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.parts: dict[str, float] = {}  # replica UUID -> this gateway's part of its limit (default 1)
        self.buckets: dict[str, ByteBucket] = {}
        self.load = LoadSignal()
        self.waited = 0.0  # seconds waited for the limits, in all
        self.backed_off = 0.0  # seconds backed off for load, in all

    def share(self, parts: Mapping[str, float]) -> None:
        """This gateway's part of each replica's limit from now on (``Gateway.assignment``)."""
        self.parts = dict(parts)

    def rate(self, replica_uuid: str, limit: int) -> float:
        return limit * self.parts.get(replica_uuid, 1.0)

    def before(self, limits: Iterable[tuple[str, int]], nbytes: int) -> float:
        """Charge a batch of ``nbytes`` to each limited replica (``(uuid, maxbytespersec)``, 0:
        no limit); the seconds to wait before applying it (the longest of theirs)."""
        now = self.clock()
        wait = 0.0
        for replica_uuid, limit in limits:
            if limit > 0:
                bucket = self.buckets.setdefault(replica_uuid, ByteBucket())
                wait = max(wait, bucket.take(self.rate(replica_uuid, limit), nbytes, now))
        self.waited += wait
        return wait

    def after(self, seconds: float, nbytes: int, throttled: bool) -> float:
        """Record an apply that took ``seconds``; the seconds to back off after it (0 unless
        ``throttled`` and the cluster is under load)."""
        ratio = self.load.observe(seconds, nbytes, self.clock())
        wait = self.load.backoff(seconds, ratio) if throttled else 0.0
        self.backed_off += wait
        return wait
