"""Failover and failback, as procedures: ``stream replica failover`` and ``stream replica failback``.

**Failover** promotes a replica to take its source's place:

1. producers are refused on the source (its record says FENCED, ``model/failover.py``) and,
   after ``FENCE_GRACE_SECONDS`` (longer than a producer's view of the record may be stale),
2. the gateways drain what the replica lacks (bounded by ``timeout``);
3. the flow is stopped in the replica's own transactions: a stop mark per source partition
   (``model.replication.stop_key``) that every apply expects absent, so a gateway's batch in
   flight either committed before the stop or is refused, and none applies afterwards; then the
   replica withdraws its upstream agreement and the source's link shows REPLICA_STATE_FAILED_OVER;
4. the consumer groups' committed cursors are placed on the replica (``cursors.sync_cursors``);
5. the replica is recorded PROMOTED and the source FAILED_OVER: producers are sent to the replica.

With the source unreachable (its cluster lost), ``force`` promotes at once: steps 1, 2 and the
source's side of 3 and 5 are skipped, and the replica's record says how many messages it may lack
(the last known lag, when the gateways recorded one). A later failover run that finds the source
reachable again completes its side (refuses its producers), and failback brings over whatever
the source held that the replica lacked.

**Failback** gives the role back, without rebuilding anything. Two phases, run by one command
(``phase="all"``) or separately (``reverse``, then ``return``):

- ``reverse``: the promoted stream becomes the source of a reverse link into the old source
  (producers keep writing to the promoted stream). The apply never writes a message to its
  stream of origin, so the reverse flow copies only what was produced on the promoted stream:
  everything else in it came from the old source. The old source's end offsets are recorded.
- ``return``: producers are sent back to the source (RETURNING), which refuses them for the
  moment (TAKING_BACK); after the grace the reverse flow drains; it is stopped as in failover; the cursors are placed back on the old
  source; in each replica partition nothing was applied to from the source, where the replica's
  own writes end is marked (``model.replication.own_writes_key``: they are no planted topic); the
  original flow (source to replica) is restored from the replica's stored positions (so what the
  source held that the replica lacked now flows), the reverse link is removed and both records are
  cleared. ``copiedBack`` counts what the source received: exactly what was
  produced on the promoted stream.

Choice: the return is triggered by the same command. ``phase="all"`` adds the reverse link,
waits (bounded) until the reverse copy has nearly caught up while producers still write, then
returns; ``reverse`` and ``return`` let an operator run the long copy first and choose the moment
of the short write pause.

Every step finds its work done or does it, so each command is safe to retry.

The modules: ``stage`` (where a pair stands), ``plan`` (what a command will do, as data),
``steps`` (what failover and failback share), ``promote`` (failover and its abort) and
``failback``. The names below are the package's public ones: the CLI, Airflow and users' code
import them from here.
"""

from __future__ import annotations

from streamrep.model.failover import FailoverStage
from streamrep.replication.failover.failback import FailbackPhase, FailbackResult, failback
from streamrep.replication.failover.plan import (
    FailbackPlan,
    FailoverPlan,
    TopicLag,
    failback_plan,
    failover_plan,
    lag_by_topic,
    last_known_lag,
)
from streamrep.replication.failover.promote import FailoverResult, abort_failover, failover
from streamrep.replication.failover.stage import Pair, pair_of, stage
from streamrep.replication.failover.steps import (
    DEFAULT_TIMEOUT,
    FENCE_GRACE_SECONDS,
    MAX_WAIT_SECONDS,
    clear_stops,
    place_cursors,
    stop_flow,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "FENCE_GRACE_SECONDS",
    "MAX_WAIT_SECONDS",
    "FailbackPhase",
    "FailbackPlan",
    "FailbackResult",
    "FailoverPlan",
    "FailoverResult",
    "FailoverStage",
    "Pair",
    "TopicLag",
    "abort_failover",
    "clear_stops",
    "failback",
    "failback_plan",
    "failover",
    "failover_plan",
    "lag_by_topic",
    "last_known_lag",
    "pair_of",
    "place_cursors",
    "stage",
    "stop_flow",
]
