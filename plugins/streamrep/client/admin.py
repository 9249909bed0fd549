"""The admin API: everything ``maprcli stream ...``, ``maprcli cluster gateway ...`` and
``cluster ace ...`` do.

Each method checks the stream's (or the cluster's) access control expression for the caller,
applies the rules from ``streamrep.model``, and changes one catalog document atomically, so
every call is safe to retry: it finds the state it wanted or fails with a clear error.

It is built on the unchecked ``Catalog`` (``client/catalog.py``), which the replication layer
uses; ``StreamAdmin.catalog`` is that catalog, bound to this admin's caller.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Any

from streamrep.client.catalog import Catalog, now_ms
from streamrep.client.config import ClusterInfo, Clusters
from streamrep.client.identity import current_identity, named_user
from streamrep.client.results import (
    ClusterAceInfo,
    PartitionInfo,
    ReplicaRow,
    StreamInfo,
    TopicChange,
    TopicSummary,
    UpstreamRow,
)
from streamrep.errors import AlreadyExists, Conflict, InvalidArgument, NotFound, PermissionDenied, StreamrepError
from streamrep.model import network
from streamrep.model import replication as rules
from streamrep.model.ace import Identity, parse_ace, validate_ace
from streamrep.model.acls import Principals, one_way_replica
from streamrep.model.catalog import CLUSTER_ACE_KEY, CLUSTER_KIND, GATEWAYS_KIND, STREAM_KIND, ClusterAce, StreamEntry
from streamrep.model.failover import FailoverRecord, FailoverState
from streamrep.model.paths import StreamPath, validate_cluster_name, validate_topic_name
from streamrep.model.replication import ReplicaLink, UpstreamLink
from streamrep.model.stream import StreamMeta, validate_partition_count
from streamrep.store.base import Store

# What the replication layer finds for one replica, given (source path, source entry, replica path,
# replica entry): (error, why no gateway is live), None where all is well.
ReplicaHealth = Callable[[StreamPath, StreamEntry, StreamPath, StreamEntry], tuple[str | None, str | None]]
# Any one of these lets a caller see a stream's topics with their offsets and message counts.
TOPIC_READ_PERMS = ("consumeperm", "produceperm", "topicperm")

__all__ = ["ReplicaHealth", "StreamAdmin", "TOPIC_READ_PERMS", "now_ms"]


class StreamAdmin:
    """Stream, topic, replica, upstream and gateway administration for one identity.

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
        # The unchecked catalog the engine uses, bound to who is calling (``store`` refuses an
        # identity that a cluster does not authenticate, as every call here does).
        self.catalog = Catalog(self.clusters, guard=self.caller)

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

    # -- helpers -------------------------------------------------------------------
    def path(self, text: str | StreamPath) -> StreamPath:
        """Parse a stream path against the default cluster."""
        return self.catalog.path(text)

    def store(self, path: StreamPath) -> Store:
        """The store of ``path``'s cluster (acting as someone it does not authenticate is refused)."""
        return self.catalog.store(path)

    def entry(self, path: str | StreamPath) -> StreamEntry:
        """The catalog entry of a stream, or NotFound."""
        return self.catalog.entry(path)

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

    def _update(self, sp: StreamPath, change: Callable[[StreamEntry], StreamEntry]) -> StreamEntry:
        """Atomically change an existing stream's entry."""
        result = self.catalog.update(sp, change)
        assert result is not None  # ``change`` never deletes
        return result

    # -- streams -------------------------------------------------------------------
    def create_stream(
        self,
        path: str,
        copymetafrom: str | None = None,
        autosetup_from: str | None = None,
        topicnaming: str | None = None,
        **settings: Any,
    ) -> StreamEntry:
        """``stream create``. With ``copymetafrom`` the metadata (settings and ACEs) is copied
        from that stream, on any cluster; explicit ``settings`` still win. The topic naming is
        not copied: it belongs to the cluster the stream is in.

        :param topicnaming: on a Kafka cluster, how the stream's topics are named there
            (``model/naming.py``); refused on an embedded cluster.

        :param autosetup_from: the source's UUID when an autosetup creates this stream (it marks
            the stream as that autosetup's until it finishes; see ``replication.setup``).
        """
        sp = self.path(path)
        self._refuse_gateway_principal(sp.cluster, f"creating stream {sp}")
        creator = self.caller(sp.cluster).user
        if copymetafrom is not None:
            meta = self.entry(copymetafrom).meta.edited(**settings)
        else:
            meta = StreamMeta.for_creator(creator, **settings)
        entry = StreamEntry(
            uuid=str(uuid.uuid4()),
            path=sp.path,
            creator=creator,
            created=now_ms(),
            meta=meta,
            autosetup_from=autosetup_from,
            naming=topicnaming or None,
        )
        store = self.store(sp)
        others = {path: doc.get("naming") for path, doc in store.catalog_list(STREAM_KIND).items()}
        store.check_naming(sp.path, entry.naming, others)

        def create(doc: dict | None) -> dict:
            if doc is not None:
                raise AlreadyExists(f"stream {sp} already exists")
            return entry.to_dict()

        store.catalog_update(STREAM_KIND, sp.path, create)
        return entry

    def edit_stream(self, path: str, **settings: Any) -> StreamEntry:
        """``stream edit``: change settings or ACEs; needs adminperm."""
        sp = self.path(path)

        def edit(entry: StreamEntry) -> StreamEntry:
            self.require(entry, sp, "adminperm")
            return entry.with_changes(meta=entry.meta.edited(**settings))

        return self._update(sp, edit)

    def set_failover(
        self, path: str | StreamPath, record: FailoverRecord | None, only_state: FailoverState | None = None
    ) -> StreamEntry:
        """Record where a failover or failback left a stream (``model/failover.py``); needs
        adminperm. Used by ``replication.failover``, which holds the procedure.

        :param only_state: change it only while the stream's record is in this state (in the same
            atomic update), so a step that someone else completed meanwhile is not undone.
        """
        sp = self.path(path)

        def apply(entry: StreamEntry) -> StreamEntry:
            self.require(entry, sp, "adminperm")
            current = entry.failover.state if entry.failover is not None else None
            if only_state is not None and current != only_state:
                return entry
            return entry.with_changes(failover=record)

        return self._update(sp, apply)

    def delete_stream(self, path: str) -> None:
        """``stream delete``: the stream, its topics and messages; needs adminperm."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require(entry, sp, "adminperm")
        self.store(sp).drop_stream(entry.uuid)

        def delete(current: StreamEntry) -> None:
            if current.uuid != entry.uuid:  # recreated meanwhile: not ours to delete
                raise NotFound(f"stream {sp} was replaced while being deleted")
            return None

        self.catalog.update(sp, delete)

    def list_streams(self, cluster: str | None = None) -> list[StreamEntry]:
        """Every stream of ``cluster`` (the default cluster if None)."""
        return self.catalog.list_streams(cluster)

    def stream_info(self, path: str) -> StreamInfo:
        """``stream info``: metadata, identity and topic count."""
        sp = self.path(path)
        entry = self.entry(sp)
        topics = self.store(sp).topics(entry.uuid)
        return StreamInfo(
            path=sp,
            uuid=entry.uuid,
            creator=entry.creator,
            created=entry.created,
            meta=entry.meta,
            topics=len(topics),
            partitions=sum(topics.values()),
            replicas=len(entry.replicas),
            upstreams=len(entry.upstreams),
            failover=entry.failover,
        )

    # -- topics --------------------------------------------------------------------
    def create_topic(self, path: str, topic: str, partitions: int | None = None) -> TopicChange:
        """``stream topic create``; needs topicperm. Partitions default to the stream's."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require(entry, sp, "topicperm")
        self._require_own_topics(sp, entry, "create")
        count = validate_partition_count(partitions if partitions is not None else entry.meta.defaultpartitions)
        self.catalog.check_new_topic(sp, entry, validate_topic_name(topic))
        try:
            self.store(sp).create_topic(entry.uuid, validate_topic_name(topic), count)
        except AlreadyExists:
            raise AlreadyExists(f"topic {sp}:{topic} already exists") from None
        return TopicChange(sp, topic, count)

    def edit_topic(self, path: str, topic: str, partitions: int) -> TopicChange:
        """``stream topic edit -partitions N``: add partitions; needs topicperm."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require(entry, sp, "topicperm")
        self._require_own_topics(sp, entry, "add partitions to")
        try:
            self.store(sp).add_partitions(entry.uuid, validate_topic_name(topic), validate_partition_count(partitions))
        except NotFound:
            raise NotFound(f"topic {sp}:{topic} does not exist") from None
        return TopicChange(sp, topic, partitions)

    def delete_topic(self, path: str, topic: str) -> None:
        """``stream topic delete``; needs topicperm."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require(entry, sp, "topicperm")
        self._require_own_topics(sp, entry, "delete")
        try:
            self.store(sp).delete_topic(entry.uuid, validate_topic_name(topic))
        except NotFound:
            raise NotFound(f"topic {sp}:{topic} does not exist") from None

    @staticmethod
    def _require_own_topics(sp: StreamPath, entry: StreamEntry, action: str) -> None:
        """A one-way replica's topics follow its source's, made by its gateways: nobody else may
        change them (on Kafka the broker refuses it too: ``model/acls.py``)."""
        if one_way_replica(entry):
            upstreams = ", ".join(u.path for u in entry.upstreams)
            raise PermissionDenied(
                f"cannot {action} a topic of stream {sp}: it is a read-only replica of {upstreams}, "
                "whose topics only its gateways create and change (change them on the source)"
            )

    def list_topics(self, path: str) -> list[TopicSummary]:
        """``stream topic list``: each topic with its partition count and message count; needs
        one of consumeperm, produceperm or topicperm (the counts describe the data)."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require_any(entry, sp, *TOPIC_READ_PERMS)
        store = self.store(sp)
        result = []
        for topic, count in store.topics(entry.uuid).items():
            store.retain(entry.uuid, topic, entry.meta.ttl, force=True)  # count what a consumer can read
            bounds = [store.offsets(entry.uuid, topic, p) for p in range(count)]
            result.append(
                TopicSummary(
                    topic, count, sum(end - start for start, end in bounds), store.native_topic(entry.uuid, topic)
                )
            )
        return result

    def topic_info(self, path: str, topic: str) -> list[PartitionInfo]:
        """``stream topic info``: per partition, the first and last offsets held; needs one of
        consumeperm, produceperm or topicperm."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require_any(entry, sp, *TOPIC_READ_PERMS)
        store = self.store(sp)
        count = store.topics(entry.uuid).get(validate_topic_name(topic))
        if count is None:
            raise NotFound(f"topic {sp}:{topic} does not exist")
        store.retain(entry.uuid, topic, entry.meta.ttl, force=True)  # the first offset a consumer gets
        info = []
        for p in range(count):
            start, end = store.offsets(entry.uuid, topic, p)
            info.append(PartitionInfo(topic, p, start, end - 1, end - start, store.native_topic(entry.uuid, topic)))
        return info

    # -- replicas (kept on the source) ---------------------------------------------
    def network_options(
        self,
        path: str | StreamPath,
        replica: str | StreamPath,
        throttle: Any = None,
        networkencryption: Any = None,
        networkcompression: Any = None,
        maxbytespersec: Any = None,
    ) -> network.NetworkOptions:
        """The network options of a replica of ``path`` at ``replica``, validated
        (``model/network.py``): ``throttle``, ``networkencryption``, ``networkcompression`` and
        ``maxbytespersec``, None taking the defaults.

        :raises InvalidArgument: a bad value, or encryption that a gateway connection to the
            source or the replica's cluster (a Kafka cluster without TLS) could not give.
        """
        options = network.NetworkOptions(
            throttle=network.parse_flag("throttle", throttle),
            networkencryption=network.parse_flag("networkencryption", networkencryption),
            networkcompression=network.parse_network_compression(networkcompression),
            maxbytespersec=network.parse_max_bytes_per_sec(maxbytespersec),
        )
        if options.networkencryption:
            src, dst = self.path(path), self.path(replica)
            network.check_encryption(self.clusters.get(src.cluster), self.clusters.get(dst.cluster))
        return options

    def add_replica(
        self,
        path: str,
        replica: str,
        paused: bool = False,
        synchronous: bool = False,
        throttle: Any = None,
        networkencryption: Any = None,
        networkcompression: Any = None,
        maxbytespersec: Any = None,
    ) -> ReplicaLink:
        """``stream replica add``: register ``replica`` on the source; needs adminperm and copyperm
        on the source. The replica stream must exist (create it with -copymetafrom); the link
        records its UUID, so a stream created later at that path is not this replica.

        :param throttle: MapR's ``-throttle`` (default false): the gateways back off while the
            replica's cluster is under load (``replication/throttle.py``).
        :param networkencryption: MapR's ``-networkencryption`` (default false): the gateway's
            connections to both clusters must be TLS (``network_options``).
        :param networkcompression: MapR's ``-networkcompression`` (default lz4): the codec the
            gateway writes the replica with on Kafka.
        :param maxbytespersec: streamrep's limit on the bytes a second replicated into the
            replica, shared by all its gateways (default 0: none; ``model/network.py``).
        """
        src, dst = self.path(path), self.path(replica)
        options = self.network_options(src, dst, throttle, networkencryption, networkcompression, maxbytespersec)
        dst_entry = self.entry(dst)  # must exist
        link = ReplicaLink(
            path=str(dst),
            paused=paused,
            synchronous=synchronous,
            added=now_ms(),
            uuid=dst_entry.uuid,
            **options.to_dict(),
        )

        def add(entry: StreamEntry) -> StreamEntry:
            self.require(entry, src, "adminperm", "copyperm")
            rules.check_replica_add(src, dst, list(entry.replicas), entry.uuid, dst_entry.uuid)
            return entry.with_changes(replicas=entry.replicas + (link,))

        self._update(src, add)
        return link

    def edit_replica(
        self, path: str, replica: str, newreplica: str | None = None, synchronous: Any = None, **options: Any
    ) -> ReplicaLink:
        """``stream replica edit``: change a replica link in place; needs adminperm and copyperm on
        the source, as ``replica add``. Only what is given changes (None: unchanged).

        :param newreplica: the replica's new path after a rename or move (a cluster registered
            under a new name): the stream there must be the replica's own (its UUID). The
            source's upstream link to the same stream (multi-master) follows it.
        :param synchronous: MapR's ``-synchronous``, true or false.
        :param options: the network options ``replica add`` takes (``network.link_option_names``),
            checked as it checks them.
        :return: the link after the change.
        """
        src, dst = self.path(path), self.path(replica)
        names = network.link_option_names()
        unknown = sorted(set(options) - set(names))
        if unknown:
            raise InvalidArgument(f"stream replica edit has no option {', '.join(unknown)}")
        given = {name: value for name, value in options.items() if value is not None}
        sync = None if synchronous is None else network.parse_flag("synchronous", synchronous)
        new = self.path(newreplica) if newreplica is not None else None
        if new is None and sync is None and not given:
            raise InvalidArgument(
                f"stream replica edit needs one of -newreplica, -synchronous, {', '.join('-' + n for n in names)}"
            )
        source = self.entry(src)
        self.require(source, src, "adminperm", "copyperm")
        current = rules.require_link(source.replicas, dst, src, "replica")
        new_entry = self.entry(new) if new is not None else None
        # Checked as replica add checks them, with the link's own values for those not given.
        checked = self.network_options(src, new or dst, **{n: getattr(current, n) for n in names} | given)
        changes: dict[str, Any] = {name: getattr(checked, name) for name in given}
        if sync is not None:
            changes["synchronous"] = sync

        def edit(entry: StreamEntry) -> StreamEntry:
            self.require(entry, src, "adminperm", "copyperm")
            link = rules.require_link(entry.replicas, dst, src, "replica")
            upstreams = entry.upstreams
            if new is not None and new_entry is not None:
                rules.check_new_replica_path(src, link, entry.replicas, new, new_entry.uuid, new_entry.created)
                upstreams = tuple(rules.moved_upstream(u, dst, new, new_entry.uuid) for u in upstreams)
            edited = rules.edited_link(link, new, new_entry.uuid if new_entry is not None else None, **changes)
            replicas = tuple(edited if r is link else r for r in entry.replicas)
            return entry.with_changes(replicas=replicas, upstreams=upstreams)

        result = self._update(src, edit)
        return rules.require_link(result.replicas, new or dst, src, "replica")

    def replica_links(self, path: str) -> list[ReplicaLink]:
        return self.catalog.replica_links(path)

    def _change_replica(
        self,
        path: str,
        replica: str,
        change: Callable[[ReplicaLink], ReplicaLink | None],
        check: Callable[[StreamPath, StreamEntry, StreamPath], None] | None = None,
    ) -> None:
        src, dst = self.path(path), self.path(replica)

        def apply(entry: StreamEntry) -> StreamEntry:
            self.require(entry, src, "adminperm")
            link = rules.require_link(entry.replicas, dst, src, "replica")
            if check is not None:
                check(src, entry, dst)  # inside the update: no failover starts in between
            new = change(link)
            replicas = tuple(new if r is link else r for r in entry.replicas if new is not None or r is not link)
            return entry.with_changes(replicas=replicas)

        self.catalog.update(src, apply)

    def pause_replica(self, path: str, replica: str) -> None:
        """``stream replica pause``: stop replicating to ``replica`` until resumed."""
        self._change_replica(path, replica, lambda link: link.with_changes(paused=True))

    def resume_replica(self, path: str, replica: str) -> None:
        """``stream replica resume``: let ``replica`` flow again. Resuming a replica that an
        autosetup of this source created is that autosetup's last step: it finishes it."""
        self._change_replica(path, replica, lambda link: link.with_changes(paused=False))
        self._finish_autosetup(self.path(path), self.path(replica))

    def _finish_autosetup(self, src: StreamPath, dst: StreamPath) -> None:
        source_uuid = self.entry(src).uuid

        def finish(entry: StreamEntry) -> StreamEntry:
            if entry.autosetup_from != source_uuid:
                return entry
            return entry.with_changes(autosetup_from=None)

        try:
            if self.entry(dst).autosetup_from == source_uuid:  # read first: most resumes write nothing
                self._update(dst, finish)
        except NotFound:
            pass  # a replica that is gone has no autosetup to finish

    def remove_replica(self, path: str, replica: str) -> None:
        """``stream replica remove``: stop replicating to ``replica`` for good. Refused while a
        failover to it has fenced the source: ``-abort`` restores both halves of the link, and
        would find only the replica's."""
        self._change_replica(path, replica, lambda link: None, check=self._not_fenced_for)

    @staticmethod
    def _not_fenced_for(src: StreamPath, entry: StreamEntry, dst: StreamPath) -> None:
        record = entry.failover
        if record is not None and record.state == FailoverState.FENCED and record.peer == str(dst):
            raise Conflict(
                f"stream {src} is {record.describe()}: finish the failover ('stream replica failover -path "
                f"{src} -replica {dst}') or undo it (-abort true) before removing the replica"
            )

    # -- upstreams (kept on the replica) -------------------------------------------
    def add_upstream(self, path: str, upstream: str) -> UpstreamLink:
        """``stream upstream add``: the replica's owner agrees to receive from ``upstream``;
        needs adminperm on the replica. Refuses an upstream sharing topic names with another.
        The link records the upstream's UUID: a stream created later at that path is not it."""
        dst, src = self.path(path), self.path(upstream)
        src_entry = self.entry(src)  # must exist
        topics_of_new = self.catalog.topics_of(src)
        link = UpstreamLink(path=str(src), added=now_ms(), uuid=src_entry.uuid)

        def add(entry: StreamEntry) -> StreamEntry:
            self.require(entry, dst, "adminperm")
            others = {u.path: self.catalog.topics_of(self.path(u.path)) for u in entry.upstreams}
            sharing = [path for path, topics in others.items() if topics & topics_of_new]
            lineages = {path: self.catalog.lineage(self.path(path)) for path in [str(src), *sharing]}
            rules.check_upstream_add(
                dst, src, list(entry.upstreams), others, topics_of_new, entry.uuid, src_entry.uuid, lineages
            )
            return entry.with_changes(upstreams=entry.upstreams + (link,))

        self._update(dst, add)
        return link

    def upstream_links(self, path: str) -> list[UpstreamLink]:
        return self.catalog.upstream_links(path)

    def list_upstreams(self, path: str) -> list[UpstreamRow]:
        """``stream upstream list``: each upstream, its place in the list (from 1) and the UUID
        of the stream agreed to (None for a link written before links recorded UUIDs); needs
        adminperm on the stream, as MapR's."""
        sp = self.path(path)
        entry = self.entry(sp)
        self.require(entry, sp, "adminperm")
        return [
            UpstreamRow(self.path(link.path), link.path, idx, link.uuid) for idx, link in enumerate(entry.upstreams, 1)
        ]

    def remove_upstream(self, path: str, upstream: str) -> None:
        """``stream upstream remove``: withdraw the agreement; replication from it stops."""
        dst, src = self.path(path), self.path(upstream)

        def remove(entry: StreamEntry) -> StreamEntry:
            self.require(entry, dst, "adminperm")
            link = rules.require_link(entry.upstreams, src, dst, "upstream")
            return entry.with_changes(upstreams=tuple(u for u in entry.upstreams if u is not link))

        self._update(dst, remove)

    def list_replicas(self, path: str, health: ReplicaHealth | None = None) -> list[ReplicaRow]:
        """``stream replica list``: each replica, with the agreement checked live (a replica that does not list the source is
        waiting for its upstream; a link whose stream was deleted and recreated at its path is an
        error naming both UUIDs).

        :param health: what the replication layer finds for one replica, given the source and
            replica paths and entries: ``(error, no_gateway)``, e.g. messages lost to the source's
            retention, and why no gateway is live (None when all is well).
        """
        src = self.path(path)
        source_entry = self.entry(src)
        self.require(source_entry, src, "adminperm")  # as MapR's stream replica list
        result: list[ReplicaRow] = []
        for idx, link in enumerate(source_entry.replicas, 1):
            dst = self.path(link.path)
            replica_entry, no_gateway = None, None
            try:
                replica_entry = self.entry(dst)
                found = rules.agreement(src, source_entry, dst, replica_entry)
                agreed, error = found.agreed, found.reason if found.broken else None
            except StreamrepError as err:  # gone, or its cluster unreadable: only this row says so
                agreed, error = False, str(err)
            if health is not None and replica_entry is not None and error is None:
                error, no_gateway = health(src, source_entry, dst, replica_entry)
            state, error = rules.effective_state(link, agreed, error, no_gateway)
            result.append(
                ReplicaRow(
                    path=dst,
                    replica_path=link.path,
                    state=state,
                    paused=link.paused,
                    throttle=link.throttle,
                    idx=idx,
                    networkencryption=link.networkencryption,
                    synchronous=link.synchronous,
                    networkcompression=link.networkcompression,
                    maxbytespersec=link.maxbytespersec,
                    uuid=replica_entry.uuid if replica_entry is not None else None,
                    errors=error,
                )
            )
        return result

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

        def claim_if_new(doc: dict | None) -> dict | None:
            return doc if doc is not None or store.catalog_list(STREAM_KIND) else ace.to_dict()

        store.catalog_update(CLUSTER_KIND, CLUSTER_ACE_KEY, claim_if_new)
        return info

    def cluster_ace(self, cluster: str) -> ClusterAce | None:
        """The cluster's administration ACE; None for a cluster registered before cluster ACEs
        existed (or through ``Clusters.add``, which does not know the caller)."""
        return self.catalog.cluster_ace(cluster)

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

        def change(doc: dict | None) -> dict:
            old = None if doc is None else ClusterAce.from_dict(doc)
            self._check_cluster_ace(old, name)  # inside the update: no change slips in between
            if old is None:
                return ClusterAce(text, self.caller(name).user, now_ms()).to_dict()
            return ClusterAce(text, old.creator, old.created).to_dict()

        self.clusters.store(name).catalog_update(CLUSTER_KIND, CLUSTER_ACE_KEY, change)
        return self.get_cluster_ace(name)

    # -- gateways (kept on the source cluster) -------------------------------------
    def _source_cluster(self, cluster: str | None) -> str:
        return self.catalog.source_cluster(cluster)

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
        return self.catalog.gateways(cluster)

    def get_gateways(self, dstcluster: str, cluster: str | None = None) -> list[str]:
        """``cluster gateway get``: the gateways of one destination cluster."""
        return self.catalog.get_gateways(dstcluster, cluster)

    def delete_gateways(self, dstcluster: str, cluster: str | None = None) -> None:
        """``cluster gateway delete``: forget the gateways of one destination cluster; needs
        adminperm on the source cluster."""
        source = self._source_cluster(cluster)
        self.require_cluster_admin(source)

        def delete(doc: dict | None) -> None:
            if doc is None:
                raise NotFound(f"cluster {source} lists no gateways for destination cluster {dstcluster}")
            return None

        self.clusters.store(source).catalog_update(GATEWAYS_KIND, validate_cluster_name(dstcluster), delete)
