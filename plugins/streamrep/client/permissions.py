"""Who is calling, and what they may do: the permission checks of ``StreamAdmin``.

``Permissions`` is the base of the admin's command groups (``client/admin.py``): it holds the
cluster registry, the caller's identity and the catalog bound to that identity (private: only
the admin's own methods reach it, each checking what it must), and the checks they share: a
stream's ACEs (``require*``), a cluster's adminperm, and the gateway principal that administers
nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from streamrep.client.catalog import Catalog
from streamrep.client.config import Clusters
from streamrep.client.identity import current_identity, named_user
from streamrep.errors import NotFound, PermissionDenied
from streamrep.model.ace import Identity, parse_ace
from streamrep.model.acls import Principals
from streamrep.model.catalog import ClusterAce, StreamEntry
from streamrep.model.paths import StreamPath
from streamrep.model.stream import StreamMeta
from streamrep.store.base import Store


class Permissions:
    """The caller on each cluster, and the checks of its rights.

    :param clusters: the cluster registry (``Clusters()`` reads ``STREAMREP_HOME``).
    :param identity: who is calling; the configured or OS user if None.
    """

    def __init__(self, clusters: Clusters | None = None, identity: Identity | None = None):
        self.clusters = clusters or Clusters()
        self.identity = identity or current_identity()
        # Whether someone named the identity (the caller, STREAMREP_USER or a connection's user),
        # rather than it being the OS user: a cluster that authenticates someone else refuses it.
        self._named = identity is not None or named_user() is not None
        self._callers: dict[str, Identity] = {}
        self._gateway_callers: dict[str, bool] = {}  # cluster -> whether the caller is its gateway principal
        # Unchecked, bound to who is calling (``store`` refuses an identity that a cluster does
        # not authenticate). Private: the engine gets only the admin's checked methods.
        self._catalog = Catalog(self.clusters, guard=self.caller)

    def caller(self, cluster: str) -> Identity:
        """Who is calling on ``cluster``: the principal its settings authenticate as (with the
        groups its settings map to that principal), else this admin's identity.

        :raises PermissionDenied: the identity was named and is not the authenticated principal
        """
        identity = self._callers.get(cluster)
        if identity is None:
            info = self.clusters.get(cluster)
            principal = info.principal
            if principal is None:
                identity = self.identity
            elif self._named and self.identity.user != principal:
                raise PermissionDenied(
                    f"cluster {cluster} authenticates this client as {principal}; acting as "
                    f"{self.identity.user} is refused (the caller is the authenticated principal)"
                )
            else:
                identity = Principals.from_settings(info.settings).identity(principal)
            self._callers[cluster] = identity
        return identity

    # -- reads every caller may make (the catalog is readable by all) -----------------
    def path(self, text: str | StreamPath) -> StreamPath:
        """Parse a stream path against the default cluster."""
        return self._catalog.path(text)

    def store(self, path: StreamPath) -> Store:
        """The store of ``path``'s cluster (acting as someone it does not authenticate is refused)."""
        return self._catalog.store(path)

    def entry(self, path: str | StreamPath) -> StreamEntry:
        """The catalog entry of a stream, or NotFound."""
        return self._catalog.entry(path)

    def cluster_ace(self, cluster: str) -> ClusterAce | None:
        """The cluster's administration ACE; None for a cluster registered before cluster ACEs
        existed (or through ``Clusters.add``, which does not know the caller)."""
        return self._catalog.cluster_ace(cluster)

    def _update(self, sp: StreamPath, change: Callable[[StreamEntry], StreamEntry]) -> StreamEntry:
        """Atomically change an existing stream's entry."""
        result = self._catalog.update(sp, change)
        if result is None:  # ``change`` never deletes
            raise NotFound(f"stream {sp} does not exist")
        return result

    # -- a stream's ACEs ----------------------------------------------------------------
    def may(self, meta: StreamMeta, perm: str, cluster: str) -> bool:
        """Whether the caller on ``cluster`` satisfies the ACE ``perm`` of stream metadata ``meta``."""
        return parse_ace(getattr(meta, perm)).allows(self.caller(cluster))

    def require(self, entry: StreamEntry, sp: StreamPath, *perms: str) -> None:
        """PermissionDenied unless the caller satisfies every ACE in ``perms``."""
        if "adminperm" in perms:
            self._refuse_gateway_principal(sp.cluster, f"changing stream {sp}")
        for perm in perms:
            if not self.may(entry.meta, perm, sp.cluster):
                ace = getattr(entry.meta, perm)
                raise PermissionDenied(
                    f"user {self.caller(sp.cluster).user} does not have {perm} on stream {sp} ({perm} is {ace!r})"
                )

    def require_any(self, entry: StreamEntry, sp: StreamPath, *perms: str) -> None:
        """PermissionDenied unless the caller satisfies at least one ACE in ``perms``."""
        if not any(self.may(entry.meta, perm, sp.cluster) for perm in perms):
            raise PermissionDenied(
                f"user {self.caller(sp.cluster).user} has none of {', '.join(perms)} on stream {sp} "
                f"({'; '.join(f'{p} is {getattr(entry.meta, p)!r}' for p in perms)})"
            )

    def require_all_of_any(self, entry: StreamEntry, sp: StreamPath, *choices: tuple[str, ...]) -> None:
        """PermissionDenied unless the caller satisfies every ACE of at least one of ``choices``
        (MapR's "copyperm, or produceperm, consumeperm and topicperm")."""
        if not any(all(self.may(entry.meta, perm, sp.cluster) for perm in choice) for choice in choices):
            needed = ", or ".join(
                choice[0] if len(choice) == 1 else f"{', '.join(choice[:-1])} and {choice[-1]}" for choice in choices
            )
            held = "; ".join(f"{p} is {getattr(entry.meta, p)!r}" for p in dict.fromkeys(p for c in choices for p in c))
            raise PermissionDenied(f"user {self.caller(sp.cluster).user} needs {needed}, on stream {sp} ({held})")

    def require_on_new(self, source: StreamEntry, src: StreamPath, dst: StreamPath, *perms: str) -> None:
        """PermissionDenied unless the caller would hold every ACE in ``perms`` on the stream
        ``dst`` that is about to be created with the metadata of ``source`` (at ``src``)."""
        for perm in perms:
            if not self.may(source.meta, perm, dst.cluster):
                ace = getattr(source.meta, perm)
                raise PermissionDenied(
                    f"user {self.caller(dst.cluster).user} would not have {perm} on stream {dst}, which would be created "
                    f"with the metadata of {src} ({perm} is {ace!r})"
                )

    # -- a cluster's adminperm, and its gateway principal ---------------------------------
    def require_cluster_admin(self, cluster: str) -> None:
        """PermissionDenied unless the caller satisfies the cluster's adminperm. A cluster
        without an ACE document is administered by everyone, as before cluster ACEs existed,
        until ``cluster ace set`` gives it one."""
        self._check_cluster_ace(self.cluster_ace(cluster), cluster)

    def require_gateway(self, cluster: str) -> None:
        """PermissionDenied unless the caller may run a gateway of ``cluster``: its cluster admin,
        or the gateway principal the cluster's settings name (``streamrep.gateway.principal``), when
        the cluster authenticates the caller as that principal. The gateway principal administers
        nothing: the broker's ACLs give it only what replication writes (docs/kafka.md), and
        streamrep's own checks refuse it every ACE, gateway list and stream change."""
        if not self._is_gateway_principal(cluster):
            self.require_cluster_admin(cluster)

    def _is_gateway_principal(self, cluster: str) -> bool:
        """Whether the cluster authenticates the caller as the gateway principal its settings name."""
        known = self._gateway_callers.get(cluster)
        if known is None:
            info = self.clusters.get(cluster)
            gateway = Principals.from_settings(info.settings).gateway
            known = self._gateway_callers[cluster] = info.principal is not None and self.caller(cluster).user == gateway
        return known

    def _refuse_gateway_principal(self, cluster: str, what: str) -> None:
        """The gateway principal administers nothing, whatever an ACE says: a stolen service
        credential must not hand out rights (its Kafka ACLs let it write only what replication needs)."""
        if self._is_gateway_principal(cluster):
            raise PermissionDenied(
                f"user {self.caller(cluster).user} is the gateway principal of cluster {cluster}, which "
                f"administers nothing: {what} needs an administrator"
            )

    def _check_cluster_ace(self, ace: ClusterAce | None, cluster: str) -> None:
        self._refuse_gateway_principal(cluster, f"administering cluster {cluster}")
        if ace is not None and not parse_ace(ace.adminperm).allows(self.caller(cluster)):
            raise PermissionDenied(
                f"user {self.caller(cluster).user} does not have adminperm on cluster {cluster} (adminperm is {ace.adminperm!r})"
            )
