"""A gateway: a worker on a destination cluster that pulls from source streams and applies
their messages to every replica on its cluster.

A running gateway stops cleanly when its cluster's gateways are asked to stop (``gateway stop``,
``streamrep.replication.service``): it notices at its next heartbeat, finishes the pass in
progress, withdraws its heartbeat and returns.

Gateways heartbeat in their own cluster. The source partitions that flow into the cluster are
dealt round-robin to the live gateways that the source cluster lists for this destination
(``cluster gateway set``; a source cluster that lists none accepts any gateway of the
destination). A gateway that stops heartbeating loses its share to the others, which resume
from the stored positions. Nothing is lost while every gateway is down: data waits at the
source, and whichever gateway comes back resumes from the positions.

``Gateway`` is built in layers (``gateway_liveness.py``): liveness, shares, passes, and here the
run loop and why it stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError, Unavailable
from streamrep.model.gateways import GatewayStop, StopCause
from streamrep.replication.assignment import HEARTBEAT_EXPIRY_SECONDS
from streamrep.replication.gateway_liveness import log
from streamrep.replication.gateway_passes import GatewayPasses
from streamrep.replication.lag import LagSampler
from streamrep.replication.service import HEARTBEAT_KIND, gateway_outage, heartbeats, placement

# HEARTBEAT_KIND, heartbeats and gateway_outage are defined with the other service documents in service.py;
# callers keep importing them from here.
__all__ = ["HEARTBEAT_KIND", "Gateway", "Outage", "gateway_outage", "heartbeats"]
UNAVAILABLE_RETRY_MAX_SECONDS = 5.0  # a gateway retries a cluster that is down at least this often


class Outage:
    """How a running gateway rides out a cluster that is down or restarting: a pass that fails
    with ``Unavailable`` is logged and retried after a wait that doubles up to
    UNAVAILABLE_RETRY_MAX_SECONDS. Nothing of the pass is half-applied (each apply is one
    transaction), so the next pass resumes exactly from the stored positions.

    :param wait: how to wait (``time.sleep``; an Event's ``wait`` to stay stoppable).
    """

    def __init__(self, gateway_id: str, interval: float, wait: Callable[[float], object] = time.sleep):
        self.gateway_id = gateway_id
        self.interval = interval
        self.delay = interval
        self.wait = wait

    def failed(self, err: Unavailable) -> None:
        log.warning("gateway %s: pass failed, retrying in %.1f s: %s", self.gateway_id, self.delay, err)
        self.wait(self.delay)
        self.delay = min(max(self.delay, 0.1) * 2, UNAVAILABLE_RETRY_MAX_SECONDS)

    def ended(self) -> None:
        self.delay = self.interval


class Gateway(GatewayPasses):
    """One gateway of ``cluster``.

    :param admin: the admin API (cluster registry and identity).
    :param cluster: the destination cluster this gateway serves.
    :param gateway_id: its name, as listed by ``cluster gateway set`` (default: host name).
    """

    def __init__(
        self, admin: StreamAdmin, cluster: str, gateway_id: str | None = None, expiry: float = HEARTBEAT_EXPIRY_SECONDS
    ):
        admin.require_gateway(cluster)  # its cluster admin, or the cluster's authenticated gateway principal
        super().__init__(admin, cluster, gateway_id, expiry)

    def drain(self) -> int:
        """``gateway run -once``: replicate everything available now (every partition the source
        clusters let this gateway pull) until a pass reads nothing, then sync the consumer groups'
        cursors once, so a short drain leaves them translated on the replicas. Returns the
        messages applied. Unavailable (after the drain) if an upstream could not be read."""
        before = self.applied
        self.logs_blocked = False  # its error names an upstream it cannot read, once
        try:
            while self.run_once(whole=True) and not self.stopping.is_set():
                pass
        finally:
            self.logs_blocked = True
        if self.errors:  # the replicas' links say it too (``replica list``)
            first = sorted(set(self.errors.values()))
            more = f" (and {len(first) - 1} more errors)" if len(first) > 1 else ""
            raise StreamrepError(f"replication stopped: {first[0]}{more}")
        self.cursor_sync.sync(self.admin, self.store, self.assignment(whole=True).units)
        if self.unreadable:
            raise Unavailable(
                "; ".join(f"upstream {b.source} of {b.replica} cannot be read: {b.reason}" for b in self.unreadable)
                + ": nothing from it was replicated"
            )
        return self.applied - before

    def run(
        self, interval: float = 0.2, stop_after: float | None = None, where: Mapping[str, Any] | None = None
    ) -> GatewayStop | None:
        """Replicate until asked to stop (``gateway stop``), interrupted, or for ``stop_after``
        seconds. A gateway whose cluster's gateways are stopped does not start.

        :param where: where it runs (``service.placement``; default: this process, engine local).
        :return: None after ``stop_after``, else why it stopped or did not start.
        """
        if self.stop_requested(force=True):
            return self.service_stop(StopCause.NOT_STARTED)
        deadline = None if stop_after is None else time.monotonic() + stop_after
        self.announce(where or placement("local"))
        outage = Outage(self.id, interval, wait=self.stopping.wait)
        sampler = self._sampler = LagSampler(self.lag, self.id, min(1.0, max(interval, 0.1)))
        self._running = True
        sampler.start()
        try:
            while deadline is None or time.monotonic() < deadline:
                if self.stopping.is_set():  # a signal: the last batch's positions are committed
                    return GatewayStop(self.id, StopCause.REQUESTED, self.stop_reason)
                try:
                    if self.stop_requested():  # between passes: the last pass's positions are committed
                        return self.service_stop(StopCause.SERVICE_STOPPED)
                    moved = self.run_once()
                except Unavailable as err:
                    outage.failed(err)
                    continue
                outage.ended()
                if moved == 0:
                    self._idle(interval)
            return None
        except Exception as err:
            # Dying: the replicas it served say why (until a gateway serves them again).
            served = self.served
            self.record_states(served, {flow: f"gateway {self.id} stopped on an error: {err}" for flow in served})
            raise
        finally:
            sampler.end(timeout=5.0)  # a sample under way is only an observation
            self._sampler = None
            self._running = False
            self._give_up_heartbeat()
