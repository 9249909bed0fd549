"""A gateway's share: the agreed flows into its cluster, the source partitions they carry, the
part of them this gateway serves among the live gateways its source clusters list (dealt by
``assignment.py``), the replica partitions left out because they lost what was applied to them
(``held.py``), and the replica states it records on the links it serves."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streamrep.errors import StreamrepError, Unavailable
from streamrep.model import network
from streamrep.model.catalog import StreamEntry
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaState, agreement
from streamrep.replication.assignment import eligible, shares_seen_by
from streamrep.replication.flows import Blocked, Flow, flows_into
from streamrep.replication.gateway_liveness import GatewayLiveness, log
from streamrep.replication.held import HeldCheck, lost_data
from streamrep.replication.service import beat, share_names
from streamrep.replication.transfer import SourcePartition, by_source_cluster, ensure_topics


@dataclass
class Assignment:
    """This gateway's share: each source partition, with the flows (replicas) it feeds."""

    units: dict[SourcePartition, list[Flow]] = field(default_factory=dict)


class GatewayShares(GatewayLiveness):
    """Which source partitions a gateway serves, and the replica states it records."""

    def active_flows(self) -> dict[str, list[Flow]]:
        """The agreed, unpaused flows into this cluster, by source stream UUID. A flow that asks
        for network encryption while this gateway would reach its source or this cluster in
        plaintext is left out and its replica put in error, with the reason, until it can be
        given (the clusters' settings are read now: they may have changed since ``replica add``)."""
        flows, blocked = flows_into(self.admin, self.cluster)
        self._report_blocked(blocked)
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

    def _report_blocked(self, blocked: Sequence[Blocked]) -> None:
        """Log each upstream that cannot flow when it starts or stops being blocked, or its reason
        changes: nothing else says why a replica stays WAITING_FOR_GATEWAY (a link not yet agreed
        during setup; a source this gateway cannot read, whose catalog it could not write to either)."""
        now = {(b.source, b.replica): b for b in blocked}
        before, self._blocked = self._blocked, now
        if not self.logs_blocked:
            return
        for key, b in sorted(now.items()):
            if before.get(key) != b:
                level = logging.WARNING if b.unreadable else logging.INFO
                what = "cannot be read" if b.unreadable else "is not agreed"
                log.log(level, "gateway %s: upstream %s of %s %s: %s", self.id, b.source, b.replica, what, b.reason)
        for source, replica in sorted(set(before) - set(now)):
            log.info("gateway %s: upstream %s of %s flows again", self.id, source, replica)

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
        or holds planted messages (``held.lost_data``), so nothing is applied over the hole, and
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
