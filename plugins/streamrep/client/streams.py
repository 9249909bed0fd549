"""The stream and topic commands of ``StreamAdmin``: ``stream create|edit|delete|list|info`` and
``stream topic create|edit|delete|list|info``, each checking the stream's ACEs for the caller.
"""

from __future__ import annotations

import uuid
from typing import Any

from streamrep.client.catalog import now_ms
from streamrep.client.permissions import Permissions
from streamrep.client.results import PartitionInfo, StreamInfo, TopicChange, TopicSummary
from streamrep.errors import AlreadyExists, NotFound, PermissionDenied
from streamrep.model.acls import one_way_replica
from streamrep.model.catalog import STREAM_KIND, StreamEntry
from streamrep.model.failover import FailoverRecord, FailoverState
from streamrep.model.paths import StreamPath, validate_topic_name
from streamrep.model.stream import StreamMeta, validate_partition_count
from streamrep.store.base import CatalogDoc

# Any one of these lets a caller see a stream's topics with their offsets and message counts.
TOPIC_READ_PERMS = ("consumeperm", "produceperm", "topicperm")


class StreamCommands(Permissions):
    """Streams and their topics."""

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

        def create(doc: CatalogDoc | None) -> CatalogDoc:
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

        self._catalog.update(sp, delete)

    def list_streams(self, cluster: str | None = None) -> list[StreamEntry]:
        """Every stream of ``cluster`` (the default cluster if None)."""
        return self._catalog.list_streams(cluster)

    def check_new_topic(self, sp: StreamPath, entry: StreamEntry, topic: str) -> None:
        """Refuse creating ``topic`` on the stream ``sp`` where the fan-in topic rule forbids it
        (``Catalog.check_new_topic``): before ``topic create``, or a producer's autocreate."""
        self._catalog.check_new_topic(sp, entry, topic)

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
        self.check_new_topic(sp, entry, validate_topic_name(topic))
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
