"""A gateway's Prometheus metrics (``gateway run ... -metricsport N``). The names are part of
the interface (docs/operations.md, "Lag, metrics and alerts"):

- ``streamrep_replica_lag_messages{source,replica}``: messages the source holds that the replica lacks;
- ``streamrep_replica_lag_bytes{source,replica}``: their value bytes;
- ``streamrep_replica_lag_seconds{source,replica}``: how long the oldest of them has waited;
- ``streamrep_replica_lag_sample_timestamp_seconds{source,replica}``: when these three were measured
  (at most every ``lag.SAMPLE_SECONDS``, for every flow into the gateway's cluster);
- ``streamrep_gateway_replicated_messages_total{cluster,gateway}``: source messages this gateway moved;
- ``streamrep_gateway_passes_total{cluster,gateway}``: its passes (Spark: micro-batches);
- ``streamrep_gateway_last_pass_timestamp_seconds{cluster,gateway}``: when its last pass ended.

Each gateway has its own registry, so a test or a process running several gateways never
mixes their series, and Python's default process metrics are not exported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from streamrep.errors import InvalidArgument, Unavailable
from streamrep.replication.samples import LagSample

FLOW_LABELS = ("source", "replica")
GATEWAY_LABELS = ("cluster", "gateway")


class GatewayMetrics:
    """The metrics of one gateway, and the HTTP endpoint that serves them.

    :param cluster: the gateway's cluster.
    :param gateway_id: the gateway's id.
    """

    def __init__(self, cluster: str, gateway_id: str):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.lag_messages = Gauge(
            "streamrep_replica_lag_messages",
            "Messages the source holds that the replica has not applied",
            FLOW_LABELS,
            registry=r,
        )
        self.lag_bytes = Gauge(
            "streamrep_replica_lag_bytes",
            "Value bytes of the messages the replica has not applied",
            FLOW_LABELS,
            registry=r,
        )
        self.lag_seconds = Gauge(
            "streamrep_replica_lag_seconds",
            "Seconds the oldest message the replica has not applied has waited",
            FLOW_LABELS,
            registry=r,
        )
        self.sampled = Gauge(
            "streamrep_replica_lag_sample_timestamp_seconds",
            "When the replica's lag was last measured (seconds since the epoch)",
            FLOW_LABELS,
            registry=r,
        )
        labels = (cluster, gateway_id)
        self.replicated = Counter(
            "streamrep_gateway_replicated_messages",
            "Source messages this gateway replicated",
            GATEWAY_LABELS,
            registry=r,
        ).labels(*labels)
        self.passes = Counter(
            "streamrep_gateway_passes", "Passes (Spark: micro-batches) this gateway ran", GATEWAY_LABELS, registry=r
        ).labels(*labels)
        self.last_pass = Gauge(
            "streamrep_gateway_last_pass_timestamp_seconds",
            "When this gateway's last pass ended (seconds since the epoch)",
            GATEWAY_LABELS,
            registry=r,
        ).labels(*labels)
        self._flows: set[tuple[str, str]] = set()
        self.server: WSGIServer | None = None

    def passed(self, moved: int, at: float | None = None) -> None:
        """A pass ended having moved ``moved`` source messages."""
        self.passes.inc()
        if moved:
            self.replicated.inc(moved)
        self.last_pass.set(time.time() if at is None else at)

    def lag(self, samples: Mapping[tuple[str, str], LagSample], present: set[tuple[str, str]]) -> None:
        """Set the lag of the flows sampled (``(source, replica)`` -> ``lag.measure`` sample);
        drop the series of flows no longer in ``present`` (removed replicas)."""
        for flow, sample in samples.items():
            self.lag_messages.labels(*flow).set(sample.messages)
            self.lag_bytes.labels(*flow).set(sample.bytes)
            self.lag_seconds.labels(*flow).set(sample.ms / 1000)
            self.sampled.labels(*flow).set(sample.t / 1000)
        for flow in self._flows - present:
            for gauge in (self.lag_messages, self.lag_bytes, self.lag_seconds, self.sampled):
                try:
                    gauge.remove(*flow)
                except KeyError:
                    pass
        self._flows = (self._flows & present) | set(samples)

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Serve ``/metrics`` over HTTP on ``port`` (in a daemon thread); returns the port."""
        if not 0 < port < 65536:
            raise InvalidArgument(f"option -metricsport must be a TCP port from 1 to 65535, not {port}")
        try:
            server, _ = start_http_server(port, addr, registry=self.registry)
        except OSError as err:
            raise Unavailable(f"cannot serve metrics on port {port}: {err.strerror or err}") from None
        self.server = server
        return server.server_port

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
