"""Which source streams flow into which replicas of a destination cluster.

A flow exists only while the two-way agreement holds: the replica lists the source as an
upstream and the source lists the replica, and both links name the streams now at their paths
(by UUID: a stream recreated at an agreed path is a stranger). It moves data only while not
paused. Everything that blocks a flow is reported with a reason, so ``replica list`` can say why.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError
from streamrep.model import fanin
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.network import LEGACY_NETWORK_COMPRESSION, NO_BYTE_LIMIT
from streamrep.model.paths import StreamPath


@dataclass(frozen=True)
class Flow:
    """One source stream replicating into one replica stream."""

    source: StreamPath
    source_uuid: str
    replica: StreamPath
    replica_uuid: str
    paused: bool
    synchronous: bool
    state: rules.ReplicaState
    error: str | None
    # The link's network options (``model/network.py``).
    throttle: bool = False
    networkencryption: bool = False
    networkcompression: str = LEGACY_NETWORK_COMPRESSION
    maxbytespersec: int = NO_BYTE_LIMIT
    # Topics not replicated by this flow, and why: another upstream of the replica has an
    # unrelated topic of the name (the fan-in topic rule, ``fanin.topic_conflicts``).
    stopped_topics: frozenset[str] = frozenset()
    conflict: str | None = None

    def carries(self, topic: str) -> bool:
        return topic not in self.stopped_topics


@dataclass(frozen=True)
class Blocked:
    """A replica's upstream that cannot flow, and why (``unreadable``: its cluster or entry could
    not be read, as opposed to an agreement not in place)."""

    source: StreamPath
    replica: StreamPath
    reason: str
    unreadable: bool = False


def flows_into(admin: StreamAdmin, cluster: str) -> tuple[list[Flow], list[Blocked]]:
    """Every agreed flow into the replicas on ``cluster``, and every upstream that is blocked."""
    flows: list[Flow] = []
    blocked: list[Blocked] = []
    for replica_entry in admin.list_streams(cluster):
        replica = StreamPath(cluster, replica_entry.path)
        for upstream in replica_entry.upstreams:
            source = admin.path(upstream.path)
            try:
                source_entry = admin.entry(source)
            except StreamrepError as err:
                blocked.append(Blocked(source, replica, str(err), unreadable=True))
                continue
            found = rules.agreement(source, source_entry, replica, replica_entry)
            if found.agreed and found.link is not None:
                flows.append(flow_of(source, source_entry, replica, replica_entry, found.link))
            else:
                blocked.append(Blocked(source, replica, found.reason or "not agreed"))
    return with_topic_conflicts(admin, flows), blocked


def with_topic_conflicts(admin: StreamAdmin, flows: list[Flow]) -> list[Flow]:
    """``flows``, each with the topics it must not carry under the fan-in topic rule
    (``fanin.topic_conflicts``): read from the sources' topics, and, only where two upstreams
    of a replica share a name, their lineages and the replica's positions."""
    by_replica: dict[str, list[Flow]] = {}
    for flow in flows:
        by_replica.setdefault(flow.replica_uuid, []).append(flow)
    stopped: dict[tuple[str, str], list[fanin.TopicConflict]] = {}
    for replica_uuid, into in by_replica.items():
        if len(into) < 2:
            continue
        try:
            topics = {f.source_uuid: set(admin.store(f.source).topics(f.source_uuid)) for f in into}
        except StreamrepError:
            continue  # a source that cannot be read moves nothing this pass
        names = [name for found in topics.values() for name in found]
        if len(names) == len(set(names)):
            continue
        marks = admin.store(into[0].replica).marks(replica_uuid)
        upstreams = [(str(f.source), topics[f.source_uuid]) for f in into]
        lineages = {str(f.source): admin.lineage(f.source) for f in into}
        holds = {str(f.source): {k.split("|")[2] for k in marks if k.startswith(f"p|{f.source_uuid}|")} for f in into}
        for conflict in fanin.topic_conflicts(into[0].replica, upstreams, lineages, holds):
            stopped.setdefault((replica_uuid, conflict.stopped), []).append(conflict)
    if not stopped:
        return flows
    result = []
    for flow in flows:
        found = stopped.get((flow.replica_uuid, str(flow.source)), [])
        if found:
            flow = replace(
                flow, stopped_topics=frozenset(c.topic for c in found), conflict="; ".join(c.line() for c in found)
            )
        result.append(flow)
    return result


def flow_of(
    source: StreamPath,
    source_entry: StreamEntry,
    replica: StreamPath,
    replica_entry: StreamEntry,
    link: rules.ReplicaLink,
) -> Flow:
    return Flow(
        source,
        source_entry.uuid,
        replica,
        replica_entry.uuid,
        link.paused,
        link.synchronous,
        link.state,
        link.error,
        link.throttle,
        link.networkencryption,
        link.networkcompression,
        link.maxbytespersec,
    )
