"""The cluster commands of ``StreamAdmin``: ``cluster add``, ``cluster ace get|set`` and ``cluster
gateway set|get|list|delete``, kept in each cluster itself and checked against its adminperm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamrep.client.catalog import now_ms
from streamrep.client.config import ClusterInfo
from streamrep.client.permissions import Permissions
from streamrep.client.results import ClusterAceInfo
from streamrep.errors import InvalidArgument, NotFound
from streamrep.model import replication as rules
from streamrep.model.ace import validate_ace
from streamrep.model.catalog import CLUSTER_ACE_KEY, CLUSTER_KIND, GATEWAYS_KIND, STREAM_KIND, ClusterAce
from streamrep.model.paths import validate_cluster_name
from streamrep.store.base import CatalogDoc


class ClusterCommands(Permissions):
    """Who administers each cluster, and the gateways each source cluster lists."""

    # -- clusters: who administers each one (kept in the cluster itself) -------------
    def add_cluster(
        self, name: str, url: str | None = None, default: bool = False, settings: Mapping[str, Any] | None = None
    ) -> ClusterInfo:
        """``cluster add``: register a cluster. A new (empty) cluster is administered by its
        creator. Registering an existing cluster changes nothing in it: it keeps its ACE, or,
        holding streams but no ACE (made before cluster ACEs), stays without one, so that
        registering someone's cluster never makes the caller its administrator."""
        info = self.clusters.add(name, url, default, settings)
        store = self.clusters.store(name)
        creator = self.caller(name).user
        ace = ClusterAce(adminperm=f"u:{creator}", creator=creator, created=now_ms())

        if store.catalog_get(CLUSTER_KIND, CLUSTER_ACE_KEY) is not None or store.catalog_list(STREAM_KIND):
            return info  # nothing to write: a principal that may not write the catalog can register it too

        def claim_if_new(doc: CatalogDoc | None) -> CatalogDoc | None:
            return doc if doc is not None or store.catalog_list(STREAM_KIND) else ace.to_dict()

        store.catalog_update(CLUSTER_KIND, CLUSTER_ACE_KEY, claim_if_new)
        return info

    def get_cluster_ace(self, cluster: str | None = None) -> ClusterAceInfo:
        """``cluster ace get``: the cluster's ACE (None if it has no ACE document)."""
        name = self._source_cluster(cluster)
        return ClusterAceInfo(name, self.cluster_ace(name))

    def set_cluster_ace(self, adminperm: str, cluster: str | None = None) -> ClusterAceInfo:
        """``cluster ace set -adminperm ACE``: who administers the cluster; needs its adminperm.
        An empty ACE is refused: it would lock every administrator out."""
        name = self._source_cluster(cluster)
        text = validate_ace(adminperm)
        if not text:
            raise InvalidArgument(f"cluster {name} needs an adminperm: an empty ACE would lock everyone out")

        def change(doc: CatalogDoc | None) -> CatalogDoc:
            old = None if doc is None else ClusterAce.from_dict(doc)
            self._check_cluster_ace(old, name)  # inside the update: no change slips in between
            if old is None:
                return ClusterAce(text, self.caller(name).user, now_ms()).to_dict()
            return ClusterAce(text, old.creator, old.created).to_dict()

        self.clusters.store(name).catalog_update(CLUSTER_KIND, CLUSTER_ACE_KEY, change)
        return self.get_cluster_ace(name)

    # -- gateways (kept on the source cluster) -------------------------------------
    def _source_cluster(self, cluster: str | None) -> str:
        return self._catalog.source_cluster(cluster)

    def set_gateways(self, dstcluster: str, gateways: str | list[str], cluster: str | None = None) -> list[str]:
        """``cluster gateway set``: on the source cluster, list the gateways of ``dstcluster``;
        needs adminperm on the source cluster."""
        source = self._source_cluster(cluster)
        self.require_cluster_admin(source)
        self.clusters.get(validate_cluster_name(dstcluster))
        names = rules.validate_gateways(gateways)
        self.clusters.store(source).catalog_update(GATEWAYS_KIND, dstcluster, lambda _: {"gateways": names})
        return names

    def gateways(self, cluster: str | None = None) -> dict[str, list[str]]:
        """``cluster gateway list``: the gateways of every destination cluster."""
        return self._catalog.gateways(cluster)

    def get_gateways(self, dstcluster: str, cluster: str | None = None) -> list[str]:
        """``cluster gateway get``: the gateways of one destination cluster."""
        return self._catalog.get_gateways(dstcluster, cluster)

    def delete_gateways(self, dstcluster: str, cluster: str | None = None) -> None:
        """``cluster gateway delete``: forget the gateways of one destination cluster; needs
        adminperm on the source cluster."""
        source = self._source_cluster(cluster)
        self.require_cluster_admin(source)

        def delete(doc: CatalogDoc | None) -> None:
            if doc is None:
                raise NotFound(f"cluster {source} lists no gateways for destination cluster {dstcluster}")
            return None

        self.clusters.store(source).catalog_update(GATEWAYS_KIND, validate_cluster_name(dstcluster), delete)
