"""The Kafka store: a Kafka-API cluster (Apache Kafka, HPE Data Fabric's Kafka API, Redpanda) behind
the store interface, over confluent-kafka.

- **Topics.** Each stream's topics are Kafka topics named by the stream's naming policy
  (``model/naming.py``), so existing topics can be adopted as they are.
- **Catalog, marks, offset syncs** live in the cluster, in three single-partition compacted topics
  ``_streamrep[.<namespace>].catalog|marks|syncs``. Every store object folds them into memory and
  catches up to the last stable offset before it answers, reading committed data only.
- **Compare-and-set by fencing.** Every write that must not be lost to a concurrent writer uses a
  Kafka transaction whose transactional id names the thing written: one per catalog document, and
  one per replica partition for the transactional apply (the marks of a partition are written only
  with its messages). ``init_transactions`` fences any other writer of that id, so the current state
  read after it cannot change until this writer commits, and a zombie's commit fails. Two admins
  editing one catalog entry, or two gateways applying to one partition, therefore never overwrite
  each other: the loser retries from the new state.
- **Offsets are Kafka's.** The end of a partition is its last stable offset (read_committed), and
  offsets may have gaps (transaction markers): ``read_span`` says where the next read starts.
- Messages keep keys, headers, timestamps and partitions; consumer-group cursors are Kafka's own
  committed group offsets (group ``<namespace>.<group>`` under a namespace).

Client settings (security.protocol, SASL, SSL files) pass through to confluent-kafka unchanged;
``streamrep.namespace`` is streamrep's own: it lets several installations share one Kafka cluster.

**Installations on shared brokers own their topics** (issue 18: a namespace-less installation created
``/prod/apps/clicks`` and read a ``prod`` stream's topic). A store finds the other installations from
the topic list (their ``_streamrep[.<ns>].catalog``) and folds their catalogs read-only into claims:
each stream's naming, and each namespace's prefix ``<ns>.`` (every topic under it is that
installation's, but for a namespace nested in it). Of a stream and a claim that could both name a
Kafka topic, the higher rank holds it (``naming.rank``: a naming that creates its topics outranks an
adopting one, a narrower prefix a wider one; the namespace prefix outranks both).

- ``stream create`` refuses a naming that would share or take another installation's topics; it
  allows only an adopting naming wider than the other's (``cluster`` beside other installations),
  and a creating naming over an adopting one. The default and ``hpe`` namings never adopt: a Kafka
  topic already in their range is refused, so nothing existing changes hands on creation.
- ``topics``, reads, writes, cursors and ``drop_stream`` skip topics another installation holds, so
  a ``cluster`` stream never sees them (nor anyone's internal topics); ``topic create`` refuses them.
- Cost: creating reads the others anew (a topic list and one offset request per installation). Other
  calls use what the store last read, and read again only for a Kafka topic name it has not judged:
  a judgement holds while the topic exists, since the rules above keep it from changing hands.
- With ACLs, an installation may be refused another's catalog: that installation's streams are then
  unknown here (its namespace prefix still counts, from the topic list) and the broker's ACLs guard
  its topics; streamrep never fails for it. Two installations blind to each other, or creating at the
  same moment, can still both name a topic: the rank decides, and an exact tie gives it to neither.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from streamrep.errors import (
    AlreadyExists,
    Conflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    RetryNow,
    StreamrepError,
    Unavailable,
)
from streamrep.model.catalog import STREAM_KIND
from streamrep.model.message import Message
from streamrep.model.naming import DEFAULT_NAMING, INTERNAL_PREFIX, PrefixNaming, TopicNaming, naming_for
from streamrep.model.replication import mark_partition
from streamrep.store.base import CatalogDoc, Store
from streamrep.store.kafka_acls import KafkaAcls

NAMESPACE_SETTING = "streamrep.namespace"
TIMEOUT_SECONDS = 15.0  # one admin call, flush or commit; a cluster that is down fails within it
CATALOG_RETRIES = 30
# A writer killed inside a transaction holds back the last stable offset of every topic it wrote (every
# reader of the catalog or marks) until Kafka aborts it: after this timeout, at the broker's next
# check (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default).
TRANSACTION_TIMEOUT_MS = 10000
VISIBLE_WITHIN_SECONDS = TRANSACTION_TIMEOUT_MS / 1000 + 10.0 + 10.0  # a committed write waits out a dead one
MAX_TRANSACTIONAL_PRODUCERS = 64  # each holds a connection: the least recently used are closed
MAX_READERS = 16
_STORE_KIND = "store"
# Compacted, with small segments: the cleaner only compacts closed segments, and every new store object
# reads these topics from the start, so they must stay near the size of their live keys.
INTERNAL_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": "600000",
    "segment.bytes": str(16 << 20),
    "min.cleanable.dirty.ratio": "0.1",
}
CLIENT_LOG = logging.getLogger("streamrep.kafka.client")
if CLIENT_LOG.level == logging.NOTSET:
    CLIENT_LOG.setLevel(logging.CRITICAL)  # fencing and coordinator retries are routine; real failures raise

_USER_ERRORS = {
    KafkaError.INVALID_TIMESTAMP: InvalidArgument,
    KafkaError.MSG_SIZE_TOO_LARGE: LimitExceeded,
    KafkaError.POLICY_VIOLATION: InvalidArgument,
    KafkaError.TOPIC_EXCEPTION: InvalidArgument,
    KafkaError.TOPIC_AUTHORIZATION_FAILED: PermissionDenied,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: PermissionDenied,
    KafkaError.GROUP_AUTHORIZATION_FAILED: PermissionDenied,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: PermissionDenied,
}
# A stream's ttl is enforced by ``retain()`` on message timestamps; Kafka's default retention (7 days,
# also by timestamp) would silently drop older messages, such as a replicated or copied backlog.
_STREAM_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1"}
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
# Abortable commit errors of a writer being fenced: Kafka's coordinator (4.x, transaction version 1)
# answers EndTxn with UNKNOWN_SERVER_ERROR when it arrives while a new writer's InitProducerId is
# fencing the epoch (IllegalStateException "... pending state PREPARE_EPOCH_FENCE" in the broker
# log). Nothing was committed: the new writer's init aborts the transaction, so a retry is safe.
_FENCING_RACE = {KafkaError.UNKNOWN, KafkaError.CONCURRENT_TRANSACTIONS}
# Kafka's answers to an offset change for a group with live members.
_GROUP_ACTIVE = {KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}
# Brief states of a new or moving partition: asked again until TIMEOUT_SECONDS have passed.
_TRANSIENT = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.REQUEST_TIMED_OUT,
}


def _kafka_error(err: Any) -> KafkaError | None:
    if isinstance(err, KafkaException) and err.args and isinstance(err.args[0], KafkaError):
        return err.args[0]
    return err if isinstance(err, KafkaError) else None


class KafkaStore(Store):
    """A Kafka-API cluster.

    :param cluster: the cluster's name (used in messages).
    :param bootstrap: ``host:port[,host:port...]``.
    :param settings: confluent-kafka client settings, passed through; ``streamrep.namespace`` is ours.
    """

    def __init__(self, cluster: str, bootstrap: str, settings: Mapping[str, Any] | None = None):
        super().__init__(cluster)
        everything = {str(k): v for k, v in (settings or {}).items()}
        self.namespace = str(everything.get(NAMESPACE_SETTING, "") or "")
        # streamrep.* settings are streamrep's own (namespace, groups mapping); the rest is confluent-kafka's.
        # The cluster's url names its servers; a settings file's own bootstrap.servers (as in the files
        # of ./run kafka secure) would silently point the store elsewhere, so the url wins.
        client = {k: v for k, v in everything.items() if not k.startswith("streamrep.") and k != "bootstrap.servers"}
        self.bootstrap = bootstrap
        self._settings = client
        self._own = {k: v for k, v in everything.items() if k.startswith("streamrep.") and k != NAMESPACE_SETTING}
        # librdkafka's own log lines go through logging (errors only, unless configured otherwise).
        self._client = {"bootstrap.servers": bootstrap, "logger": CLIENT_LOG, **client}
        internal = _internal_prefix(self.namespace)
        self._internal = internal
        self.acls = KafkaAcls(self, self._admin, self._own)
        self._topics = {name: internal + name for name in ("catalog", "marks", "syncs")}
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._admin_client: AdminClient | None = None
        self._plain_producer: Producer | None = None
        self._meta_consumer: Consumer | None = None
        self._uncommitted_consumer: Consumer | None = None  # sees the high watermark, not the LSO
        self._txns: OrderedDict[str, Producer] = OrderedDict()
        self._txn_codecs: dict[str, str] = {}  # txid -> the compression.type its cached producer writes with
        self._readers: OrderedDict[tuple[str, int], list] = (
            OrderedDict()
        )  # (kafka topic, partition) -> [consumer, next]
        self._folds: dict[str, _Fold] = {}
        self._internal_ready = False
        self._namings: dict[str, TopicNaming] = {}  # stream uuid -> naming, kept after a stream is deleted
        self._others: dict[str, _Fold] = {}  # namespace of another installation on the brokers -> its catalog
        self._claims: list[_Claim] = []  # what the other installations hold, as last read
        self._claimed: dict[str, list[_Claim]] = {}  # Kafka topic -> the claims on it (kept while it exists)

    @property
    def internal_prefix(self) -> str:
        """The prefix of this installation's internal topics and transactional ids."""
        return self._internal

    def _fresh(self) -> None:
        if self._pid != os.getpid():  # librdkafka handles do not survive a fork
            self._reset()

    # -- clients -------------------------------------------------------------------
    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Kafka's errors as streamrep's one-line errors."""
        try:
            yield
        except KafkaException as exc:
            raise self._translate(exc, what) from None

    def _translate(self, exc: Any, what: str) -> StreamrepError | RetryNow:
        """A Kafka error as streamrep's: a fenced transactional writer (only a transaction can be
        fenced) is ``RetryNow``, for the transaction's caller to read again and retry."""
        err = _kafka_error(exc)
        if err is None:
            return Unavailable(f"cluster {self.cluster}: {what}: {exc}")
        if err.code() in _FENCED:
            return RetryNow(f"cluster {self.cluster}: another writer took over ({what}: {err.str()}); retry")
        kind = _USER_ERRORS.get(err.code())
        if kind is not None:
            return kind(f"cluster {self.cluster}: {what}: {err.str()}")
        if err.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT):
            return Unavailable(
                f"cluster {self.cluster}: Kafka at {self.bootstrap} is unreachable ({what}: {err.str()})"
            )
        return Unavailable(f"cluster {self.cluster}: {what}: {err.str()}")

    def _admin(self) -> AdminClient:
        self._fresh()
        if self._admin_client is None:
            self._admin_client = AdminClient(dict(self._client))
        return self._admin_client

    def _consumer(self, **extra: Any) -> Consumer:
        # auto.offset.reset=earliest: librdkafka's default (latest) jumps over records when a position is
        # out of range, e.g. while a restarted broker recovers its log. A fold that skipped its own last
        # marks would compare-and-set against stale positions; from the earliest offset it only replays
        # (folds are replay-safe, and readers skip what lies below a replica's position).
        return Consumer(
            {
                **self._client,
                "group.id": f"{self._internal}reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 20,
                **extra,
            }
        )

    def _meta(self) -> Consumer:
        self._fresh()
        if self._meta_consumer is None:
            self._meta_consumer = self._consumer()
        return self._meta_consumer

    def _uncommitted(self) -> Consumer:
        self._fresh()
        if self._uncommitted_consumer is None:
            self._uncommitted_consumer = self._consumer(**{"isolation.level": "read_uncommitted"})
        return self._uncommitted_consumer

    def _producer(self) -> Producer:
        self._fresh()
        if self._plain_producer is None:
            self._plain_producer = Producer({**self._client, "enable.idempotence": True, "linger.ms": 2})
        return self._plain_producer

    def _txn(self, txid: str, reads: str, compression: str | None = None) -> Producer:
        """The transactional producer of ``txid``, initialised (which fences every older one).

        :param reads: the internal topic (``catalog``, ``marks``) whose state this id's writes are decided on.
        :param compression: the ``compression.type`` its records must be written with; None: any
            (a new producer gets librdkafka's default, none).
        """
        self._fresh()
        producer = self._txns.get(txid)
        if producer is not None and compression is not None and self._txn_codecs.get(txid) != compression:
            # A producer's codec is fixed when it is made: a replica now written with another one
            # gets a new producer of the same id, whose init fences the old one (between transactions).
            self._txns.pop(txid).flush(0)
            producer = None
        if producer is not None:
            self._txns.move_to_end(txid)
            return producer
        # None keeps the cluster's client settings (librdkafka's default: none)
        codec = compression or str(self._client.get("compression.type", "none"))
        producer = Producer(
            {
                **self._client,
                "transactional.id": txid,
                "linger.ms": 2,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "compression.type": codec,
            }
        )
        with self._errors("cannot start a transaction"):
            # Connected first: librdkafka otherwise often waits its 500 ms coordinator timer.
            producer.list_topics(timeout=TIMEOUT_SECONDS)
            producer.init_transactions(TIMEOUT_SECONDS)
        self._await_decided(reads)
        self._txns[txid] = producer
        self._txn_codecs[txid] = codec
        while len(self._txns) > MAX_TRANSACTIONAL_PRODUCERS:
            evicted, oldest = self._txns.popitem(last=False)
            self._txn_codecs.pop(evicted, None)
            oldest.flush(0)
        return producer

    def _txid(self, *parts: str) -> str:
        """A transactional id naming what it writes (hashed: ids are kept by the coordinator)."""
        digest = hashlib.sha1("\x1f".join(parts).encode("utf-8")).hexdigest()[:20]
        return f"{self._internal}{parts[0]}.{digest}"

    def _await_decided(self, kind: str) -> None:
        """Wait until every record already in internal topic ``kind`` is committed or aborted (its last
        stable offset reaches the high watermark read now). A new writer of an id reads the state after
        fencing the previous one, and must see that writer's last commit; but any other open transaction
        (one whose writer was killed inside it lasts until Kafka aborts it) holds the last stable offset,
        and so every read_committed reader, below that commit."""
        self._ensure_internal()
        name = self._topics[kind]
        high = self._watermarks(name, 0, name, self._uncommitted())[1]
        deadline = time.monotonic() + VISIBLE_WITHIN_SECONDS
        while self._watermarks(name, 0, name)[1] < high:
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"cluster {self.cluster}: a transaction on {name} stayed open for "
                    f"{VISIBLE_WITHIN_SECONDS:.0f} s; try again"
                )
            time.sleep(0.005)

    @contextmanager
    def _transaction(self, txid: str, reads: str, compression: str | None = None) -> Iterator[_Transaction]:
        """One transaction of ``txid``; ``RetryNow`` if another writer fenced this one (retry from the new state).
        It returns once its internal records are readable: Kafka writes commit markers after the commit
        returns, and the next read (by this process or another) must see what was just written.

        :param compression: as ``_txn``.
        """
        producer = self._txn(txid, reads, compression)
        txn = _Transaction(self, producer)
        try:
            producer.begin_transaction()
            yield txn
            producer.flush(TIMEOUT_SECONDS)  # serves the delivery reports that give the offsets
            self._commit(producer)
        except BaseException as exc:
            fenced = False
            try:
                producer.abort_transaction(TIMEOUT_SECONDS)
            except KafkaException as refused:  # fenced, fatal, or a commit still under way: the next transaction
                # starts a new producer, whose init_transactions waits until this one's transaction has ended
                self._txns.pop(txid, None)
                err = _kafka_error(refused)
                fenced = err is not None and err.code() in _FENCED
            if fenced and isinstance(exc, Exception):
                # Another writer of this id (another process applying this replica partition: Spark gives a
                # gateway's tasks to any idle Python worker) fenced this cached producer since its last
                # transaction. librdkafka then fails the produce ("Local: Fatal error"), or a delivery
                # report during flush, before the commit could say "fenced". ``RetryNow`` makes the caller
                # retry at once from the stored state, read again by a new producer after it fenced the
                # other (so exact whether or not anything committed), instead of failing the replica.
                raise RetryNow(f"cluster {self.cluster}: another writer took over ({err.str()}); retry") from None
            if isinstance(exc, KafkaException):
                err = _kafka_error(exc)
                if err is not None and err.txn_requires_abort() and err.code() in _FENCING_RACE:
                    raise RetryNow(
                        f"cluster {self.cluster}: another writer took over (transaction aborted: {err.str()}); retry"
                    ) from None
                raise self._translate(exc, "transaction failed") from None
            raise
        try:
            self._await_visible(txn.last_offsets)
        except BaseException:
            # Committed, but not yet readable: Kafka writes the commit markers after the commit returns
            # (after a broker restart, only once its coordinator has reloaded the transaction). Until
            # then the last stable offset stops before this commit, so a next transaction of this
            # producer would read the state from before it and compare-and-set against that (a
            # replayed batch). A new producer's init_transactions waits for the commit to complete,
            # and _await_decided for it to be readable.
            self._txns.pop(txid, None)
            raise

    def _commit(self, producer: Producer) -> None:
        """Commit the open transaction. A retriable error (a timeout while the coordinator is away, as
        in a broker restart) leaves the commit under way in the background: librdkafka's contract is to
        call commit again, which resumes it (an abort now would be refused as a conflicting call)."""
        deadline = time.monotonic() + VISIBLE_WITHIN_SECONDS
        while True:
            try:
                producer.commit_transaction(TIMEOUT_SECONDS)
                return
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is None or not err.retriable() or err.txn_requires_abort() or time.monotonic() > deadline:
                    raise

    def _await_visible(self, last_offsets: Mapping[str, int]) -> None:
        """Wait until each internal topic's last stable offset is past the given record."""
        deadline = time.monotonic() + VISIBLE_WITHIN_SECONDS
        for name, offset in last_offsets.items():
            while self._watermarks(name, 0, name)[1] <= offset:
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"cluster {self.cluster}: a committed write to {name} did not become readable "
                        f"within {VISIBLE_WITHIN_SECONDS:.0f} s"
                    )
                time.sleep(0.002)

    # -- internal topics -----------------------------------------------------------
    def _ensure_internal(self) -> None:
        if self._internal_ready:
            return
        with self._errors("cannot read topics"):
            existing = self._admin().list_topics(timeout=TIMEOUT_SECONDS).topics
        missing = [
            NewTopic(name, 1, config=INTERNAL_TOPIC_CONFIG) for name in self._topics.values() if name not in existing
        ]
        if missing:
            for name, future in self._admin().create_topics(missing, request_timeout=TIMEOUT_SECONDS).items():
                try:
                    future.result()
                except KafkaException as exc:
                    err = _kafka_error(exc)
                    if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise self._translate(exc, f"cannot create internal topic {name}") from None
            self._await_topics(t.topic for t in missing)
        self._internal_ready = True

    def _await_topics(self, names: Any, present: bool = True) -> None:
        """Wait until metadata shows the topics (created) or not (deleted), so the next call sees them."""
        names = set(names)
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            with self._errors("cannot read topics"):
                topics = self._admin().list_topics(timeout=TIMEOUT_SECONDS).topics
            if all((n in topics and not topics[n].error) == present for n in names):
                return
            time.sleep(0.05)

    def _fold(self, name: str) -> _Fold:
        self._fresh()
        fold = self._folds.get(name)
        if fold is None:
            self._ensure_internal()
            fold = self._folds[name] = _Fold(self, self._topics[name])
        return fold

    # -- identity and catalog ------------------------------------------------------
    def store_id(self) -> str:
        doc = self.catalog_get(_STORE_KIND, "id")
        if doc is None:
            doc = self.catalog_update(_STORE_KIND, "id", lambda cur: cur or {"store_id": str(uuid.uuid4())})
        return doc["store_id"]

    def _catalog(self) -> dict[tuple[str, str], CatalogDoc]:
        fold = self._fold("catalog")
        fold.catch_up()
        return fold.state

    def catalog_get(self, kind: str, key: str) -> CatalogDoc | None:
        doc = self._catalog().get((kind, key))
        return json.loads(json.dumps(doc)) if doc is not None else None

    def catalog_list(self, kind: str) -> dict[str, CatalogDoc]:
        return {k: json.loads(json.dumps(doc)) for (kd, k), doc in sorted(self._catalog().items()) if kd == kind}

    def catalog_update(
        self, kind: str, key: str, change: Callable[[CatalogDoc | None], CatalogDoc | None]
    ) -> CatalogDoc | None:
        txid = self._txid("catalog", kind, key)
        self.acls.enforced()  # the first catalog write on a cluster with an authorizer sets streamrep's own ACLs
        for _ in range(CATALOG_RETRIES):
            try:
                with self._transaction(txid, "catalog") as txn:
                    # Read after this writer fenced the others. The change's own refusal (a Conflict
                    # among them) is a user error, never retried; only a fenced writer (RetryNow) is.
                    new = change(self.catalog_get(kind, key))
                    if kind == STREAM_KIND:  # the broker's ACLs follow the stream's ACEs, set before the commit
                        self.acls.sync_stream(self.catalog_get(kind, key), new)
                    txn.internal(
                        "catalog", f"{kind}\x1f{key}", None if new is None else json.dumps(new).encode("utf-8")
                    )
                return new
            except RetryNow:
                continue
        raise Conflict(f"cluster {self.cluster}: catalog entry {kind} {key} kept changing; try again")

    def _naming(self, stream: str) -> TopicNaming:
        naming = self._namings.get(stream)
        if naming is None:
            self._catalog()  # the fold records every stream's naming
            naming = self._namings.get(stream)
        if naming is None:
            raise NotFound(f"cluster {self.cluster}: no stream with uuid {stream}")
        return naming

    def _learn(self, doc: CatalogDoc) -> None:
        try:
            self._namings[doc["uuid"]] = naming_for(doc.get("naming"), doc["path"], self.namespace)
        except (StreamrepError, KeyError, TypeError):
            pass  # a stream whose naming cannot be used has no topics here

    def check_naming(self, path: str, spec: str | None, others: Mapping[str, str | None]) -> None:
        naming = naming_for(spec, path, self.namespace)
        for other_path, other_spec in sorted(others.items()):
            try:
                other = naming_for(other_spec, other_path, self.namespace)
            except StreamrepError:
                continue
            if other_path != path and naming.overlaps(other):
                raise Conflict(
                    f"the Kafka topics of {path} ({naming.spec}) would overlap those of stream "
                    f"{other_path} ({other.spec}); choose another -topicnaming"
                )
        if path in others:
            return  # the stream exists: creating it is refused as AlreadyExists
        listed = self._kafka_topics()
        self._refresh_others(listed)  # creating a stream always reads the other installations anew
        rank = self._rank(naming)
        for claim in self._claims:
            # Two overlaps are allowed: an adopting naming wider than the other's (it yields the other's
            # topics when read), and a naming that creates its topics over an adopting one (which yields
            # them; none exist yet, checked below). Anything else would share, or take, the other's topics.
            yields = rank < claim.rank and not naming.within(claim.naming)
            creates_new = not naming.adopts and claim.naming.adopts
            if naming.overlaps(claim.naming) and not (yields or creates_new):
                raise Conflict(
                    f"the Kafka topics of {path} ({naming.spec}) would overlap those of {claim.whose} "
                    "on the same brokers; choose another path or -topicnaming"
                )
        if not naming.adopts:
            existing = sorted(name for name in listed if naming.topic_of(name) is not None)
            if existing:  # no stream of this installation names it (checked above): someone else's, or left over
                raise Conflict(
                    f"Kafka topic {existing[0]} already exists, and the {naming.spec} naming of {path} "
                    "never adopts a topic; adopt existing topics with -topicnaming prefix:<P>, "
                    "or choose another path"
                )

    # -- other installations on the same brokers ------------------------------------
    def _rank(self, naming: TopicNaming) -> tuple[int, ...]:
        """Of two overlapping streams of different installations, the higher rank holds a shared topic;
        the longer namespace breaks a tie (it is the one whose prefix the topic is under)."""
        return (*naming.rank, len(self.namespace))

    def _refresh_others(self, listed: Mapping[str, int]) -> None:
        """Read again what the other installations on these brokers hold (``listed`` is the topic list):
        each one's namespace prefix ``<ns>.``, and its streams' namings, from its catalog (read-only;
        folded on from where this store left it, so a refresh costs one offset request per installation)."""
        found = {ns for ns in map(_installation_of, listed) if ns is not None and ns != self.namespace}
        for gone in set(self._others) - found:
            self._others.pop(gone).close()
        streams: list[_Claim] = []
        namespaces: list[_Claim] = []
        for ns in sorted(found):
            installation = (
                f"the streamrep installation with namespace {ns!r}"
                if ns
                else "the streamrep installation without a namespace"
            )
            if ns and not f"{self.namespace}.".startswith(f"{ns}."):  # not ours when ours is nested in it
                namespaces.append(
                    _Claim(
                        PrefixNaming(f"{ns}.", DEFAULT_NAMING),
                        (2, len(ns) + 1, len(ns)),
                        f"{installation} (every topic under '{ns}.')",
                    )
                )
            fold = self._others.get(ns)
            if fold is None:
                fold = self._others[ns] = _Fold(self, _internal_prefix(ns) + "catalog", learn=False)
            try:
                fold.catch_up()
            except PermissionDenied:
                # ACLs keep its catalog from this installation: its streams are unknown here, and the
                # broker's ACLs on its topics are what guards them (its namespace prefix still counts).
                continue
            except NotFound:  # deleted since it was listed
                self._others.pop(ns).close()
                continue
            for (kind, path), doc in sorted(fold.state.items()):
                try:
                    if kind == STREAM_KIND:
                        naming = naming_for(doc.get("naming"), doc["path"], ns)
                        streams.append(_Claim(naming, (*naming.rank, len(ns)), f"stream {path} of {installation}"))
                except (StreamrepError, KeyError, TypeError, AttributeError):
                    continue  # a stream whose naming cannot be used holds no topics
        self._claims = streams + namespaces  # a stream's claim names what overlaps most precisely
        self._claimed = {}

    def _foreign(
        self, naming: TopicNaming, names: Sequence[str], listed: Mapping[str, int] | None = None, refresh: bool = False
    ) -> dict[str, _Claim]:
        """Of the Kafka topics ``names`` (named by ``naming``, a stream of this installation), those another
        installation holds against it: name -> its claim.

        The others are read again when asked to (creating), or when a name comes up that this store has
        not judged. A judgement is kept while the Kafka topic exists (``listed`` is the topic list, when
        the caller has it): the checks on creating keep an existing topic from changing hands."""
        if listed is not None:
            for gone in [name for name in self._claimed if name not in listed]:
                del self._claimed[gone]  # deleted: judged again if made again
        judged = self._claimed
        if refresh or any(name not in judged for name in names):
            listed = self._kafka_topics() if listed is None else listed
            self._refresh_others(listed)
            judged = {name: [c for c in self._claims if c.naming.topic_of(name) is not None] for name in names}
            self._claimed.update((name, claims) for name, claims in judged.items() if name in listed)
        rank = self._rank(naming)
        held = {name: [c for c in judged[name] if c.rank >= rank] for name in names}
        return {name: claims[0] for name, claims in held.items() if claims}  # a stream's first: the most precise

    def _held(self, naming: TopicNaming) -> dict[str, int]:
        """The Kafka topics of ``naming`` that no other installation holds: name -> partition count."""
        listed = self._kafka_topics()
        names = [name for name in listed if naming.topic_of(name) is not None]
        foreign = self._foreign(naming, names, listed)
        return {name: listed[name] for name in names if name not in foreign}

    def _kafka_name(self, stream: str, topic: str) -> str:
        """The Kafka topic of the stream's ``topic``; NotFound if another installation holds it."""
        naming = self._naming(stream)
        name = naming.kafka_topic(topic)
        claim = self._foreign(naming, [name]).get(name)
        if claim is not None:
            raise NotFound(
                f"topic {topic} does not exist: Kafka topic {name} belongs to {claim.whose} on the same brokers"
            )
        return name

    def location(self, stream: str, topic: str) -> dict[str, str]:
        return {"kafkaTopic": self._naming(stream).kafka_topic(topic)}

    # -- topics --------------------------------------------------------------------
    def _kafka_topics(self) -> dict[str, int]:
        with self._errors("cannot read topics"):
            metadata = self._admin().list_topics(timeout=TIMEOUT_SECONDS)
        return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}

    def topics(self, stream: str) -> dict[str, int]:
        naming = self._naming(stream)
        return dict(sorted((naming.topic_of(name), count) for name, count in self._held(naming).items()))

    def create_topic(self, stream: str, topic: str, partitions: int) -> None:
        naming = self._naming(stream)
        name = naming.kafka_topic(topic)
        claim = self._foreign(naming, [name], self._kafka_topics(), refresh=True).get(name)
        if claim is not None:
            raise Conflict(
                f"topic {topic} would be Kafka topic {name}, which belongs to {claim.whose} "
                "on the same brokers; choose another topic name"
            )
        future = self._admin().create_topics(
            [NewTopic(name, partitions, config=_STREAM_TOPIC_CONFIG)], request_timeout=TIMEOUT_SECONDS
        )[name]
        try:
            future.result()
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err is not None and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                raise AlreadyExists(f"topic {topic} already exists") from None
            raise self._translate(exc, f"cannot create Kafka topic {name}") from None
        self._await_topics([name])

    def add_partitions(self, stream: str, topic: str, partitions: int) -> None:
        name = self._kafka_name(stream, topic)
        count = self._kafka_topics().get(name)
        if count is None:
            raise NotFound(f"topic {topic} does not exist")
        if partitions < count:
            raise InvalidArgument(f"topic {topic} has {count} partitions; partitions can only be added")
        if partitions == count:
            return
        future = self._admin().create_partitions([NewPartitions(name, partitions)], request_timeout=TIMEOUT_SECONDS)[
            name
        ]
        with self._errors(f"cannot add partitions to Kafka topic {name}"):
            future.result()
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while self._kafka_topics().get(name, 0) < partitions and time.monotonic() < deadline:
            time.sleep(0.05)

    def delete_topic(self, stream: str, topic: str) -> None:
        self._delete_kafka_topics([self._kafka_name(stream, topic)], topic)

    def _delete_kafka_topics(self, names: list[str], topic: str | None = None) -> None:
        if not names:
            return
        futures = self._admin().delete_topics(names, request_timeout=TIMEOUT_SECONDS)
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                err = _kafka_error(exc)
                if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    if topic is not None:
                        raise NotFound(f"topic {topic} does not exist") from None
                    continue
                raise self._translate(exc, f"cannot delete Kafka topic {name}") from None
        self._forget_readers(names)
        self._await_topics(names, present=False)

    def drop_stream(self, stream: str) -> None:
        naming = self._naming(stream)
        if not naming.adopts:  # adopted topics were there before the stream: they stay in Kafka
            self._delete_kafka_topics(list(self._held(naming)))
        marks = self._fold("marks")
        syncs = self._fold("syncs")
        marks.catch_up()
        syncs.catch_up()
        producer = self._producer()
        for key in list(marks.state.get(stream, {})):
            producer.produce(self._topics["marks"], key=f"{stream}\x1f{key}".encode(), value=None)
        for source, runs in syncs.state.get(stream, {}).items():
            for source_offset in runs:
                producer.produce(
                    self._topics["syncs"], key=f"{stream}\x1f{source}\x1f{source_offset}".encode(), value=None
                )
        self._flush(producer, "cannot drop the stream's replication marks")

    # -- data ----------------------------------------------------------------------
    def _flush(self, producer: Producer, what: str) -> None:
        with self._errors(what):
            left = producer.flush(TIMEOUT_SECONDS)
        if left:
            raise Unavailable(
                f"cluster {self.cluster}: {what}: {left} messages not acknowledged within "
                f"{TIMEOUT_SECONDS:.0f} s (is Kafka at {self.bootstrap} up?)"
            )

    def _produce_all(
        self,
        producer: Producer,
        name: str,
        partition: int,
        messages: Sequence[Message],
        offsets: list[int],
        errors: list,
    ) -> None:
        """Produce ``messages`` to one partition; each delivery stores its offset in ``offsets`` (by index)
        or an error. One callback serves the whole call: an idempotent producer (every producer here)
        reports one partition's deliveries in the order they were produced."""
        slots = iter(range(len(messages)))

        def report(err: KafkaError | None, msg: Any) -> None:
            index = next(slots)
            if err is not None:
                errors.append(err)
            else:
                offsets[index] = msg.offset()

        produce = producer.produce
        refreshed = False
        for value, key, headers, timestamp, _, _, _ in messages:
            while True:
                try:
                    produce(
                        name,
                        value,
                        key,
                        partition=partition,
                        on_delivery=report,
                        timestamp=timestamp or 0,
                        headers=list(headers) if headers else None,
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.05)
                except KafkaException as exc:
                    err = _kafka_error(exc)
                    if not refreshed and err is not None and err.code() == KafkaError._UNKNOWN_PARTITION:
                        # Partitions added since this producer last read metadata: read it again, once.
                        with self._errors(f"cannot read metadata of {name}"):
                            producer.list_topics(name, timeout=TIMEOUT_SECONDS)
                        refreshed = True
                        continue
                    raise self._translate(exc, f"cannot write to {name}") from None

    def append(self, stream: str, topic: str, batches: Mapping[int, Sequence[Message]]) -> dict[int, int]:
        name = self._kafka_name(stream, topic)
        producer = self._producer()
        results: dict[int, list[int]] = {}
        errors: list = []
        for partition, messages in batches.items():
            results[partition] = [-1] * len(messages)
            self._produce_all(producer, name, partition, messages, results[partition], errors)
        self._flush(producer, f"cannot write to {name}")
        if errors:
            raise self._translate(errors[0], f"cannot write to {name}")
        return {partition: min(offsets) for partition, offsets in results.items() if offsets}

    def _reader(self, name: str, partition: int, start: int) -> Consumer:
        """A consumer positioned at ``start`` of one partition; kept, so sequential reads keep their prefetch."""
        self._fresh()
        key = (name, partition)
        entry = self._readers.get(key)
        if entry is None:
            entry = self._readers[key] = [self._consumer(), None]
            while len(self._readers) > MAX_READERS:
                self._readers.popitem(last=False)[1][0].close()
        self._readers.move_to_end(key)
        if entry[1] != start:
            entry[0].assign([TopicPartition(name, partition, start)])
            entry[1] = start
        return entry[0]

    def _forget_readers(self, names: Sequence[str]) -> None:
        for key in [k for k in self._readers if k[0] in set(names)]:
            self._readers.pop(key)[0].close()

    def read(self, stream: str, topic: str, partition: int, start: int, max_messages: int) -> list[Message]:
        return self.read_span(stream, topic, partition, start, max_messages)[0]

    def read_span(
        self, stream: str, topic: str, partition: int, start: int, max_messages: int
    ) -> tuple[list[Message], int]:
        name = self._kafka_name(stream, topic)
        first, end = self._watermarks(name, partition, topic)
        start = max(start, first)
        if start >= end or max_messages <= 0:
            return [], start
        consumer = self._reader(name, partition, start)
        out: list[Message] = []
        position = start
        overshoot = False  # a message outside [start, end) was consumed: the reader must seek next time
        deadline = time.monotonic() + TIMEOUT_SECONDS
        new = tuple.__new__
        append = out.append
        while len(out) < max_messages and position < end and not overshoot and time.monotonic() < deadline:
            with self._errors(f"cannot read {name}"):
                batch = consumer.consume(min(max_messages - len(out), 10000), timeout=0.05)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise self._translate(err, f"cannot read {name}")
                offset = msg.offset()
                if offset >= end or offset < start:  # past the span, or fetched before a reposition:
                    overshoot = True  # never returned, and the reader seeks again next time
                    continue
                headers = msg.headers()
                append(
                    new(
                        Message,
                        (
                            msg.value() or b"",
                            msg.key(),
                            tuple([(k, v or b"") for k, v in headers]) if headers else (),
                            msg.timestamp()[1],
                            partition,
                            offset,
                            topic,
                        ),
                    )
                )
            if out:
                position = max(position, out[-1].offset + 1)
            if not overshoot and len(out) < max_messages:
                with self._errors(f"cannot read {name}"):
                    at = consumer.position([TopicPartition(name, partition)])[0].offset
                position = max(position, at)  # past transaction markers
        nxt = out[-1].offset + 1 if len(out) >= max_messages else min(position, end)
        self._readers[(name, partition)][1] = nxt if not overshoot and position == nxt else None
        return out, nxt

    def _watermarks(self, name: str, partition: int, topic: str, consumer: Consumer | None = None) -> tuple[int, int]:
        """``(first offset held, last stable offset)`` of a Kafka partition (the high watermark instead,
        with a read_uncommitted ``consumer``). A partition just created may have no leader yet: asked again."""
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while True:
            try:
                return watermarks(consumer or self._meta(), name, partition)
            except KafkaException as exc:
                err = _kafka_error(exc)
                code = err.code() if err is not None else None
                if code in _TRANSIENT and time.monotonic() < deadline:
                    if code in (
                        KafkaError._UNKNOWN_PARTITION,
                        KafkaError._UNKNOWN_TOPIC,
                        KafkaError.UNKNOWN_TOPIC_OR_PART,
                    ):
                        if self._kafka_topics().get(name, 0) <= partition:
                            raise NotFound(f"topic {topic} has no partition {partition}") from None
                        with self._errors(f"cannot read metadata of {name}"):  # added since the client last looked
                            self._meta().list_topics(name, timeout=TIMEOUT_SECONDS)
                    time.sleep(0.05)
                    continue
                raise self._translate(exc, f"cannot read offsets of {name}") from None

    def offsets(self, stream: str, topic: str, partition: int) -> tuple[int, int]:
        return self._watermarks(self._kafka_name(stream, topic), partition, topic)

    def purge_before(self, stream: str, topic: str, timestamp: int) -> int:
        name = self._kafka_name(stream, topic)
        count = self._kafka_topics().get(name, 0)
        wanted = []
        dropped = 0
        for partition in range(count):
            first, end = self._watermarks(name, partition, topic)
            with self._errors(f"cannot read offsets of {name}"):
                found = (
                    self._meta()
                    .offsets_for_times([TopicPartition(name, partition, timestamp)], timeout=TIMEOUT_SECONDS)[0]
                    .offset
                )
            new_start = end if found < 0 else min(found, end)
            if new_start > first:
                wanted.append(TopicPartition(name, partition, new_start))
                dropped += new_start - first
        if wanted:
            with self._errors(f"cannot delete expired messages of {name}"):
                for future in self._admin().delete_records(wanted, request_timeout=TIMEOUT_SECONDS).values():
                    future.result()
        return dropped

    def range_stats(
        self, stream: str, topic: str, partition: int, start: int
    ) -> tuple[int, int, int | None, int | None]:
        # Kafka keeps no counts, so the range is read. It ends where the partition ended when
        # the count began (a busy topic would otherwise never be counted to its end), and the
        # store is not held between reads, so gateways sharing it keep applying meanwhile.
        _, end = self.offsets(stream, topic, partition)
        count = size = 0
        oldest = newest = None
        position = start
        while position < end:
            batch, position = self.read_span(stream, topic, partition, position, min(10000, end - position))
            batch = [m for m in batch if m.offset < end]
            if not batch:
                break
            count += len(batch)
            size += sum(len(m.value) for m in batch)
            stamps = [m.timestamp for m in batch]
            oldest = min(stamps) if oldest is None else min(oldest, *stamps)
            newest = max(stamps) if newest is None else max(newest, *stamps)
        return count, size, oldest, newest

    # -- cursors -------------------------------------------------------------------
    def _group(self, group: str) -> str:
        return f"{self.namespace}.{group}" if self.namespace else group

    def commit_cursors(self, group: str, stream: str, topic: str, cursors: Mapping[int, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions

        name = self._kafka_name(stream, topic)
        request = ConsumerGroupTopicPartitions(
            self._group(group), [TopicPartition(name, p, o) for p, o in sorted(cursors.items())]
        )
        try:
            for future in (
                self._admin().alter_consumer_group_offsets([request], request_timeout=TIMEOUT_SECONDS).values()
            ):
                for tp in future.result().topic_partitions:  # Kafka answers per partition
                    if tp.error is not None:
                        raise KafkaException(tp.error)
        except KafkaException as exc:
            err = _kafka_error(exc)
            if err is not None and err.code() in _GROUP_ACTIVE:  # Kafka refuses to move a live group's offsets
                raise Conflict(
                    f"cluster {self.cluster}: group {group} is active (it has members); its cursors were not changed"
                ) from None
            raise self._translate(exc, f"cannot commit cursors of group {group}") from None

    def _namespaced_groups(self) -> list[str]:
        """This namespace's consumer group ids, without the namespace; never streamrep's own readers."""
        with self._errors("cannot list consumer groups"):
            listed = self._admin().list_consumer_groups(request_timeout=TIMEOUT_SECONDS).result()
        prefix = f"{self.namespace}." if self.namespace else ""
        return sorted(
            g.group_id[len(prefix) :]
            for g in listed.valid
            if g.group_id.startswith(prefix) and not g.group_id.startswith(INTERNAL_PREFIX)
        )

    def groups(self, stream: str) -> list[str]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        held = self._held(self._naming(stream))
        candidates = self._namespaced_groups()
        if not candidates:
            return []
        admin = self._admin()
        # One request per group (the client's limit), all sent before any answer is awaited.
        with self._errors("cannot read consumer group offsets"):
            futures = {
                group: list(
                    admin.list_consumer_group_offsets(
                        [ConsumerGroupTopicPartitions(self._group(group))], request_timeout=TIMEOUT_SECONDS
                    ).values()
                )[0]
                for group in candidates
            }
            return [
                group
                for group, future in futures.items()
                if any(tp.offset >= 0 and tp.topic in held for tp in future.result().topic_partitions)
            ]

    def active_groups(self, groups: Sequence[str]) -> set[str]:
        if not groups:
            return set()
        ids = {self._group(g): g for g in groups}
        with self._errors("cannot describe consumer groups"):
            futures = self._admin().describe_consumer_groups(list(ids), request_timeout=TIMEOUT_SECONDS)
            return {ids[gid] for gid, future in futures.items() if future.result().members}

    def cursors(self, group: str, stream: str, topic: str) -> dict[int, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        name = self._kafka_name(stream, topic)
        count = self._kafka_topics().get(name, 0)
        if not count:
            return {}
        request = ConsumerGroupTopicPartitions(self._group(group), [TopicPartition(name, p) for p in range(count)])
        with self._errors(f"cannot read cursors of group {group}"):
            result = list(
                self._admin().list_consumer_group_offsets([request], request_timeout=TIMEOUT_SECONDS).values()
            )[0].result()
        return {tp.partition: tp.offset for tp in result.topic_partitions if tp.offset >= 0}

    # -- replication marks ---------------------------------------------------------
    def marks(self, stream: str) -> dict[str, int]:
        fold = self._fold("marks")
        fold.catch_up()
        return dict(fold.state.get(stream, {}))

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
        name = self._kafka_name(stream, topic)
        with self._transaction(self._txid("apply", stream, topic, str(partition)), "marks", compression) as txn:
            producer = txn.producer
            current = self.marks(stream)  # read after this writer fenced every other of the partition
            for key, expected in expect.items():
                if current.get(key) != expected:
                    raise RetryNow(
                        f"replication mark {key} of stream {stream} moved ({expected} -> {current.get(key)}); "
                        "another gateway applied this batch"
                    )
            offsets = [-1] * len(messages)
            errors: list = []
            if messages:
                self._produce_all(producer, name, partition, messages, offsets, errors)
                self._flush(producer, f"cannot write to {name}")  # the offsets are needed for the syncs
                if errors:
                    raise self._translate(errors[0], f"cannot write to {name}")
            for key, value in marks.items():
                txn.internal("marks", f"{stream}\x1f{key}", str(value).encode("ascii"))
            for source_offset, replica_offset, count in _runs(syncs, offsets):
                txn.internal(
                    "syncs",
                    f"{stream}\x1f{source}\x1f{source_offset}",
                    json.dumps([partition, replica_offset, count]).encode("ascii"),
                )
        if messages:
            return offsets[0]
        return self._watermarks(name, partition, topic)[1]

    def drop_marks(self, stream: str, marks: Mapping[str, int]) -> int:
        by_partition: dict[tuple[str, int], dict[str, int]] = {}
        for key, value in marks.items():
            by_partition.setdefault(mark_partition(key), {})[key] = value
        dropped = 0
        for (topic, partition), wanted in sorted(by_partition.items()):
            for attempt in range(CATALOG_RETRIES):
                try:
                    with self._transaction(self._txid("apply", stream, topic, str(partition)), "marks") as txn:
                        current = self.marks(stream)
                        gone = [key for key, value in wanted.items() if current.get(key) == value]
                        for key in gone:
                            txn.internal("marks", f"{stream}\x1f{key}", None)
                    break
                except RetryNow as retry:  # fenced (by a gateway, or another store object, since): read again
                    if attempt == CATALOG_RETRIES - 1:
                        raise Conflict(str(retry)) from None
            dropped += len(gone)
        return dropped

    def offset_syncs(self, stream: str, source: str) -> list[tuple[int, int, int, int]]:
        fold = self._fold("syncs")
        fold.catch_up()
        runs = fold.state.get(stream, {}).get(source, {})
        return [(offset, *runs[offset]) for offset in sorted(runs)]

    def close(self) -> None:
        if self._pid == os.getpid():
            for fold in (*self._folds.values(), *self._others.values()):
                fold.close()
            for consumer, _ in self._readers.values():
                consumer.close()
            if self._meta_consumer is not None:
                self._meta_consumer.close()
            if self._uncommitted_consumer is not None:
                self._uncommitted_consumer.close()
            if self._plain_producer is not None:
                self._plain_producer.flush(TIMEOUT_SECONDS)
        self._reset()

    def __getstate__(self) -> dict:
        # Pickled into Spark tasks: clients are opened again where the store is used.
        return {
            "cluster": self.cluster,
            "bootstrap": self.bootstrap,
            "settings": {**self._settings, **self._own, NAMESPACE_SETTING: self.namespace},
        }

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["cluster"], state["bootstrap"], state["settings"])


def _serialized(method: Callable) -> Callable:
    @functools.wraps(method)
    def call(self: KafkaStore, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return call


# One thread at a time per store object, as the embedded store's SQLite transactions serialise
# threads: its readers, folds and transactional producers hold positions and open transactions
# that two threads must not share mid-call (gateways in threads of one process share a store).
for _name in (
    "store_id",
    "catalog_get",
    "catalog_list",
    "catalog_update",
    "check_naming",
    "topics",
    "create_topic",
    "add_partitions",
    "delete_topic",
    "drop_stream",
    "append",
    "read",
    "read_span",
    "offsets",
    "purge_before",
    "commit_cursors",
    "cursors",
    "groups",
    "active_groups",
    "marks",
    "apply",
    "drop_marks",
    "offset_syncs",
    "location",
    "close",
):
    setattr(KafkaStore, _name, _serialized(getattr(KafkaStore, _name)))


def _internal_prefix(namespace: str) -> str:
    """The start of the internal topics' names of the installation with ``namespace``."""
    return f"{INTERNAL_PREFIX}.{namespace}." if namespace else f"{INTERNAL_PREFIX}."


def _installation_of(name: str) -> str | None:
    """The namespace ('' for none) of the installation whose catalog is Kafka topic ``name``, or None."""
    head, tail = _internal_prefix(""), ".catalog"
    if name == head + "catalog":
        return ""
    if name.startswith(head) and name.endswith(tail) and len(name) > len(head + tail):
        return name[len(head) : -len(tail)]
    return None


class _Claim(NamedTuple):
    """Kafka topics another installation on the same brokers holds: those of ``naming``."""

    naming: TopicNaming
    rank: tuple[int, ...]  # see KafkaStore._rank; a namespace's own prefix outranks every stream's
    whose: str  # "stream /a of the streamrep installation with namespace 'prod'"


def watermarks(consumer: Consumer, name: str, partition: int) -> tuple[int, int]:
    """``(low watermark, last stable offset)``: a read_committed consumer's high mark is the LSO."""
    return tuple(consumer.get_watermark_offsets(TopicPartition(name, partition), timeout=TIMEOUT_SECONDS, cached=False))


def _runs(syncs: Sequence[tuple[int, int]], offsets: Sequence[int]) -> Iterator[tuple[int, int, int]]:
    """``(source offset, replica offset, count)`` runs: a sync's run of consecutive source offsets,
    split wherever the replica offsets were not consecutive (another producer wrote in between)."""
    bounds = [index for index, _ in syncs[1:]] + [len(offsets)]
    for (index, source_offset), bound in zip(syncs, bounds, strict=False):
        run_start = index
        for i in range(index + 1, bound + 1):
            if i == bound or offsets[i] != offsets[i - 1] + 1:
                yield source_offset + run_start - index, offsets[run_start], i - run_start
                run_start = i


class _Transaction:
    """The records of one transaction; remembers the last offset written to each internal topic."""

    def __init__(self, store: KafkaStore, producer: Producer):
        self.store = store
        self.producer = producer
        self.last_offsets: dict[str, int] = {}

    def internal(self, kind: str, key: str, value: bytes | None) -> None:
        name = self.store._topics[kind]

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self.last_offsets[name] = max(self.last_offsets.get(name, -1), msg.offset())

        self.producer.produce(name, key=key.encode("utf-8"), value=value, on_delivery=delivered)


class _Fold:
    """The state of one internal compacted topic, folded from its committed records."""

    def __init__(self, store: KafkaStore, name: str, learn: bool = True):
        self.store = store
        self.name = name
        self.learn = learn  # the store's own catalog: its streams' namings are the store's
        self.state: dict = {}
        self.position = 0
        self.consumer = store._consumer()
        self.consumer.assign([TopicPartition(name, 0, 0)])

    def catch_up(self) -> None:
        """Read every record committed before now (up to the last stable offset)."""
        store = self.store
        _, end = store._watermarks(self.name, 0, self.name)
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while self.position < end:
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"cluster {store.cluster}: reading {self.name} timed out at offset {self.position} of {end}"
                )
            with store._errors(f"cannot read {self.name}"):
                batch = self.consumer.consume(10000, timeout=0.02)
            for msg in batch:
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise store._translate(msg.error(), f"cannot read {self.name}")
                self._apply(msg.key().decode("utf-8"), msg.value())
                self.position = msg.offset() + 1
            with store._errors(f"cannot read {self.name}"):
                at = self.consumer.position([TopicPartition(self.name, 0)])[0].offset
            if at > self.position:
                self.position = at  # past transaction markers

    def _apply(self, key: str, value: bytes | None) -> None:
        kind = self.name.rsplit(".", 1)[1]
        if kind == "catalog":
            doc_kind, doc_key = key.split("\x1f", 1)
            if value is None:
                self.state.pop((doc_kind, doc_key), None)
            else:
                doc = json.loads(value)
                self.state[(doc_kind, doc_key)] = doc
                if doc_kind == STREAM_KIND and self.learn:
                    self.store._learn(doc)
        elif kind == "marks":
            stream, mark = key.split("\x1f", 1)
            marks = self.state.setdefault(stream, {})
            if value is None:
                marks.pop(mark, None)
            else:
                marks[mark] = int(value)
        else:
            stream, source, offset = key.split("\x1f", 2)
            runs = self.state.setdefault(stream, {}).setdefault(source, {})
            if value is None:
                runs.pop(int(offset), None)
            else:
                runs[int(offset)] = tuple(json.loads(value))

    def close(self) -> None:
        self.consumer.close()
