"""Catalog documents, as kept inside the cluster they describe: each stream's entry, and the
cluster's own administration ACE.

``check_document`` is what a store holds every document it reads to: a document of a kind named
here must convert to its class (others must be JSON objects), so that a malformed one written
by someone else is refused where it is read, never deep inside a command.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
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
            # Missing in documents written by tools and tests at the store's level: the defaults.
            creator=data.get("creator", ""),
            created=data.get("created", 0),
            meta=StreamMeta.from_dict(data.get("meta", {})),
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


# The scalar field types a document's values are checked against (annotations are strings here).
_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "str | None": (str, type(None)),
    "int | None": (int, type(None)),
}


def _typed(instance: Any) -> None:
    """Raise ``ValueError`` if a scalar field of dataclass ``instance`` holds a value of another type."""
    for f in fields(instance):
        wanted = _SCALARS.get(str(f.type))
        value = getattr(instance, f.name)
        if wanted is not None and not (
            isinstance(value, wanted) and (bool in wanted or not isinstance(value, bool))
        ):  # a bool is an int to Python, never to a document
            raise ValueError(f"its {f.name} is {type(value).__name__}, not {f.type}")


def check_document(kind: str, key: str, doc: Any) -> None:
    """Raise ``ValueError`` naming what is wrong if ``doc`` is no catalog document ``kind``/``key``."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"catalog document {kind} {key[:80]!r} is no JSON object")
    try:
        if kind == STREAM_KIND:
            entry = StreamEntry.from_dict(dict(doc))
            for part in (entry, entry.meta, *entry.replicas, *entry.upstreams, entry.failover):
                if part is not None:
                    _typed(part)
        elif kind == CLUSTER_KIND and key == CLUSTER_ACE_KEY:
            _typed(ClusterAce.from_dict(dict(doc)))
        elif kind == GATEWAYS_KIND:
            gateways = doc["gateways"]
            if not (isinstance(gateways, list) and all(isinstance(g, str) for g in gateways)):
                raise ValueError("its gateways are no list of names")
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        what = f"no {err.args[0]!r} field" if isinstance(err, KeyError) else str(err)
        raise ValueError(f"catalog document {kind} {key[:80]!r} is malformed: {what}") from None
