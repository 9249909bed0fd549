"""Which source streams flow into which replicas of a destination cluster.

A flow exists only while the two-way agreement holds: the replica lists the source as an
upstream and the source lists the replica, and both links name the streams now at their paths
(by UUID: a stream recreated at an agreed path is a stranger). It moves data only while not
paused. Everything that blocks a flow is reported with a reason, so ``replica list`` can say why.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamrep.client.catalog import HasCatalog
from streamrep.errors import StreamrepError
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


@dataclass(frozen=True)
class Blocked:
    """A replica's upstream that cannot flow, and why (``unreadable``: its cluster or entry could
    not be read, as opposed to an agreement not in place)."""

    source: StreamPath
    replica: StreamPath
    reason: str
    unreadable: bool = False


def flows_into(admin: HasCatalog, cluster: str) -> tuple[list[Flow], list[Blocked]]:
    """Every agreed flow into the replicas on ``cluster``, and every upstream that is blocked."""
    catalog = admin.catalog
    flows: list[Flow] = []
    blocked: list[Blocked] = []
    for replica_entry in catalog.list_streams(cluster):
        replica = StreamPath(cluster, replica_entry.path)
        for upstream in replica_entry.upstreams:
            source = catalog.path(upstream.path)
            try:
                source_entry = catalog.entry(source)
            except StreamrepError as err:
                blocked.append(Blocked(source, replica, str(err), unreadable=True))
                continue
            found = rules.agreement(source, source_entry, replica, replica_entry)
            if found.agreed and found.link is not None:
                flows.append(flow_of(source, source_entry, replica, replica_entry, found.link))
            else:
                blocked.append(Blocked(source, replica, found.reason or "not agreed"))
    return flows, blocked


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
