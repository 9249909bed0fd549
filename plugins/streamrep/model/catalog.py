"""The catalog entry of a stream, as kept inside the stream's own cluster."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from streamrep.model.replication import ReplicaLink, UpstreamLink
from streamrep.model.stream import StreamMeta

STREAM_KIND = "stream"
GATEWAYS_KIND = "gateways"


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

    def with_changes(self, **changes: Any) -> "StreamEntry":
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
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StreamEntry":
        return cls(
            uuid=data["uuid"],
            path=data["path"],
            creator=data["creator"],
            created=data["created"],
            meta=StreamMeta.from_dict(data["meta"]),
            replicas=tuple(ReplicaLink.from_dict(r) for r in data.get("replicas", ())),
            upstreams=tuple(UpstreamLink.from_dict(u) for u in data.get("upstreams", ())),
        )
