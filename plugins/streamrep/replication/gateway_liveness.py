"""A gateway's state and liveness: what one gateway keeps between passes (``GatewayLiveness.__init__``),
its heartbeats in its own cluster, and the stop requests it watches (``gateway stop``).

``Gateway`` (``gateway.py``) is built in layers, each a module of one responsibility, each layer
a subclass of the one before: this one, the shares (``gateway_shares.py``: which source partitions
it serves and the replica states it records), the passes (``gateway_passes.py``: what one pass
reads and applies), and the run loop (``gateway.py``). Layers rather than composition because
every step of a pass reads and updates the same state (the share, the errors, the pacer, the
heartbeat clock), and tests and benches reach those methods on the one object users construct.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError
from streamrep.model.gateways import GatewayStop, StopCause
from streamrep.model.paths import StreamPath
from streamrep.model.replication import validate_gateway_name
from streamrep.replication.assignment import HEARTBEAT_EXPIRY_SECONDS, HEARTBEAT_INTERVAL_SECONDS
from streamrep.replication.cursors import CursorSync
from streamrep.replication.flows import Blocked, Flow
from streamrep.replication.lag import LagRecorder, LagSampler
from streamrep.replication.service import StopWatch, announce, beat, heartbeats, stopped_line, withdraw
from streamrep.replication.throttle import Pacer
from streamrep.replication.transfer import SourcePartition

log = logging.getLogger("streamrep.replication.gateway")  # one logger for every layer of a gateway


def default_gateway_id() -> str:
    return socket.gethostname().split(".")[0] or "gateway"


class GatewayLiveness:
    """A gateway's state, its heartbeats and the stop requests it sees (the base of ``Gateway``, which
    checks who may run it before this is built)."""

    def __init__(
        self, admin: StreamAdmin, cluster: str, gateway_id: str | None = None, expiry: float = HEARTBEAT_EXPIRY_SECONDS
    ):
        self.admin = admin
        self.cluster = cluster
        self.id = validate_gateway_name(gateway_id or default_gateway_id())
        self.expiry = expiry
        self.store = self.admin.clusters.store(cluster)
        self.watch = StopWatch(self.store)
        self._share: list[str] | None = None  # the share last written to the heartbeat document
        self.unlisted_by: set[str] = set()  # source clusters whose gateway list leaves this gateway out
        self._last_beat = float("-inf")  # monotonic time of this gateway's last heartbeat
        self.cursor_sync = CursorSync()  # consumer groups' cursors, carried to the replicas (cursors.py)
        self.lag = LagRecorder(self.admin, cluster)  # lag history and metrics (replication/lag.py)
        self.applied = 0  # messages written to replicas (read ones skipped by loop prevention are not)
        self.served: set[Flow] = set()  # the flows of its last share
        self.errors: dict[Flow, str] = {}  # the flows its last pass could not serve, and why
        # The flows whose replica lost applied messages (or holds planted ones), found by the last
        # assignment: their partitions are left out until the replica is set up again.
        self.lost: dict[Flow, str] = {}
        self._blocked: dict[tuple[StreamPath, StreamPath], Blocked] = {}  # upstreams that could not flow, last pass
        self.logs_blocked = True  # whether a change in ``_blocked`` is logged (a drain says it in its error)
        # Set (by a signal handler, another thread) to end ``run`` after the batch in progress.
        self.stopping = threading.Event()
        self.stop_reason = "stopped"
        self._sampler: LagSampler | None = None  # while ``run`` runs: the lag is sampled beside the passes
        self.pacer = Pacer()  # -maxbytespersec and -throttle (replication/throttle.py)
        self._beating = False  # within run_once: a long wait for the limit keeps the heartbeat
        self._prepared: set[tuple[SourcePartition, str]] = set()  # (unit, replica UUID) made ready (_prepare)
        self._running = False  # within ``run``, where passes prepare ahead and take what arrives meanwhile
        self.check_seconds = 0.0  # what the last check of the replicas' partitions took (``_check_held``)

    @property
    def unreadable(self) -> list[Blocked]:
        """The upstreams whose stream could not be read, last pass."""
        return [b for b in self._blocked.values() if b.unreadable]

    def announce(self, where: Mapping[str, Any]) -> None:
        """The first beat of a run: where this gateway runs (``service.placement``)."""
        announce(self.store, self.id, where)
        self._share = None  # the new document holds no share yet

    def heartbeat(self) -> None:
        beat(self.store, self.id)
        self._last_beat = time.monotonic()

    def keep_alive(self) -> None:
        """Heartbeat if one is due (every HEARTBEAT_INTERVAL_SECONDS, and at least four times
        per expiry): at the start of every pass, and between the batches of a pass that drains a
        long backlog, which must not let its share expire and pass to the other gateways while it
        is still working on it. On Kafka a heartbeat is a transaction; one per pass cost a
        quarter of a pass's time (bench/README.md, "Kafka latency profile")."""
        if time.monotonic() - self._last_beat >= min(HEARTBEAT_INTERVAL_SECONDS, self.expiry / 4):
            self.heartbeat()

    def heartbeats(self) -> dict[str, float]:
        return heartbeats(self.store)

    def stop_requested(self, force: bool = False) -> bool:
        """Whether this cluster's gateways were asked to stop (read at most every heartbeat
        interval unless ``force``)."""
        return self.watch.stop_requested(force)

    def service_stop(self, cause: StopCause) -> GatewayStop:
        """This gateway does not run (``cause``: not started, or stopped) because its cluster's
        gateways are stopped: the stop request, and how to start them again."""
        return GatewayStop(self.id, cause, stopped_line(self.cluster, self.watch.doc))

    def stop(self) -> None:
        """Withdraw this gateway's heartbeat so the others take its share at once."""
        withdraw(self.store, self.id)

    def request_stop(self, reason: str) -> None:
        """End ``run`` after the batch in progress (its positions commit with it), saying ``reason``
        (its ``GatewayStop`` reads "gateway <id> <reason>")."""
        self.stop_reason = reason
        self.stopping.set()

    def _give_up_heartbeat(self) -> None:
        """``stop``, best effort: on a store that cannot take it (a full disk) the heartbeat
        expires by itself."""
        try:
            self.stop()
        except StreamrepError as err:
            log.warning("gateway %s: could not withdraw its heartbeat (%s); it expires by itself", self.id, err)
