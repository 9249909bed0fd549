"""A gateway's passes: one pass reads each replica's marks once, plans the partitions of the share
with something to move (``_plan_pass``), then moves a batch of each in rounds (``_round``: one read
per source cluster, ``reads.read_sources``, and one apply for all, ``transfer.apply_reads``, paced by
``throttle.py``), and within ``run`` goes on with what arrives for up to ``PASS_SECONDS``
(``_arrivals``). The Spark tasks apply through the same ``apply_reads``."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from streamrep.errors import RetryNow, StoreFull, StreamrepError, Unavailable
from streamrep.model import network
from streamrep.model.message import Message
from streamrep.model.replication import stop_key
from streamrep.replication.assignment import HEARTBEAT_INTERVAL_SECONDS
from streamrep.replication.flows import Flow
from streamrep.replication.gateway_liveness import log
from streamrep.replication.gateway_shares import Assignment, GatewayShares
from streamrep.replication.reads import SourceRead, SourceSpan, read_sources
from streamrep.replication.throttle import batch_bytes
from streamrep.replication.transfer import SourcePartition, UnitApply, apply_reads, by_source_cluster, next_position

DEFAULT_BATCH = 5000
# A running gateway's pass keeps moving what arrives in its share for up to this long, then reads its
# assignment again: pauses, removals, new topics and other gateways' shares take effect within it.
PASS_SECONDS = 0.5
STOP_CHECK_SECONDS = 0.1  # an idle gateway waiting for messages sees a stop request within this


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


class GatewayPasses(GatewayShares):
    """What one pass of a gateway reads and applies."""

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

    def apply_reads(
        self, reads: Mapping[SourcePartition, tuple[Iterable[Flow], Sequence[Message], int, tuple[int, int] | None]]
    ) -> dict[SourcePartition, tuple[dict[Flow, int], dict[Flow, str]]]:
        """Apply the reads of several source partitions at once (a Spark task's round): each its flows,
        batch (the messages of its ``span``, as ``transfer.apply_to_replicas``: read once, written to all),
        the oldest offset the source held and the span; on Kafka one transaction per apply lane. Each
        flow's replica gets its batch exactly once; a flow that fails is reported and the others still get
        it. Returns, by partition, the messages written and the errors (prefixed ``topic/partition``), by flow."""
        return {
            unit: (written, {flow: f"{unit.topic}/{unit.partition}: {err}" for flow, err in errors.items()})
            for unit, (written, errors) in self._apply_reads(reads).items()
        }

    def _apply_reads(
        self,
        reads: Mapping[SourcePartition, tuple[Iterable[Flow], Sequence[Message], int, tuple[int, int] | None]],
        known_marks: dict[str, dict[str, int]] | None = None,
    ) -> dict[SourcePartition, tuple[dict[Flow, int], dict[Flow, StreamrepError]]]:
        """Apply each source partition's read (its flows, batch, oldest offset held and span, as ``apply_reads``)
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
        source cluster (``reads.read_sources``): a Kafka source fetches them all with one consumer."""
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
