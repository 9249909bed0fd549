"""The store interface: what every cluster backend (embedded SQLite, Kafka) provides.

Streams are identified in the store by their UUID, so a stream deleted and created again
under the same path never sees the old stream's data.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from streamrep.errors import InvalidArgument, RetryNow, StreamrepError
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.message import Message
from streamrep.model.offsetsyncs import PRUNE_EVERY

CatalogDoc = dict[str, Any]
STORE_ID_KIND = "store"  # the catalog kind of the default ``Store.store_id``

# Without ``force``, retention runs at most this often per topic and store object, like a log cleaner.
RETENTION_CHECK_SECONDS = 1.0


class SpanRead(NamedTuple):
    """One partition's part of ``Store.read_spans``: ``Store.read_span``'s arguments."""

    stream: str
    topic: str
    partition: int
    start: int
    max_messages: int
    readable: int | None = None


class ReplicaApply(NamedTuple):
    """One replica's part of ``Store.apply_many``: ``Store.apply``'s arguments for it."""

    stream: str
    messages: Sequence[Message]
    marks: Mapping[str, int]
    expect: Mapping[str, int | None]
    syncs: Sequence[tuple[int, int]] = ()
    compression: str | None = None  # the Kafka codec of the replica's writes (``model/network.py``)


class PartitionApplies(NamedTuple):
    """One source partition's part of ``Store.apply_partitions``: ``Store.apply_many``'s arguments."""

    topic: str
    partition: int
    source: str
    applies: Sequence[ReplicaApply]


ApplyResult = int | StreamrepError | RetryNow  # the first offset assigned, or why the apply wrote nothing


class Store(ABC):
    """One cluster's storage: the catalog, topics and partitions, messages, cursors and marks.

    A backend writes the 19 abstract methods, by concern:

    - catalog: ``catalog_list``, ``catalog_update``;
    - topics: ``create_topic``, ``add_partitions``, ``delete_topic``, ``topics``, ``drop_stream``;
    - messages: ``append``, ``read``, ``offsets``, ``purge_before``, ``range_stats``;
    - consumer-group cursors: ``commit_cursors``, ``cursors``, ``groups``;
    - replication marks: ``marks``, ``apply_partitions``, ``drop_marks``, ``offset_syncs``.

    Everything else is built here from those. A backend may override, for speed or for its
    network: ``store_id``, ``catalog_get``, ``check_naming``, ``native_topic``, ``read_span``,
    ``read_spans``, ``offsets_many``, ``written_ends``, ``active_groups``, ``counts_cheaply``,
    ``offset_syncs_many``, ``prepare_read``, ``await_messages``, ``prepare_apply``, ``close``.
    ``apply``, ``apply_many``, ``retain`` and ``prune_due`` are the rules every backend shares:
    not overridden. ``tests/store/test_conformance.py``, run on every backend, is the contract.
    """

    read_only = False  # a reader that must change nothing (the page): retention is left to the writers

    def __init__(self, cluster: str):
        self.cluster = cluster
        self._retained: dict[tuple[str, str], float] = {}  # (stream, topic) -> monotonic time of the last run
        self._ttls: tuple[float, dict[str, int]] | None = None  # when read, and every stream's ttl by UUID
        self._syncs_written: dict[tuple[str, str], int] = {}  # (stream, source) -> runs written since a prune

    # -- catalog -------------------------------------------------------------------
    def store_id(self) -> str:
        """The store's identity: written once into the store, the same under any name or path.
        This default keeps it in the catalog (document ``store``/``id``), created by the first caller."""
        doc = self.catalog_get(STORE_ID_KIND, "id") or self.catalog_update(
            STORE_ID_KIND, "id", lambda cur: cur or {"store_id": str(uuid.uuid4())}
        )
        if doc is None:  # the change never deletes: only a broken catalog_update gets here
            raise StreamrepError(f"cluster {self.cluster}: the store's identity could not be written")
        return str(doc["store_id"])

    def catalog_get(self, kind: str, key: str) -> CatalogDoc | None:
        """The catalog document ``kind``/``key``, or None. This default lists the kind."""
        return self.catalog_list(kind).get(key)

    @abstractmethod
    def catalog_list(self, kind: str) -> dict[str, CatalogDoc]:
        """Every document of ``kind``, by key."""

    @abstractmethod
    def catalog_update(
        self, kind: str, key: str, change: Callable[[CatalogDoc | None], CatalogDoc | None]
    ) -> CatalogDoc | None:
        """Atomically replace a document by ``change(current)``; a None result deletes it.

        ``change`` may raise to abort with nothing written. It may be called more than once
        (optimistic backends retry on a concurrent write), so it must be pure.
        """

    def check_naming(self, path: str, spec: str | None, others: Mapping[str, str | None]) -> None:
        """Refuse a stream at ``path`` with topic naming ``spec`` (``stream create -topicnaming``)
        if this store cannot name topics that way, or if they would overlap those of ``others``
        (path -> spec of the other streams). Only Kafka clusters name topics."""
        if spec:
            raise InvalidArgument(f"-topicnaming applies only to kafka:// clusters; cluster {self.cluster} is embedded")

    def native_topic(self, stream: str, topic: str) -> str | None:
        """The name ``topic`` is kept under in the cluster, for users of its native tools (the
        Kafka topic on Kafka); None on the embedded store."""
        return None

    # -- topics --------------------------------------------------------------------
    @abstractmethod
    def create_topic(self, stream: str, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions; AlreadyExists if it is there."""

    @abstractmethod
    def add_partitions(self, stream: str, topic: str, partitions: int) -> None:
        """Grow ``topic`` to ``partitions`` partitions (never shrinks)."""

    @abstractmethod
    def delete_topic(self, stream: str, topic: str) -> None:
        """Delete ``topic``, its messages and its cursors; NotFound if it is not there."""

    @abstractmethod
    def topics(self, stream: str) -> dict[str, int]:
        """The topics of ``stream`` and their partition counts."""

    @abstractmethod
    def drop_stream(self, stream: str) -> None:
        """Delete every topic, message and cursor of ``stream`` (on Kafka, a stream that adopted
        existing topics leaves them in place; see ``model/naming.py``)."""

    # -- data ----------------------------------------------------------------------
    @abstractmethod
    def append(self, stream: str, topic: str, batches: Mapping[int, Sequence[Message]]) -> dict[int, int]:
        """Append messages atomically, all partitions at once, with gap-free offsets.

        :param batches: messages by partition; their partition/offset fields are ignored.
        :return: the first offset assigned in each partition.
        """

    @abstractmethod
    def read(self, stream: str, topic: str, partition: int, start: int, max_messages: int) -> list[Message]:
        """Up to ``max_messages`` messages from offset ``start`` on, in offset order."""

    def read_span(
        self, stream: str, topic: str, partition: int, start: int, max_messages: int, readable: int | None = None
    ) -> tuple[list[Message], int]:
        """Up to ``max_messages`` messages from offset ``start`` on, and the offset to read next:
        every message of the partition in ``[start, next)`` is in the list (offsets in between
        that hold no message, such as Kafka's transaction markers, are skipped).

        :param readable: the partition's end as ``offsets`` gave it to the caller a moment ago: a
            network store reads up to there without asking again (None: it asks).

        This default is for gap-free offsets: ``next`` follows the last message read, or, with
        none read, is ``start`` clamped to the oldest offset held (never past a message)."""
        messages = self.read(stream, topic, partition, start, max_messages)
        if messages:
            return messages, messages[-1].offset + 1
        return messages, max(start, self.offsets(stream, topic, partition)[0])

    def read_spans(self, spans: Sequence[SpanRead]) -> list[tuple[list[Message], int] | StreamrepError]:
        """``read_span`` of each span, in order; a span that cannot be read gets its error, and the
        others are still read. This default reads them one after another; a network store reads them
        all at once."""
        result: list[tuple[list[Message], int] | StreamrepError] = []
        for span in spans:
            try:
                result.append(self.read_span(*span))
            except StreamrepError as err:
                result.append(err)
        return result

    @abstractmethod
    def offsets(self, stream: str, topic: str, partition: int) -> tuple[int, int]:
        """``(start, end)``: the first offset still held and the next offset to be assigned."""

    def offsets_many(self, parts: Sequence[tuple[str, str, int]]) -> list[tuple[int, int] | StreamrepError]:
        """``offsets`` of each ``(stream, topic, partition)``, in order; a part that cannot be read
        gets its error, and the others are still answered. A network store asks for all at once."""
        result: list[tuple[int, int] | StreamrepError] = []
        for stream, topic, partition in parts:
            try:
                result.append(self.offsets(stream, topic, partition))
            except StreamrepError as err:
                result.append(err)
        return result

    def written_ends(self, parts: Sequence[tuple[str, str, int]]) -> list[int | StreamrepError]:
        """The end of what each partition's log holds, committed or not, in order. Where a commit is
        visible everywhere at once (this default) that is ``offsets``' end. On Kafka a committed
        transaction's records become readable in each partition when its marker arrives there,
        which may be after its offset syncs are readable in another: this end already counts them."""
        return [found if isinstance(found, StreamrepError) else found[1] for found in self.offsets_many(parts)]

    @abstractmethod
    def purge_before(self, stream: str, topic: str, timestamp: int) -> int:
        """Retention: drop each partition's oldest messages up to the first one at or after
        ``timestamp`` (ms). Offsets are never reused. Returns how many were dropped."""

    # Whether ``range_stats`` counts without reading every message (the embedded store's index).
    counts_cheaply = True

    @abstractmethod
    def range_stats(
        self, stream: str, topic: str, partition: int, start: int, stop: int | None = None
    ) -> tuple[int, int, int | None, int | None]:
        """From ``start`` to ``stop`` (None: the end): ``(messages, value bytes, oldest timestamp,
        newest timestamp)``."""

    def retain(self, stream: str, topic: str, ttl: int | None = None, force: bool = False) -> int:
        """Retention, the one routine every path runs: drop ``topic``'s messages older than the
        stream's ttl (seconds; 0 keeps them forever). Producers and replication run it after
        they write, and the reads that report offsets (topic info and list, consumers) before
        they read, so every view agrees on a partition's first offset. Replicas keep their own ttl.

        :param ttl: the stream's ttl if the caller has its entry; None reads it from the catalog.
        :param force: run now, even if it ran for this topic less than a second ago.
        :return: how many messages were dropped.
        """
        if self.read_only:
            return 0
        now = time.monotonic()
        last = self._retained.get((stream, topic))
        if not force and last is not None and now - last < RETENTION_CHECK_SECONDS:
            return 0
        self._retained[(stream, topic)] = now
        if ttl is None:
            if self._ttls is None or now - self._ttls[0] >= RETENTION_CHECK_SECONDS:  # one catalog read a second
                docs = self.catalog_list(STREAM_KIND).values()
                self._ttls = now, {doc["uuid"]: doc["meta"].get("ttl", 0) for doc in docs}
            ttl = self._ttls[1].get(stream, 0)
        if not ttl or ttl <= 0:
            return 0
        return self.purge_before(stream, topic, int(time.time() * 1000) - ttl * 1000)

    # -- consumer-group cursors ----------------------------------------------------
    @abstractmethod
    def commit_cursors(self, group: str, stream: str, topic: str, cursors: Mapping[int, int]) -> None:
        """Store the next offset to read for each partition of ``topic`` for ``group``."""

    @abstractmethod
    def cursors(self, group: str, stream: str, topic: str) -> dict[int, int]:
        """The committed cursors of ``group`` on ``topic``, by partition."""

    @abstractmethod
    def groups(self, stream: str) -> list[str]:
        """The consumer groups with a committed cursor on any topic of ``stream``, sorted."""

    def active_groups(self, groups: Sequence[str]) -> set[str]:
        """Those of ``groups`` that have live members now. Empty here: a streamrep consumer
        joins no group (it only commits cursors); Kafka's own consumers do."""
        return set()

    # -- replication marks (kept with the replica, written with its messages) ------
    @abstractmethod
    def marks(self, stream: str) -> dict[str, int]:
        """Every replication mark stored for ``stream`` (positions and origin marks)."""

    def apply(
        self,
        stream: str,
        topic: str,
        partition: int,
        messages: Sequence[Message],
        marks: Mapping[str, int],
        expect: Mapping[str, int | None],
        source: str = "",
        syncs: Sequence[tuple[int, int]] = (),
        compression: str | None = None,
    ) -> int:
        """The transactional apply: append ``messages`` to one partition and store ``marks``,
        all or nothing, only if the stored marks still equal ``expect`` (None: absent).
        Otherwise raise ``RetryNow`` and write nothing, so two gateways briefly owning one
        partition can never both apply a batch.

        :param source: the position key of the source partition the messages came from.
        :param syncs: ``(index in messages, source offset)`` pairs, in index order: each starts a
            run of consecutive source offsets, recorded as an offset sync for cursor translation.
            The same transaction prunes the syncs of ``source`` when ``prune_due`` says so, to
            what ``model.offsetsyncs.prune`` keeps.
        :param compression: the Kafka codec (``compression.type``) to write the messages with;
            None: the store's default. A store that sends nothing over a network ignores it.
        :return: the first offset assigned.
        """
        replica = ReplicaApply(stream, messages, marks, expect, syncs, compression)
        [result] = self.apply_many(topic, partition, [replica], source)
        if isinstance(result, int):
            return result
        raise result

    def apply_many(
        self, topic: str, partition: int, applies: Sequence[ReplicaApply], source: str = ""
    ) -> list[ApplyResult]:
        """``apply`` for several replicas of one source partition (a gateway's fan-out): each is
        all or nothing and checked against its own ``expect``; one whose marks moved gets its
        ``RetryNow`` in the result (one that fails otherwise, its error) and the others are still
        written.

        :param applies: one per replica stream, none twice.
        :param source: the position key of the source partition (``apply``).
        :return: per apply, in order, the first offset assigned or the error.
        """
        return self.apply_partitions([PartitionApplies(topic, partition, source, applies)])[0]

    @abstractmethod
    def apply_partitions(self, batches: Sequence[PartitionApplies]) -> list[list[ApplyResult]]:
        """``apply_many`` for several source partitions at once (a gateway's pass), the one apply a
        backend writes: every apply is its own all-or-nothing write, checked against its own
        ``expect`` (``apply`` says what it writes), with its result in the same place as in
        ``batches``. A backend may write several in one transaction, or overlap their round trips."""

    def prepare_read(self, stream: str, topic: str, partition: int, start: int) -> None:  # noqa: B027
        """Make ready a reader of one partition at ``start`` before its first ``read_span`` from
        there (a network store's consumer, connected and fetching), for the same reason as
        ``prepare_apply``. Optional."""

    def await_messages(self, timeout: float) -> bool | None:
        """Wait at most ``timeout`` seconds until a message arrives in a partition this store object reads
        (``read_spans``, ``prepare_read``), keeping it for the next read: True once one has, False if none
        did. None at once where the store cannot tell (nothing read yet, or no reader that waits): the
        caller then waits by its own clock. Optional."""
        return None

    def prepare_apply(self, stream: str, topic: str, partition: int, compression: str | None = None) -> None:  # noqa: B027
        """Make ready what ``apply`` into one partition of ``stream`` needs before its first batch
        (a network store's transactional writer, fenced and initialised), so that a gateway that
        has just taken its share applies its first messages as fast as the later ones. Optional:
        a store with nothing to make ready does nothing.

        :param compression: as ``apply``.
        """

    @abstractmethod
    def drop_marks(self, stream: str, marks: Mapping[str, int]) -> int:
        """Delete the marks of ``stream`` that still hold the given values (one that changed
        meanwhile is kept), all in one transaction. Returns how many were deleted."""

    @abstractmethod
    def offset_syncs(self, stream: str, source: str) -> list[tuple[int, int, int, int]]:
        """Recorded ``(source offset, replica partition, replica offset, run length)`` syncs, in
        source order, as ``model.offsetsyncs`` defines them (a run length of 0 is a blur mark).
        Bounded: pruned by the apply (``prune_due``)."""

    def offset_syncs_many(self, parts: Sequence[tuple[str, str]]) -> list[list[tuple[int, int, int, int]]]:
        """``offset_syncs`` of each ``(stream, source)``, in order: a network store reads them once
        for all (a gateway's pass checks every replica partition of its share)."""
        return [self.offset_syncs(stream, source) for stream, source in parts]

    def prune_due(self, stream: str, source: str, runs: int) -> bool:
        """Whether an apply writing ``runs`` new syncs of ``stream`` from ``source`` prunes them in
        its transaction: this store object's first apply of them, then every ``PRUNE_EVERY`` runs.
        So one writer keeps at most ``PRUNE_EVERY`` more rows than a prune leaves."""
        key = (stream, source)
        written = self._syncs_written.get(key)
        if written is not None and written + runs < PRUNE_EVERY:
            self._syncs_written[key] = written + runs
            return False
        self._syncs_written[key] = 0
        return True

    def close(self) -> None:  # noqa: B027 - optional: a store without connections has nothing to release
        """Release connections. The store may be used again afterwards (it reopens)."""
