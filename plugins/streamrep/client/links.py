"""The link commands of ``StreamAdmin``: ``stream replica add|edit|remove|pause|resume|list`` (kept
on the source) and ``stream upstream add|remove|list`` (kept on the replica), and what the engine
reads and records about links: a stream's lineage, and a replica's state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamrep.client.catalog import now_ms
from streamrep.client.permissions import Permissions
from streamrep.client.results import ReplicaRow, UpstreamRow
from streamrep.errors import Conflict, InvalidArgument, NotFound, StreamrepError
from streamrep.model import network
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import FailoverState
from streamrep.model.fanin import Lineage
from streamrep.model.paths import StreamPath
from streamrep.model.replication import ReplicaLink, ReplicaState, UpstreamLink

# What the replication layer finds for one replica, given (source path, source entry, replica path,
# replica entry): (error, why no gateway is live), None where all is well.
ReplicaHealth = Callable[[StreamPath, StreamEntry, StreamPath, StreamEntry], tuple[str | None, str | None]]
# Whoever holds one of these on a source may record its replicas' states: its administrators
# (failover), copiers (copystream needs consumeperm or copyperm) and producers (a synchronous fallback).
STATE_RECORDER_PERMS = ("adminperm", "copyperm", "consumeperm", "produceperm")


class LinkCommands(Permissions):
    """Replica and upstream links."""

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

    def replica_links(self, path: str | StreamPath) -> list[ReplicaLink]:
        return list(self.entry(path).replicas)

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

        self._catalog.update(src, apply)

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
        topics_of_new = self._catalog.topics_of(src)
        link = UpstreamLink(path=str(src), added=now_ms(), uuid=src_entry.uuid)

        def add(entry: StreamEntry) -> StreamEntry:
            self.require(entry, dst, "adminperm")
            others = {u.path: self._catalog.topics_of(self.path(u.path)) for u in entry.upstreams}
            sharing = [path for path, topics in others.items() if topics & topics_of_new]
            lineages = {path: self._catalog.lineage(self.path(path)) for path in [str(src), *sharing]}
            rules.check_upstream_add(
                dst, src, list(entry.upstreams), others, topics_of_new, entry.uuid, src_entry.uuid, lineages
            )
            return entry.with_changes(upstreams=entry.upstreams + (link,))

        self._update(dst, add)
        return link

    def upstream_links(self, path: str | StreamPath) -> list[UpstreamLink]:
        return list(self.entry(path).upstreams)

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

    # -- what the engine reads and records ------------------------------------------------
    def lineage(self, path: StreamPath) -> Lineage:
        """The stream at ``path`` and every stream that feeds it through upstream links,
        transitively: UUID -> topic names (the fan-in topic rule's input)."""
        return self._catalog.lineage(path)

    def set_replica_state(
        self,
        path: str | StreamPath,
        replica: str | StreamPath,
        state: ReplicaState,
        error: str | None = None,
        only_from: ReplicaState | None = None,
    ) -> None:
        """Record a replica's state, as the replication layer observed it (gateways, copystream,
        a synchronous producer's fallback, failover). Whoever recorded it, the state is the
        engine's, so the check is wide: the caller holds one of ``STATE_RECORDER_PERMS`` on the
        source (checked in the same atomic update, no extra read), or may run the gateways of the
        replica's cluster (``require_gateway``: what a gateway was checked for when it started).

        :param only_from: change it only while the link is in this state (in the same atomic
            update), so a state someone else set meanwhile is kept.
        """
        src, dst = self.path(path), self.path(replica)

        def apply(entry: StreamEntry) -> StreamEntry:
            if not any(self.may(entry.meta, perm, src.cluster) for perm in STATE_RECORDER_PERMS):
                self.require_gateway(dst.cluster)
            link = rules.require_link(entry.replicas, dst, src, "replica")
            if only_from is not None and link.state is not only_from:
                return entry
            if link.state is ReplicaState.FAILED_OVER and only_from is not ReplicaState.FAILED_OVER:
                return entry  # a failover's own record: only failback (only_from=FAILED_OVER) changes it
            new = link.with_changes(state=state, error=error)
            return entry.with_changes(replicas=tuple(new if r is link else r for r in entry.replicas))

        self._update(src, apply)
