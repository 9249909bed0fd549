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
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streamrep.client.admin import StreamAdmin
from streamrep.errors import RetryNow, StoreFull, StreamrepError, Unavailable
from streamrep.model import network
from streamrep.model.catalog import StreamEntry
from streamrep.model.gateways import GatewayStop, StopCause
from streamrep.model.message import Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState, agreement, stop_key, validate_gateway_name
from streamrep.replication.assignment import (
    HEARTBEAT_EXPIRY_SECONDS,
    HEARTBEAT_INTERVAL_SECONDS,
    eligible,
    shares_seen_by,
)
from streamrep.replication.cursors import CursorSync
from streamrep.replication.flows import Blocked, Flow, flows_into
from streamrep.replication.lag import LagRecorder, LagSampler
from streamrep.replication.service import (
    HEARTBEAT_KIND,
    StopWatch,
    announce,
    beat,
    gateway_outage,
    heartbeats,
    placement,
    share_names,
    stopped_line,
    withdraw,
)
from streamrep.replication.throttle import Pacer, batch_bytes
from streamrep.replication.transfer import (
    HeldCheck,
    SourcePartition,
    SourceRead,
    SourceSpan,
    UnitApply,
    apply_reads,
    by_source_cluster,
    ensure_topics,
    lost_data,
    next_position,
    read_source,
    read_sources,
)

# HEARTBEAT_KIND, heartbeats and gateway_outage are defined with the other service documents in service.py;
# callers keep importing them from here.
__all__ = ["HEARTBEAT_KIND", "Gateway", "default_gateway_id", "heartbeats", "gateway_outage"]
DEFAULT_BATCH = 5000
UNAVAILABLE_RETRY_MAX_SECONDS = 5.0  # a gateway retries a cluster that is down at least this often
# A running gateway's pass keeps moving what arrives in its share for up to this long, then reads its
# assignment again: pauses, removals, new topics and other gateways' shares take effect within it.
PASS_SECONDS = 0.5
STOP_CHECK_SECONDS = 0.1  # an idle gateway waiting for messages sees a stop request within this
log = logging.getLogger(__name__)


def default_gateway_id() -> str:
    return socket.gethostname().split(".")[0] or "gateway"


class Outage:
    """How a running gateway rides out a cluster that is down or restarting: a pass that fails
    with ``Unavailable`` is logged and retried after a wait that doubles up to
    UNAVAILABLE_RETRY_MAX_SECONDS. Nothing of the pass is half-applied (each apply is one
    transaction), so the next pass resumes exactly from the stored positions.

    :param wait: how to wait (``time.sleep``; an Event's ``wait`` to stay stoppable).
    """

    def __init__(self, gateway_id: str, interval: float, wait=time.sleep):
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


@dataclass
class Assignment:
    """This gateway's share: each source partition, with the flows (replicas) it feeds."""

    units: dict[SourcePartition, list[Flow]] = field(default_factory=dict)


@dataclass(frozen=True)
class Progress:
    """Where one source partition stands for this gateway's replicas."""

    source_start: int  # the oldest offset the source still holds
    source_end: int  # the next offset the source will assign
    position: int  # where reading resumes: the lowest stored position among its flows

    @property
    def pending(self) -> int:
        return max(0, self.source_end - self.position)


_Due = dict[SourcePartition, tuple[int, tuple[int, int]]]  # partition -> (its position, the source's bounds)


@dataclass
class _PassState:
    """What one pass of ``Gateway.run_once`` keeps as it goes: the flows it still serves by source
    partition (its assignment's, failing ones taken out), the errors so far by flow, each replica's
    marks (read once), each served partition's next offset to move, and the messages moved."""

    units: dict[SourcePartition, list[Flow]]
    errors: dict[Flow, str]
    marks: dict[str, dict[str, int]]
    positions: dict[SourcePartition, int] = field(default_factory=dict)
    moved: int = 0

    def failed(self, unit: SourcePartition, err: StreamrepError, flows: Iterable[Flow] | None = None) -> bool:
        """Record ``err`` for ``flows`` (all of the unit's by default) and leave them out of the rest
        of the pass. Returns whether the unit still has flows to serve."""
        if isinstance(err, StoreFull):
            raise err  # the whole destination is full, not this partition: the gateway stops, saying so
        failing = set(self.units[unit] if flows is None else flows)
        self.errors.update((flow, f"{unit.topic}/{unit.partition}: {err}") for flow in failing)
        # A new list: the old one is shared by the topic's other partitions.
        self.units[unit] = [f for f in self.units[unit] if f not in failing]
        if self.units[unit]:
            return True
        self.positions.pop(unit, None)
        return False


class Gateway:
    """One gateway of ``cluster``.

    :param admin: the admin API (cluster registry and identity).
    :param cluster: the destination cluster this gateway serves.
    :param gateway_id: its name, as listed by ``cluster gateway set`` (default: host name).
    """

    def __init__(
        self, admin: StreamAdmin, cluster: str, gateway_id: str | None = None, expiry: float = HEARTBEAT_EXPIRY_SECONDS
    ):
        admin.require_gateway(cluster)  # its cluster admin, or the cluster's authenticated gateway principal
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
        self.unreadable: list[Blocked] = []  # upstreams whose stream could not be read, last pass
        # Set (by a signal handler, another thread) to end ``run`` after the batch in progress.
        self.stopping = threading.Event()
        self.stop_reason = "stopped"
        self._sampler: LagSampler | None = None  # while ``run`` runs: the lag is sampled beside the passes
        self.pacer = Pacer()  # -maxbytespersec and -throttle (replication/throttle.py)
        self._beating = False  # within run_once: a long wait for the limit keeps the heartbeat
        self._prepared: set[tuple[SourcePartition, str]] = set()  # (unit, replica UUID) made ready (_prepare)
        self._running = False  # within ``run``, where passes prepare ahead and take what arrives meanwhile
        self.check_seconds = 0.0  # what the last check of the replicas' partitions took (``_check_held``)

    # -- liveness ------------------------------------------------------------------
    def announce(self, where: dict) -> None:
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

    def drain(self) -> int:
        """``gateway run -once``: replicate everything available now (every partition the source
        clusters let this gateway pull) until a pass reads nothing, then sync the consumer groups'
        cursors once, so a short drain leaves them translated on the replicas. Returns the
        messages applied. Unavailable (after the drain) if an upstream could not be read."""
        before = self.applied
        while self.run_once(whole=True) and not self.stopping.is_set():
            pass
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

    # -- work ----------------------------------------------------------------------
    def active_flows(self) -> dict[str, list[Flow]]:
        """The agreed, unpaused flows into this cluster, by source stream UUID. A flow that asks
        for network encryption while this gateway would reach its source or this cluster in
        plaintext is left out and its replica put in error, with the reason, until it can be
        given (the clusters' settings are read now: they may have changed since ``replica add``)."""
        flows, blocked = flows_into(self.admin, self.cluster)
        self.unreadable = [b for b in blocked if b.unreadable]
        by_source: dict[str, list[Flow]] = defaultdict(list)
        for flow in flows:
            if flow.paused:
                continue
            refused = self._encryption_refusal(flow)
            if refused is not None:
                self._record_state(flow, ReplicaState.UNEXPECTED, refused)
                continue
            if flow.conflict is not None:  # recorded now: its other topics may not be in this share
                self._record_state(flow, ReplicaState.UNEXPECTED, flow.conflict)
            by_source[flow.source_uuid].append(flow)
        return dict(by_source)

    def _encryption_refusal(self, flow: Flow) -> str | None:
        if not flow.networkencryption:
            return None
        clusters = self.admin.clusters
        return network.encryption_refusal(clusters.get(flow.source.cluster), clusters.get(self.cluster))

    def assignment(self, whole: bool = False) -> Assignment:
        """The source partitions this gateway replicates now, each with its flows.

        :param whole: every partition the source clusters let this gateway pull, not just its
            round-robin share: a drain (``gateway run -once``) must not leave the share of a
            gateway that died a moment ago; overlapping a live one is safe (transactional apply).
        """
        by_source = self.active_flows()
        now = time.time()
        beats = self.heartbeats()
        units = self._units(by_source)
        mine, holders = self._shares(units, beats, now, whole)
        result = Assignment({u: f for u, f in units.items() if u in mine})
        self.lost = self._check_held(result.units)
        # Each holder of a replica's partitions takes an equal part of its byte-rate limit (throttle.py);
        # a drain (whole) may apply partitions it does not hold, so it counts itself a holder.
        self.pacer.share({r: 1 / len(h | {self.id}) for r, h in holders.items()})
        names = share_names(mine)
        if names != self._share:  # written on a change only: ``gateway list`` shows who holds what
            beat(self.store, self.id, share=names)
            self._share = names
        # Every pass of both engines starts here, idle or not: the cursors of this share follow.
        self.cursor_sync.maybe_sync(self.admin, self.store, result.units)
        return result

    def _units(self, by_source: Mapping[str, list[Flow]]) -> dict[SourcePartition, list[Flow]]:
        """Every partition of the source streams, with the flows that carry its topic (one list per topic,
        shared by its partitions), by source stream UUID as ``active_flows`` gives them."""
        units: dict[SourcePartition, list[Flow]] = {}
        for source_uuid, all_flows in by_source.items():
            source = all_flows[0].source
            topics, ready = self._ready_flows(source_uuid, all_flows)
            for topic, count in topics.items():
                carrying = [flow for flow in ready if flow.carries(topic)]
                if not carrying:
                    continue
                for partition in range(count):
                    units[SourcePartition(source_uuid, topic, partition, source)] = carrying
        return units

    def _ready_flows(self, source_uuid: str, flows: Sequence[Flow]) -> tuple[dict[str, int], list[Flow]]:
        """The source stream's topics (partitions by name, as the last replica made ready found them) and
        the flows whose replica has them now (``transfer.ensure_topics``); a flow whose replica cannot be
        made ready is left out of this pass (``_drop``)."""
        topics: dict[str, int] = {}
        ready = []
        for flow in flows:
            try:
                topics = ensure_topics(
                    self.admin.clusters.store(flow.source.cluster),
                    source_uuid,
                    self.store,
                    flow.replica_uuid,
                    exclude=flow.stopped_topics,
                )
            except Unavailable:
                raise
            except StreamrepError as err:
                self._drop(flow, err)
                continue
            ready.append(flow)
        return topics, ready

    def _shares(
        self, units: Mapping[SourcePartition, list[Flow]], beats: Mapping[str, float], now: float, whole: bool
    ) -> tuple[set[SourcePartition], dict[str, set[str]]]:
        """This gateway's share of ``units`` (all that its source clusters let it pull, with ``whole``),
        dealt per source cluster among the live gateways it lists for this cluster, and the gateways
        holding each replica's partitions, by replica UUID. Sets ``unlisted_by``."""
        mine: set[SourcePartition] = set()
        self.unlisted_by = set()
        holders: dict[str, set[str]] = defaultdict(set)  # replica UUID -> the gateways holding its partitions
        for source_cluster, cluster_units in by_source_cluster(units).items():
            try:
                listed = self.admin.gateways(source_cluster).get(self.cluster)
            except Unavailable:
                raise
            except StreamrepError as err:  # that cluster was removed meanwhile
                for flow in {f for unit in cluster_units for f in units[unit]}:
                    self._drop(flow, err)
                continue
            if listed is not None and self.id not in listed:
                self.unlisted_by.add(source_cluster)
                continue  # that source cluster does not send to this gateway
            dealt = shares_seen_by(
                self.id, cluster_units, eligible(beats, listed), now, self.expiry, SourcePartition.lane_group
            )
            mine.update(cluster_units if whole else dealt[self.id])
            for holder, held in dealt.items():
                for unit in held:
                    for flow in units[unit]:
                        holders[flow.replica_uuid].add(holder)
        return mine, holders

    def _drop(self, flow: Flow, err: StreamrepError) -> None:
        """Leave ``flow`` out of this pass: its link changed or went away while the pass was being
        planned (a failover moving the upstream, a replica or cluster removed), or its replica
        cannot be set up. Only a link that still holds is put in error; the gateway serves the rest."""
        if self.still_agreed(flow):
            log.warning("gateway %s: %s -> %s left out of this pass: %s", self.id, flow.source, flow.replica, err)
            self._record_state(flow, ReplicaState.UNEXPECTED, str(err))
        else:
            self._changed(flow, err)

    def _changed(self, flow: Flow, err: object) -> None:
        log.info("gateway %s: the link %s -> %s changed during the pass: %s", self.id, flow.source, flow.replica, err)

    def still_agreed(self, flow: Flow) -> bool:
        """Whether ``flow``'s link still holds, as read now: both streams still name each other, by
        the same UUIDs, and it is not paused. A read that fails counts as no."""
        try:
            source_entry, replica_entry = self.admin.entry(flow.source), self.admin.entry(flow.replica)
        except StreamrepError:
            return False
        found = agreement(flow.source, source_entry, flow.replica, replica_entry)
        return (
            found.agreed
            and found.link is not None
            and not found.link.paused
            and (source_entry.uuid, replica_entry.uuid) == (flow.source_uuid, flow.replica_uuid)
        )

    def _check_held(self, units: dict[SourcePartition, list[Flow]]) -> dict[Flow, str]:
        """Leave out of ``units`` every replica partition that no longer holds what was applied to it,
        or holds planted messages (``transfer.lost_data``), so nothing is applied over the hole, and
        put its link in UNEXPECTED with the error. Returns the errors, by flow."""
        pairs = [(unit, flow) for unit, flows in sorted(units.items()) for flow in flows]
        entries: dict[StreamPath, StreamEntry] = {}

        def entry(path: StreamPath) -> StreamEntry:
            if path not in entries:
                entries[path] = self.admin.entry(path)
            return entries[path]

        began = time.perf_counter()
        try:
            lines = lost_data(
                self.store,
                [HeldCheck(unit, flow.replica, flow.replica_uuid) for unit, flow in pairs],
                lambda unit: self.admin.clusters.store(unit.source.cluster),
                entry,
            )
        except Unavailable:
            raise
        except StreamrepError as err:  # a replica removed meanwhile: the next pass sees it
            log.warning("gateway %s: cannot check what the replicas hold: %s", self.id, err)
            return {}
        self.check_seconds = time.perf_counter() - began
        found: dict[Flow, list[str]] = defaultdict(list)
        for (unit, flow), line in zip(pairs, lines, strict=True):
            if line is not None:
                found[flow].append(line)
                units[unit] = [f for f in units[unit] if f != flow]  # a list shared by a topic's partitions
        for unit in [u for u, flows in units.items() if not flows]:
            del units[unit]
        lost = {
            flow: lines[0] + (f" (and {len(lines) - 1} more partitions)" if len(lines) > 1 else "")
            for flow, lines in found.items()
        }
        for flow, error in lost.items():
            log.warning("gateway %s: %s", self.id, error)
            self._record_state(flow, ReplicaState.UNEXPECTED, "; ".join(e for e in (flow.conflict, error) if e))
        return lost

    def read_marks(self, units: dict[SourcePartition, list[Flow]]) -> dict[str, dict[str, int]]:
        """Each replica's marks, read once for a pass, by replica UUID. A replica whose marks cannot
        be read (removed meanwhile) leaves the pass: its flows are taken out of ``units``."""
        marks: dict[str, dict[str, int]] = {}
        unreadable: dict[str, StreamrepError] = {}
        for flows in units.values():
            for flow in flows:
                if flow.replica_uuid in marks or flow.replica_uuid in unreadable:
                    continue
                try:
                    marks[flow.replica_uuid] = self.store.marks(flow.replica_uuid)
                except Unavailable:
                    raise
                except StreamrepError as err:
                    unreadable[flow.replica_uuid] = err
        if unreadable:
            dropped = {f for flows in units.values() for f in flows if f.replica_uuid in unreadable}
            for unit in list(units):
                units[unit] = [f for f in units[unit] if f not in dropped]
                if not units[unit]:
                    del units[unit]
            for flow in dropped:
                self._drop(flow, unreadable[flow.replica_uuid])
        return marks

    def progress(
        self, units: Mapping[SourcePartition, Sequence[Flow]], marks: dict[str, dict[str, int]] | None = None
    ) -> dict[SourcePartition, Progress]:
        """For each source partition: the source's bounds and where replication into its
        flows resumes (the stored positions are the truth). Reads each replica's marks once.

        :param marks: replicas' marks already read, by replica UUID; those read now are added.
        :raises StreamrepError: the first partition whose bounds or marks cannot be read.
        """
        result: dict[SourcePartition, Progress] = {}
        for unit, found in self._progress_each(units, marks).items():
            if isinstance(found, StreamrepError):
                raise found
            result[unit] = found
        return result

    def _progress_each(
        self, units: Mapping[SourcePartition, Sequence[Flow]], marks: dict[str, dict[str, int]] | None = None
    ) -> dict[SourcePartition, Progress | StreamrepError]:
        """``progress``, with the error of each partition that cannot be read in its place; the source's
        bounds asked once per source cluster (``Store.offsets_many``)."""
        marks = {} if marks is None else marks
        bounds: dict[SourcePartition, tuple[int, int] | StreamrepError] = {}
        for cluster, mine in by_source_cluster(units).items():
            try:
                asked = self.admin.clusters.store(cluster).offsets_many(
                    [(unit.source_uuid, unit.topic, unit.partition) for unit in mine]
                )
            except StreamrepError as err:
                asked = [err] * len(mine)
            bounds.update(zip(mine, asked, strict=True))
        result: dict[SourcePartition, Progress | StreamrepError] = {}
        for unit, flows in units.items():
            found = bounds[unit]
            if isinstance(found, StreamrepError):
                result[unit] = found
                continue
            source_start, source_end = found
            try:
                for flow in flows:
                    if flow.replica_uuid not in marks:
                        marks[flow.replica_uuid] = self.store.marks(flow.replica_uuid)
                position = min(
                    (
                        next_position(self.store, f.replica_uuid, unit, source_start, marks[f.replica_uuid])
                        for f in flows
                    ),
                    default=source_end,
                )
            except StreamrepError as err:
                result[unit] = err
                continue
            result[unit] = Progress(source_start, source_end, position)
        return result

    @staticmethod
    def _apply_due(
        unit: SourcePartition, flows: Sequence[Flow], progress: Progress, marks: Mapping[str, Mapping[str, int]]
    ) -> bool:
        """Whether ``unit`` needs an apply even with nothing new: a flow's stored position below the
        oldest message the source holds (the apply records what retention removed, ``plan_apply``),
        or a flow a failover stopped (the apply reports it, ``FlowStopped``)."""
        if progress.position < progress.source_end:
            return True
        stop = stop_key(unit.source_uuid, unit.topic, unit.partition)
        for flow in flows:
            stored = marks[flow.replica_uuid].get(unit.key)
            if stop in marks[flow.replica_uuid] or (stored is not None and stored < progress.source_start):
                return True
        return False

    def read(
        self, unit: SourcePartition, flows: Sequence[Flow], max_messages: int = DEFAULT_BATCH, end: int | None = None
    ) -> SourceRead:
        """The next messages of one source partition for its flows, from the lowest stored
        position, with the span they cover and the oldest offset the source holds (for ``apply``).

        :param end: read nothing at or beyond this source offset.
        """
        [progress] = self.progress({unit: flows}).values()
        source_store = self.admin.clusters.store(unit.source.cluster)
        return read_source(source_store, unit, progress.position, max_messages, end)

    def apply(
        self,
        unit: SourcePartition,
        flows: Iterable[Flow],
        batch: Sequence[Message],
        source_start: int,
        span: tuple[int, int] | None = None,
    ) -> tuple[dict[Flow, int], dict[Flow, str]]:
        """Apply ``batch`` (the messages of ``unit`` in ``span``, as ``transfer.apply_to_replicas``:
        read once, written to all in one transaction where the store allows) to each flow's
        replica, exactly once. A flow that fails is reported and the others still get the batch.
        Returns the messages written and the errors, by flow."""
        written, errors = self._apply(unit, flows, batch, source_start, span)
        return written, {flow: f"{unit.topic}/{unit.partition}: {err}" for flow, err in errors.items()}

    def apply_reads(
        self, reads: Mapping[SourcePartition, tuple[Iterable[Flow], Sequence[Message], int, tuple[int, int] | None]]
    ) -> dict[SourcePartition, tuple[dict[Flow, int], dict[Flow, str]]]:
        """``apply`` for the reads of several source partitions at once (a Spark task's round), each
        read as ``apply``'s arguments: on Kafka one transaction per apply lane."""
        return {
            unit: (written, {flow: f"{unit.topic}/{unit.partition}: {err}" for flow, err in errors.items()})
            for unit, (written, errors) in self._apply_reads(reads).items()
        }

    def _apply(
        self,
        unit: SourcePartition,
        flows: Iterable[Flow],
        batch: Sequence[Message],
        source_start: int,
        span: tuple[int, int] | None,
        known_marks: dict[str, dict[str, int]] | None = None,
    ) -> tuple[dict[Flow, int], dict[Flow, StreamrepError]]:
        return self._apply_reads({unit: (flows, batch, source_start, span)}, known_marks)[unit]

    def _apply_reads(
        self,
        reads: Mapping[SourcePartition, tuple[Iterable[Flow], Sequence[Message], int, tuple[int, int] | None]],
        known_marks: dict[str, dict[str, int]] | None = None,
    ) -> dict[SourcePartition, tuple[dict[Flow, int], dict[Flow, StreamrepError]]]:
        """Apply each source partition's read (its flows, batch, oldest offset held and span, as ``_apply``)
        to its flows' replicas, all at once (``transfer.apply_reads``), paced by the replicas' byte-rate
        limits before and their ``-throttle`` after."""
        items: list[tuple[SourcePartition, dict[str, Flow], UnitApply]] = []
        throttled, nbytes = False, 0
        for unit, (flows, batch, source_start, span) in reads.items():
            # Never a topic the fan-in rule stops for a replica, whatever the caller planned with.
            by_replica = {flow.replica_uuid: flow for flow in flows if flow.carries(unit.topic)}
            codecs = {uuid: network.kafka_codec(flow.networkcompression) for uuid, flow in by_replica.items()}
            limits = [(r, f.maxbytespersec) for r, f in by_replica.items() if f.maxbytespersec]
            paced = any(f.throttle for f in by_replica.values())
            size = batch_bytes(batch) if batch and (limits or paced) else 0
            if limits and size:
                self._pause(self.pacer.before(limits, size))  # before the write: the limit bounds what is written
            throttled, nbytes = throttled or paced, nbytes + (size if paced else 0)
            items.append((unit, by_replica, UnitApply(unit, list(by_replica), batch, source_start, span, codecs)))
        began = time.monotonic()
        results = apply_reads(self.store, [item for _, _, item in items], known_marks)
        self.applied += sum(sum(written.values()) for written, _ in results)
        if throttled and nbytes:
            self._pause(self.pacer.after(time.monotonic() - began, nbytes, throttled))
        return {
            unit: ({by_replica[r]: n for r, n in written.items()}, {by_replica[r]: e for r, e in errors.items()})
            for (unit, by_replica, _), (written, errors) in zip(items, results, strict=True)
        }

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds`` (for a limit or a load), heartbeating meanwhile within ``run_once``:
        a gateway waiting for its limit still holds its share."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, HEARTBEAT_INTERVAL_SECONDS / 2))
            if self._beating:
                self.keep_alive()

    def run_once(self, max_messages: int = DEFAULT_BATCH, whole: bool = False) -> int:
        """Heartbeat if due, then replicate everything available now from this gateway's share
        (all of it with ``whole``). Returns how many source messages were read."""
        self.keep_alive()
        assignment = self.assignment(whole)
        self.served = {f for flows in assignment.units.values() for f in flows}
        self._beating = True
        try:
            return self._run_pass(assignment, max_messages)
        finally:
            self._beating = False

    def _run_pass(self, assignment: Assignment, max_messages: int) -> int:
        """One pass over ``assignment``: the partitions due (``_plan_pass``), then rounds of a batch of each
        (``_round``), and, within ``run``, what arrives meanwhile (``_arrivals``). Returns the messages read."""
        errors: dict[Flow, str] = dict(self.lost)
        marks = self.read_marks(assignment.units)  # each replica's marks, read once per pass
        this_pass = _PassState(assignment.units, errors, marks)
        # What is there now, not what producers add meanwhile: a pass must end, so that the gateway
        # heartbeats and sees pauses, removals and new topics.
        due = self._plan_pass(this_pass)
        # A running gateway takes what arrived meanwhile for a while before it reads its assignment again.
        until = time.monotonic() + (PASS_SECONDS if self._running else 0.0)
        while due and not self.stopping.is_set():  # a signal: the batches in progress were the last
            due, stalled = self._round(this_pass, due, max_messages)
            due.update(self._arrivals(this_pass.positions, due, stalled, until))
            self.keep_alive()
        self.record_states(self._still_served(assignment, errors), errors)
        self.errors = errors
        if self._sampler is None:
            self.lag.after_pass(this_pass.moved)
        else:
            self.lag.passed(this_pass.moved)  # the pass counted; ``_sampler`` samples the lag
        return this_pass.moved

    def _plan_pass(self, this_pass: _PassState) -> _Due:
        """The partitions of the share with something to apply, each with its position and the source's
        bounds now; a running gateway makes each partition's read and apply ready on the way
        (``_prepare``). Each partition's next batch starts where its last one ended: each apply moved
        every flow's stored position to at least there, and it checks the positions in its own
        transaction."""
        due: _Due = {}
        for unit, progress in self._progress_each(dict(sorted(this_pass.units.items())), this_pass.marks).items():
            flows = this_pass.units[unit]
            try:
                if isinstance(progress, StreamrepError):
                    raise progress
                if self._running:  # a one-off drain makes nothing ready ahead
                    self._prepare(unit, flows, progress.position)
                this_pass.positions[unit] = progress.position
                if self._apply_due(unit, flows, progress, this_pass.marks):  # else nothing new: no read, no apply
                    due[unit] = (progress.position, (progress.source_start, progress.source_end))
            except StreamrepError as err:
                this_pass.failed(unit, err)
        # Only what the share holds now: the set stays as small as the share.
        self._prepared = {(unit, replica) for unit, replica in self._prepared if unit in this_pass.units}
        return due

    def _round(self, this_pass: _PassState, due: _Due, max_messages: int) -> tuple[_Due, set[SourcePartition]]:
        """One round of a pass: the next batch of every ``due`` partition, read together and applied
        together (a store may overlap their transactions). Returns the partitions still due (short of
        the bounds the pass read) and those stalled (read, but not moved on: a read that found
        nothing), which are done for this pass."""
        reads: dict[SourcePartition, SourceRead] = {}
        for unit, found in self._read_due(due, max_messages).items():
            if isinstance(found, StreamrepError):
                this_pass.failed(unit, found)
            else:
                reads[unit] = found
        applied = self._apply_reads(
            {u: (this_pass.units[u], r.messages, r.source_start, r.span) for u, r in reads.items()}, this_pass.marks
        )
        still: _Due = {}
        stalled: set[SourcePartition] = set()
        for unit, read in reads.items():
            _, unit_errors = applied[unit]
            for flow, flow_error in unit_errors.items():  # the other replicas have the batch and go on
                if not this_pass.failed(unit, flow_error, [flow]):
                    break
            if unit not in this_pass.positions:
                continue
            this_pass.moved += len(read.messages)
            read_from, this_pass.positions[unit] = read.span
            bounds = due[unit][1]
            if this_pass.positions[unit] == read_from:
                stalled.add(unit)
            elif this_pass.positions[unit] < bounds[1]:
                still[unit] = (this_pass.positions[unit], bounds)
        return still, stalled

    def _arrivals(
        self, positions: Mapping[SourcePartition, int], due: _Due, stalled: set[SourcePartition], until: float
    ) -> _Due:
        """Before the monotonic time ``until``: what arrived at the pass's other partitions (neither
        ``due`` nor ``stalled``) since their last batch. With nothing due and nothing arrived, it waits
        for the next message within ``until`` rather than end the pass and pay a new pass's assignment,
        marks and bounds for it."""
        if time.monotonic() >= until:
            return {}
        watched = {u: at for u, at in positions.items() if u not in due and u not in stalled}
        arrived = self._arrived(watched)
        while not due and not arrived and watched and self._await_sources(until):
            arrived = self._arrived(watched)
        return arrived

    def _read_due(
        self, due: Mapping[SourcePartition, tuple[int, tuple[int, int]]], max_messages: int
    ) -> dict[SourcePartition, SourceRead | StreamrepError]:
        """The next batch of each due partition (its position, the source's bounds), read together per
        source cluster (``transfer.read_sources``): a Kafka source fetches them all with one consumer."""
        result: dict[SourcePartition, SourceRead | StreamrepError] = {}
        for cluster, units in by_source_cluster(due).items():
            try:
                source_store = self.admin.clusters.store(cluster)
            except StreamrepError as err:
                result.update((unit, err) for unit in units)
                continue
            spans = [SourceSpan(unit, due[unit][0], max_messages, bounds=due[unit][1]) for unit in units]
            result.update(zip(units, read_sources(source_store, spans), strict=True))
        return result

    def _still_served(self, assignment: Assignment, errors: Mapping[Flow, str]) -> set[Flow]:
        """The flows whose state this pass records: those it served, and those that failed while their
        link still holds (one that changed meanwhile, by a failover or a removal, is not this
        gateway's to report on: its error was the change)."""
        served = {f for flows in assignment.units.values() for f in flows} | set(self.lost)
        failing = {flow for flow in errors if flow not in self.lost}
        changed = {flow for flow in failing if not self.still_agreed(flow)}
        for flow in changed:
            self._changed(flow, errors[flow])
        return (served | failing) - changed

    def _arrived(self, positions: Mapping[SourcePartition, int]) -> _Due:
        """Those of ``positions``' partitions with messages past their position now, each with its
        position and the source's bounds: what a running pass moves next without a new assignment.
        Each source cluster is asked once for all of its partitions; a partition whose bounds cannot
        be read now waits for the next pass."""
        result: _Due = {}
        for cluster, units in by_source_cluster(positions).items():
            try:
                asked = self.admin.clusters.store(cluster).offsets_many(
                    [(unit.source_uuid, unit.topic, unit.partition) for unit in units]
                )
            except StreamrepError:
                continue
            for unit, bounds in zip(units, asked, strict=True):
                if not isinstance(bounds, StreamrepError) and bounds[1] > positions[unit]:
                    result[unit] = (positions[unit], bounds)
        return result

    def _prepare(self, unit: SourcePartition, flows: Iterable[Flow], position: int) -> None:
        """Make ready the read of ``unit`` from ``position`` and the apply into each replica partition
        the first time this gateway serves them, idle or not: on Kafka a consumer's first fetch and a
        transactional writer's fencing take tens of milliseconds each, which the first messages after
        a start or a new share would otherwise wait, one partition after another."""
        fresh = [f for f in flows if (unit, f.replica_uuid) not in self._prepared and f.carries(unit.topic)]
        if not fresh:
            return
        self.admin.clusters.store(unit.source.cluster).prepare_read(
            unit.source_uuid, unit.topic, unit.partition, position
        )
        for flow in fresh:
            codec = network.kafka_codec(flow.networkcompression)
            try:
                self.store.prepare_apply(flow.replica_uuid, unit.topic, unit.partition, codec)
            except Unavailable:
                raise
            except (StreamrepError, RetryNow) as err:  # optional: the apply itself meets it, for this flow only
                log.info(
                    "gateway %s: could not prepare %s %s/%s: %s", self.id, flow.replica, unit.topic, unit.partition, err
                )
                continue
            self._prepared.add((unit, flow.replica_uuid))

    def record_states(self, flows: Iterable[Flow], errors: Mapping[Flow, str]) -> None:
        """Record on each flow's replica link that this gateway serves it: UNEXPECTED with the
        error for the flows in ``errors``, REPLICATING for the others."""
        for flow in flows:
            error = "; ".join(e for e in (flow.conflict, errors.get(flow, self.lost.get(flow))) if e) or None
            self._record_state(flow, ReplicaState.UNEXPECTED if error else ReplicaState.REPLICATING, error)

    def picked_up(self, flows: Iterable[Flow]) -> None:
        """Flows still waiting for a gateway are served now (a gateway that only moves data
        when there is some calls this when it takes its share)."""
        self.record_states([f for f in flows if f.state is ReplicaState.WAITING_FOR_GATEWAY], {})

    def run(
        self, interval: float = 0.2, stop_after: float | None = None, where: dict | None = None
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

    def _idle(self, interval: float) -> None:
        """The wait after a pass that moved nothing: until a message arrives at a source partition of the
        share, at most ``interval`` or ``PASS_SECONDS`` if longer, so that idle passes cost little and
        the first message does not wait out a sleep. Where a source store cannot tell, ``interval``."""
        if self._await_sources(time.monotonic() + max(interval, PASS_SECONDS)) is None:
            self.stopping.wait(interval)

    def _await_sources(self, until: float) -> bool | None:
        """Wait on the source stores of the share (``Store.await_messages``: their consumers' fetches, not
        passes) until a message arrives at a partition they read, or the monotonic time ``until``, seeing
        a stop request within ``STOP_CHECK_SECONDS``: True once one has, False at ``until`` or a stop,
        None at once where a source store cannot tell."""
        try:
            clusters = {flow.source.cluster for flow in self.served}
            stores = [self.admin.clusters.store(cluster) for cluster in sorted(clusters)]
        except StreamrepError:
            return None
        if not stores:
            return None
        while not self.stopping.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return False
            for store in stores:
                arrived = store.await_messages(min(STOP_CHECK_SECONDS, left) / len(stores))
                if arrived is None:
                    return None
                if arrived:
                    return True
        return False

    def _give_up_heartbeat(self) -> None:
        """``stop``, best effort: on a store that cannot take it (a full disk) the heartbeat
        expires by itself."""
        try:
            self.stop()
        except StreamrepError as err:
            log.warning("gateway %s: could not withdraw its heartbeat (%s); it expires by itself", self.id, err)

    def _record_state(self, flow: Flow, state: ReplicaState, error: str | None) -> None:
        # Written only on a change: the source catalog is not touched per batch.
        if flow.state is state and flow.error == error:
            return
        if flow.state is ReplicaState.SYNC_FALLBACK and state is ReplicaState.REPLICATING:
            return  # the synchronous path clears its own fallback once caught up
        try:
            self.admin.set_replica_state(flow.source, flow.replica, state, error)
        except StreamrepError:
            pass  # the link was removed meanwhile: nothing to report on
