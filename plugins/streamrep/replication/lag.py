"""Replication lag over time, per-replica alert thresholds, and the alert check: one place for
these rules. The gateways record (``LagRecorder``), ``stream replica lag``, the page and the
metrics read (``lag_history``), ``stream replica alert`` sets thresholds (``set_alert``), and
the monitoring DAG checks (``check_alerts``).

What a sample holds, per flow (source stream -> replica): the messages and value bytes the
source holds that the replica has not applied, and how long the oldest of them has waited
(ms), the same figures as ``stream replica list`` (``status.pending``), taken at time ``t``
(ms since the epoch).

Where it is kept: in the catalog of the replica's cluster, where the gateways live and write
(one ``replica-lag`` document per flow, keyed by the two stream UUIDs, so a stream recreated at
the same path starts a new history). A flow gets a sample at most every ``SAMPLE_SECONDS``
whichever gateway takes it (the document's newest sample decides, so several gateways of a
cluster do not multiply the writes), and keeps the newest ``HISTORY_SAMPLES``: one hour at
10 s. A sample costs one catalog write; on Kafka a catalog write is a transaction (about
15-30 ms) into a compacted topic, so it is done once per flow per ``SAMPLE_SECONDS``, never per
batch, and the document is a compact list of ``[t, messages, bytes, ms]`` rows (about 11 KB
when full).

Alert thresholds (``replica-alert`` documents, same place and key): the largest lag in ms
and/or in messages a replica may have before the monitoring DAG fails. Setting them needs
adminperm on the source, as every ``stream replica`` change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import AlertRaised, InvalidArgument, StreamrepError
from streamrep.model.paths import StreamPath
from streamrep.model.replication import require_link
from streamrep.replication.flows import Flow, flows_into
from streamrep.replication.pending import pending
from streamrep.replication.samples import FIELDS as FIELDS  # re-exported: the stored row
from streamrep.replication.samples import NO_THRESHOLDS as NO_THRESHOLDS
from streamrep.replication.samples import AlertCheck, AlertSetting, LagHistory, LagSample, Thresholds
from streamrep.replication.service import gateway_outage
from streamrep.store.base import CatalogDoc, Store

if TYPE_CHECKING:
    from streamrep.replication.metrics import GatewayMetrics

log = logging.getLogger(__name__)

LAG_KIND = "replica-lag"
ALERT_KIND = "replica-alert"
SAMPLE_SECONDS = 10.0  # at most one sample per flow this often
HISTORY_SAMPLES = 360  # kept per flow: the newest ones (one hour at SAMPLE_SECONDS)
# Sampling takes at most this share of a gateway's time: measuring reads what is pending (up to
# status.PRECISE_PENDING_MAX messages per partition), which on Kafka with many flows is not free.
MAX_SAMPLING_SHARE = 0.1
THRESHOLDS = ("maxLagMillis", "maxLagMessages")


def flow_key(source_uuid: str, replica_uuid: str) -> str:
    return f"{source_uuid}/{replica_uuid}"


# -- measuring ------------------------------------------------------------------------------
def lag_millis(oldest_pending_ts: int | None, now_ms: int) -> int:
    """How long the oldest unreplicated message has waited (0 with nothing pending)."""
    return 0 if oldest_pending_ts is None else max(0, now_ms - oldest_pending_ts)


def measure(admin: StreamAdmin, source: str, replica: str, now_ms: int | None = None) -> LagSample:
    """The lag of ``replica`` behind ``source`` now."""
    info = pending(admin, source, replica)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return LagSample(now_ms, info.messages, info.bytes, lag_millis(info.oldest, now_ms))


# -- history ----------------------------------------------------------------------------------
class _NotDue(Exception):
    """Another gateway sampled the flow less than ``every`` seconds ago: nothing to write."""


def due(history: LagHistory, now_ms: int, every: float = SAMPLE_SECONDS) -> bool:
    """Whether a flow with ``history`` takes a sample at ``now_ms``."""
    newest = history.newest
    return newest is None or now_ms - newest >= every * 1000


def appended(
    doc: Mapping[str, Any] | None,
    flow: Flow,
    sample: LagSample,
    every: float = SAMPLE_SECONDS,
    keep: int = HISTORY_SAMPLES,
) -> dict[str, Any]:
    """``doc`` with ``sample`` added and only the newest ``keep`` samples kept; raises
    ``_NotDue`` when its newest sample is younger than ``every`` seconds (pure: a catalog
    change may run more than once)."""
    history = LagHistory.from_doc(doc)
    if not due(history, sample.t, every):
        raise _NotDue()
    return LagHistory(str(flow.source), str(flow.replica), every, (*history.samples, sample)[-keep:]).to_doc()


def record(
    store: Store, flow: Flow, sample: LagSample, every: float = SAMPLE_SECONDS, keep: int = HISTORY_SAMPLES
) -> bool:
    """Add ``sample`` to ``flow``'s history in the replica's cluster (``store``), unless the flow
    was sampled less than ``every`` seconds before it. Returns whether it was written."""
    try:
        store.catalog_update(
            LAG_KIND,
            flow_key(flow.source_uuid, flow.replica_uuid),
            lambda doc: appended(doc, flow, sample, every, keep),
        )
    except _NotDue:
        return False
    return True


def lag_history(admin: StreamAdmin, source: str, replica: str) -> list[LagSample]:
    """``stream replica lag``: the recorded samples of ``replica``'s lag behind ``source``,
    oldest first."""
    src, dst = admin.path(source), admin.path(replica)
    src_entry = admin.entry(src)
    require_link(src_entry.replicas, dst, src, "replica")
    doc = admin.store(dst).catalog_get(LAG_KIND, flow_key(src_entry.uuid, admin.entry(dst).uuid))
    return samples_of(doc)


def samples_of(doc: Mapping[str, Any] | None) -> list[LagSample]:
    """The samples of a stored ``replica-lag`` document, oldest first."""
    return list(LagHistory.from_doc(doc).samples)


# -- what a gateway does ---------------------------------------------------------------------
class LagRecorder:
    """A gateway's lag sampling (and its metrics, when it serves them): after each pass, at most
    every ``every`` seconds, it measures every agreed flow into its cluster (paused ones too:
    their lag grows) and records the samples that are due. A failure to sample is logged, never
    raised: lag is an observation and must not stop replication.

    :param admin: the gateway's admin.
    :param cluster: the gateway's (destination) cluster.
    :param every: seconds between two samples.
    """

    def __init__(self, admin: StreamAdmin, cluster: str, every: float = SAMPLE_SECONDS):
        self.admin = admin
        self.cluster = cluster
        self.every = every
        self.metrics: GatewayMetrics | None = None
        self._next = float("-inf")  # monotonic time of the next sample

    def export(self, gateway_id: str, port: int) -> GatewayMetrics:
        """Serve this gateway's Prometheus metrics on ``port`` from now on (``metrics.py``)."""
        from streamrep.replication.metrics import GatewayMetrics  # prometheus_client only when asked

        metrics = GatewayMetrics(self.cluster, gateway_id)
        metrics.serve(port)
        self.metrics = metrics
        self._next = float("-inf")  # the lag series appear at the first pass, not SAMPLE_SECONDS later
        return metrics

    def after_pass(self, moved: int) -> None:
        """One pass of the gateway ended, having moved ``moved`` messages."""
        self.passed(moved)
        self.sample()

    def passed(self, moved: int) -> None:
        if self.metrics is not None:
            self.metrics.passed(moved)

    def sample(self, force: bool = False, final: bool = False) -> dict[Flow, LagSample]:
        """Measure every flow into the cluster and record the samples that are due, if this
        gateway's sampling is due (``force``: now); returns the samples taken.

        :param final: the gateway's last sample as it ends (a ``-once`` drain, a stop): taken and
            recorded however recent the last one is, so the history ends with what the gateway
            left, not with what it found (a drain shorter than ``every`` recorded only the lag it
            started with, and the chart showed it until another gateway ran).
        """
        now = time.monotonic()
        if now < self._next and not (force or final):
            return {}
        self._next = now + self.every
        try:
            flows, _ = flows_into(self.admin, self.cluster)
        except StreamrepError as err:
            log.warning("lag of the replicas on %s not sampled: %s", self.cluster, err)
            return {}
        try:
            return self._sample(flows, 0.0 if final else self.every)
        finally:
            self._next = now + max(self.every, (time.monotonic() - now) / MAX_SAMPLING_SHARE)

    def _sample(self, flows: list[Flow], every: float) -> dict[Flow, LagSample]:
        store = self.admin.clusters.store(self.cluster)
        taken: dict[Flow, LagSample] = {}
        for flow in flows:
            try:
                key = flow_key(flow.source_uuid, flow.replica_uuid)
                history = LagHistory.from_doc(store.catalog_get(LAG_KIND, key))
                fresh = not due(history, int(time.time() * 1000), every)
                if fresh and self.metrics is None:
                    continue  # another gateway sampled it just now, and nobody scrapes this one
                sample = measure(self.admin, str(flow.source), str(flow.replica))
                if not fresh:
                    record(store, flow, sample, every)
                taken[flow] = sample
            except StreamrepError as err:
                log.warning("lag of %s -> %s not sampled: %s", flow.source, flow.replica, err)
        if self.metrics is not None:
            self.metrics.lag(
                {(str(f.source), str(f.replica)): s for f, s in taken.items()},
                {(str(f.source), str(f.replica)) for f in flows},
            )
        return taken


class LagSampler(threading.Thread):
    """Samples the replicas' lag beside a gateway's passes, not between them (``LagRecorder.sample``:
    every agreed flow, at most every ``SAMPLE_SECONDS``): a sample reads what is pending of every flow
    and writes the history, which took 4.5 s on Kafka under load in the Spark driver and up to 1.5 s
    in the in-process gateway (bench/README.md); between passes it held the next pass back as long
    (a latency stall at p99). Both engines run one (``Gateway.run``, ``spark/jobs.py``).

    :param recorder: the gateway's ``LagRecorder``.
    :param gateway_id: named in the warnings.
    :param check: seconds between two looks at whether a sample is due.
    """

    def __init__(self, recorder: LagRecorder, gateway_id: str, check: float):
        super().__init__(name="streamrep-lag", daemon=True)
        self.recorder = recorder
        self.gateway_id = gateway_id
        self.check = check
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.recorder.sample()  # itself logs what it could not sample
            except Exception as err:  # noqa: BLE001 - lag is an observation: it never stops the gateway
                log.warning("gateway %s: lag not sampled: %s", self.gateway_id, err)
            self.halt.wait(self.check)

    def end(self, timeout: float = 30.0) -> None:
        """Stop sampling and wait (up to ``timeout`` s) for a sample under way."""
        self.halt.set()
        self.join(timeout=timeout)


# -- alert thresholds -----------------------------------------------------------------------
def _link(admin: StreamAdmin, source: str, replica: str) -> tuple[StreamPath, Any, StreamPath, Any]:
    src, dst = admin.path(source), admin.path(replica)
    src_entry = admin.entry(src)
    require_link(src_entry.replicas, dst, src, "replica")
    return src, src_entry, dst, admin.entry(dst)


def set_alert(
    admin: StreamAdmin,
    source: str,
    replica: str,
    max_lag_millis: int | None = None,
    max_lag_messages: int | None = None,
) -> AlertSetting:
    """``stream replica alert``: set the thresholds past which the monitoring DAG fails for
    ``replica``. A threshold not given keeps its value; 0 removes it. Needs adminperm on the
    source. Safe to repeat.

    :param max_lag_millis: the longest the oldest unreplicated message may wait (ms).
    :param max_lag_messages: the most messages the replica may lack.
    :return: the replica's thresholds now.
    """
    given = {"maxLagMillis": max_lag_millis, "maxLagMessages": max_lag_messages}
    if all(v is None for v in given.values()):
        raise InvalidArgument("give -maxlagms and/or -maxlagmsgs (0 removes a threshold)")
    for name, value in given.items():
        if value is not None and value < 0:
            raise InvalidArgument(f"threshold {name} must be 0 (none) or more, not {value}")
    src, src_entry, dst, dst_entry = _link(admin, source, replica)
    admin.require(src_entry, src, "adminperm")

    def change(old: CatalogDoc | None) -> CatalogDoc | None:
        doc = {k: v for k, v in (old or {}).items() if k in THRESHOLDS}
        for name, value in given.items():
            if value == 0:
                doc.pop(name, None)
            elif value is not None:
                doc[name] = int(value)
        if not doc:
            return None
        return {**doc, "source": str(src), "replica": str(dst), "by": admin.identity.user, "at": time.time()}

    doc = admin.store(dst).catalog_update(ALERT_KIND, flow_key(src_entry.uuid, dst_entry.uuid), change)
    return AlertSetting(src, dst, _thresholds(doc))


def thresholds(store: Store, source_uuid: str, replica_uuid: str) -> Thresholds:
    """A replica's thresholds, read from its cluster's catalog (``store``)."""
    return _thresholds(store.catalog_get(ALERT_KIND, flow_key(source_uuid, replica_uuid)))


def _thresholds(doc: Mapping[str, Any] | None) -> Thresholds:
    """The thresholds a stored alert document holds (its fields are ``THRESHOLDS``)."""
    doc = doc or {}
    return Thresholds(doc.get("maxLagMillis"), doc.get("maxLagMessages"))


def breaches(sample: LagSample, limits: Thresholds) -> list[str]:
    """What in ``sample`` passes ``limits``, one phrase each (empty: within them)."""
    found = []
    if limits.max_lag_millis is not None and sample.ms > limits.max_lag_millis:
        found.append(f"lag {sample.ms:,} ms passes its threshold of {limits.max_lag_millis:,} ms")
    if limits.max_lag_messages is not None and sample.messages > limits.max_lag_messages:
        found.append(
            f"{sample.messages:,} messages behind passes its threshold of {limits.max_lag_messages:,} messages"
        )
    return found


# -- the monitor's check ----------------------------------------------------------------------
def check_alerts(admin: StreamAdmin, clusters: Iterable[str]) -> list[AlertCheck]:
    """One check per agreed flow into the replicas on ``clusters``, checked now: ``problems``
    lists the replica's lag past its thresholds, and, for an unpaused flow, that no gateway
    serving it is live (MapR's ErrAllGatewaysUnreachable). A paused replica is not expected to
    move, so only its thresholds apply. A cluster that cannot be read is a problem too."""
    checks = []
    for cluster in clusters:
        try:
            flows, _ = flows_into(admin, cluster)
            store = admin.clusters.store(cluster)
        except StreamrepError as err:
            checks.append(AlertCheck(None, None, cluster, None, (f"cluster {cluster} cannot be checked: {err}",)))
            continue
        outages: dict[str, str | None] = {}
        for flow in flows:
            problems: list[str] = []
            limits: Thresholds | None = None
            sample: LagSample | None = None
            try:
                limits = thresholds(store, flow.source_uuid, flow.replica_uuid)
                sample = measure(admin, str(flow.source), str(flow.replica))
                problems += breaches(sample, limits)
                if not flow.paused:
                    if flow.source.cluster not in outages:
                        outages[flow.source.cluster] = gateway_outage(admin, flow.source.cluster, cluster)
                    if outages[flow.source.cluster]:
                        problems.append(f"no gateway is live: {outages[flow.source.cluster]}")
            except StreamrepError as err:
                problems.append(f"cannot be checked: {err}")
            if sample is None:
                limits = None  # shown only with the lag they are held against
            checks.append(AlertCheck(flow.source, flow.replica, cluster, flow.paused, tuple(problems), limits, sample))
    return checks


def alert_line(checks: Iterable[AlertCheck]) -> str | None:
    """The one-line failure for ``check_alerts`` checks with problems, or None."""
    parts = []
    for check in checks:
        if check.problems:
            who = f"replica {check.replica} (of {check.source})" if check.replica else f"cluster {check.cluster}"
            parts.append(f"{who}: {'; '.join(check.problems)}")
    return " | ".join(parts) or None


def raise_alerts(checks: Iterable[AlertCheck]) -> None:
    """Raise ``AlertRaised`` with ``alert_line`` when any check has a problem."""
    line = alert_line(checks)
    if line:
        raise AlertRaised(line)
