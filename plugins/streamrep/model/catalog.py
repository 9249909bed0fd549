"""Catalog documents, as kept inside the cluster they describe: each stream's entry, and the
cluster's own administration ACE."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from streamrep.model.failover import FailoverRecord
from streamrep.model.replication import ReplicaLink, UpstreamLink
from streamrep.model.stream import StreamMeta

STREAM_KIND = "stream"
GATEWAYS_KIND = "gateways"
CLUSTER_KIND = "cluster"
CLUSTER_ACE_KEY = "ace"  # the one document of CLUSTER_KIND: who administers the cluster


@dataclass(frozen=True)
class StreamEntry:
    """A stream: identity, metadata and replication links. Topics live in the store itself."""

    uuid: str
    path: str  # the path inside the cluster, e.g. "/activity"
    creator: str
    created: int  # ms since the epoch
    meta: StreamMeta
    replicas: tuple[ReplicaLink, ...] = field(default=())
    upstreams: tuple[UpstreamLink, ...] = field(default=())
    # While an autosetup that created this stream is unfinished: the UUID of its source, so a
    # rerun of the same autosetup may complete it. None otherwise.
    autosetup_from: str | None = None
    # How a Kafka cluster names the stream's topics (``model/naming.py``); None: the default.
    naming: str | None = None
    # Where a failover or failback left this stream (``model/failover.py``); None: no failover.
    failover: FailoverRecord | None = None

    def with_changes(self, **changes: Any) -> StreamEntry:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "path": self.path,
            "creator": self.creator,
            "created": self.created,
            "meta": self.meta.to_dict(),
            "replicas": [r.to_dict() for r in self.replicas],
            "upstreams": [u.to_dict() for u in self.upstreams],
            "autosetup_from": self.autosetup_from,
            "naming": self.naming,
            "failover": None if self.failover is None else self.failover.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StreamEntry:
        return cls(
            uuid=data["uuid"],
            path=data["path"],
            creator=data["creator"],
            created=data["created"],
            meta=StreamMeta.from_dict(data["meta"]),
            replicas=tuple(ReplicaLink.from_dict(r) for r in data.get("replicas", ())),
            upstreams=tuple(UpstreamLink.from_dict(u) for u in data.get("upstreams", ())),
            autosetup_from=data.get("autosetup_from"),
            naming=data.get("naming"),
            failover=FailoverRecord.from_dict(data.get("failover")),
        )


@dataclass(frozen=True)
class ClusterAce:
    """Who administers a cluster (``cluster ace``): set by ``cluster add`` to its creator."""

    adminperm: str
    creator: str
    created: int  # ms since the epoch

    def to_dict(self) -> dict[str, Any]:
        return {"adminperm": self.adminperm, "creator": self.creator, "created": self.created}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterAce:
        return cls(adminperm=data["adminperm"], creator=data.get("creator", ""), created=data.get("created", 0))
