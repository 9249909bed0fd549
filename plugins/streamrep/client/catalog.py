"""The stream catalog, unchecked: what ``StreamAdmin`` reads and changes, private to ``client/``.

Each cluster keeps the catalog of its own streams (``model/catalog.py``). ``Catalog`` reads
and changes those documents with no access control expression checked. ``StreamAdmin``
(``client/admin.py``) holds one, bound to its caller, as ``_catalog``, and checks the caller's
ACEs before it changes anything through it; the engine (replication, Spark, Airflow) calls the
admin, never this class.

Only one check is made here, and only when the owner asks for it: ``guard`` is called with a
cluster's name before its store is used, which is how ``StreamAdmin`` refuses to act as someone
a cluster does not authenticate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from streamrep.client.config import Clusters
from streamrep.errors import NotFound, StreamrepError
from streamrep.model import replication as rules
from streamrep.model.catalog import CLUSTER_ACE_KEY, CLUSTER_KIND, GATEWAYS_KIND, STREAM_KIND, ClusterAce, StreamEntry
from streamrep.model.fanin import Lineage, check_new_topic
from streamrep.model.paths import StreamPath, parse_stream_path, validate_cluster_name
from streamrep.store.base import CatalogDoc, Store


def now_ms() -> int:
    return int(time.time() * 1000)


class Catalog:
    """The stream catalogs of the registered clusters, read and changed without ACE checks.

    :param clusters: the cluster registry.
    :param guard: called with a cluster's name before its store is used (None: nothing).
    """

    def __init__(self, clusters: Clusters, guard: Callable[[str], object] | None = None):
        self.clusters = clusters
        self._guard = guard

    def path(self, text: str | StreamPath) -> StreamPath:
        """Parse a stream path against the default cluster."""
        if isinstance(text, StreamPath):
            return text
        return parse_stream_path(text, self.clusters.default)

    def store(self, path: StreamPath) -> Store:
        """The store of the cluster that holds ``path``."""
        if self._guard is not None:
            self._guard(path.cluster)
        return self.clusters.store(path.cluster)

    def cluster_store(self, cluster: str) -> Store:
        """The store of the cluster named ``cluster``."""
        return self.clusters.store(validate_cluster_name(cluster))

    def entry(self, path: str | StreamPath) -> StreamEntry:
        """The catalog entry of a stream, or NotFound."""
        sp = self.path(path)
        doc = self.store(sp).catalog_get(STREAM_KIND, sp.path)
        if doc is None:
            raise NotFound(f"stream {sp} does not exist")
        return StreamEntry.from_dict(doc)

    def update(self, sp: StreamPath, change: Callable[[StreamEntry], StreamEntry | None]) -> StreamEntry | None:
        """Atomically change an existing stream's entry (None deletes it)."""

        def apply(doc: CatalogDoc | None) -> CatalogDoc | None:
            if doc is None:
                raise NotFound(f"stream {sp} does not exist")
            new = change(StreamEntry.from_dict(doc))
            return None if new is None else new.to_dict()

        result = self.store(sp).catalog_update(STREAM_KIND, sp.path, apply)
        return None if result is None else StreamEntry.from_dict(result)

    def list_streams(self, cluster: str | None = None) -> list[StreamEntry]:
        """Every stream of ``cluster`` (the default cluster if None)."""
        name = cluster or self.clusters.default
        if name is None:
            raise NotFound("no cluster given and no default cluster is set")
        docs = self.cluster_store(name).catalog_list(STREAM_KIND)
        return [StreamEntry.from_dict(d) for d in docs.values()]

    def topics_of(self, path: StreamPath) -> set[str]:
        """The topic names of the stream at ``path``; none for a stream that is gone."""
        try:
            entry = self.entry(path)
            return set(self.store(path).topics(entry.uuid))
        except NotFound:
            return set()

    def lineage(self, path: StreamPath, limit: int = 256) -> Lineage:
        """The stream at ``path`` and every stream that feeds it through upstream links,
        transitively (``fanin.related``): UUID -> topic names. A stream that cannot be read (gone,
        or its cluster not registered here or down) adds nothing: the topic rule then stops
        rather than merges."""
        found: dict[str, set[str]] = {}
        todo = [path]
        while todo and len(found) < limit:
            sp = self.path(todo.pop())
            try:
                entry = self.entry(sp)
                if entry.uuid in found:
                    continue
                found[entry.uuid] = set(self.store(sp).topics(entry.uuid))
            except StreamrepError:
                continue
            todo += [self.path(link.path) for link in entry.upstreams]
        return found

    def check_new_topic(self, sp: StreamPath, entry: StreamEntry, topic: str) -> None:
        """Refuse creating ``topic`` on the stream ``sp`` where it is an agreed upstream of a
        replica that has another upstream with an unrelated topic of that name (the fan-in rule,
        ``check_new_topic``). Replicas and upstreams that cannot be read are left to the
        gateways' check."""
        lineage: Lineage | None = None
        for link in entry.replicas:
            try:
                replica = self.path(link.path)
                replica_entry = self.entry(replica)
                if not rules.agreement(sp, entry, replica, replica_entry).agreed:
                    continue
                others: dict[str, tuple[set[str], Lineage]] = {}
                for other in replica_entry.upstreams:
                    if other.path == str(sp):
                        continue
                    topics = self.topics_of(self.path(other.path))
                    if topic in topics:
                        others[other.path] = (topics, self.lineage(self.path(other.path)))
            except StreamrepError:
                continue
            if others:
                lineage = self.lineage(sp) if lineage is None else lineage
                check_new_topic(sp, topic, lineage, replica, others)

    # -- clusters: administration ACE and gateway lists ------------------------------
    def cluster_ace(self, cluster: str) -> ClusterAce | None:
        """The cluster's administration ACE; None for a cluster registered before cluster ACEs
        existed (or through ``Clusters.add``, which does not know the caller)."""
        doc = self.cluster_store(cluster).catalog_get(CLUSTER_KIND, CLUSTER_ACE_KEY)
        return None if doc is None else ClusterAce.from_dict(doc)

    def source_cluster(self, cluster: str | None) -> str:
        """``cluster``, or the default cluster; NotFound if neither names a registered one."""
        name = cluster or self.clusters.default
        if name is None:
            raise NotFound("no cluster given and no default cluster is set")
        self.clusters.get(name)
        return name

    def gateways(self, cluster: str | None = None) -> dict[str, list[str]]:
        """The gateways that ``cluster`` lists for every destination cluster."""
        docs = self.clusters.store(self.source_cluster(cluster)).catalog_list(GATEWAYS_KIND)
        return {dst: doc["gateways"] for dst, doc in docs.items()}

    def get_gateways(self, dstcluster: str, cluster: str | None = None) -> list[str]:
        """The gateways that ``cluster`` lists for one destination cluster."""
        source = self.source_cluster(cluster)
        doc = self.clusters.store(source).catalog_get(GATEWAYS_KIND, validate_cluster_name(dstcluster))
        if doc is None:
            raise NotFound(f"cluster {source} lists no gateways for destination cluster {dstcluster}")
        gateways: list[str] = doc["gateways"]
        return gateways
