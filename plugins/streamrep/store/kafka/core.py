"""What every mixin of the Kafka store shares: its clients and the state read with them.

``KafkaCore`` is the base of the store's mixins (``catalog``, ``topics``, ``messages``, ``offsets``,
``cursors``; the transactional apply is ``store``'s own): the settings and the clients made from
them, once per process (librdkafka handles do not survive a fork), Kafka's errors as streamrep's,
the three internal topics and their folds, catalog transactions, each stream's topic naming, and a
partition's bounds as the cached clients read them (the folds and transactions read them too).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic  # where the stubs declare it (admin re-exports it)

import streamrep.store.kafka.versions as versions
from streamrep.errors import NotFound, RetryNow, StreamrepError, Unavailable
from streamrep.model.naming import TopicNaming, naming_for
from streamrep.store.base import CatalogDoc, Store
from streamrep.store.kafka.acls import KafkaAcls
from streamrep.store.kafka.client import (
    CLIENT_LOG,
    INTERNAL_TOPIC_CONFIG,
    NAMESPACE_SETTING,
    STALE_CLIENT_SECONDS,
    TIMEOUT_SECONDS,
    TRANSIENT,
    UNKNOWN_PART,
    internal_prefix,
    kafka_error,
    translate,
    watermarks,
)
from streamrep.store.kafka.folds import CatalogFold, Fold, MarksFold, SyncsFold
from streamrep.store.kafka.installations import Installations
from streamrep.store.kafka.reader import SharedReader
from streamrep.store.kafka.transactions import Transaction, Transactions

_F = TypeVar("_F", bound=Fold)


class KafkaCore(Store):
    """A Kafka-API cluster's clients and shared state, made from ``KafkaStore``'s parameters."""

    def __init__(
        self, cluster: str, bootstrap: str, settings: Mapping[str, Any] | None = None, create_internal: bool = True
    ):
        super().__init__(cluster)
        self.create_internal = create_internal  # False: a reader that must change nothing (the page)
        self.read_only = not create_internal
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
        internal = internal_prefix(self.namespace)
        self._internal = internal
        self.acls = KafkaAcls(self, self._admin, self._own)
        self._topics = {name: internal + name for name in ("catalog", "marks", "syncs")}
        self._lock = threading.RLock()
        self._broker_checked = False  # versions.check_cluster, at the first client this object makes
        self._reset()

    def _reset(self) -> None:
        """Forget every client and what was read with them: at construction, after a fork, on close."""
        self._pid = os.getpid()
        self._admin_client: AdminClient | None = None
        self._plain_producer: Producer | None = None
        self._meta_consumer: Consumer | None = None
        self._uncommitted_consumer: Consumer | None = None  # sees the high watermark, not the LSO
        self._transactions = Transactions(self)
        self._reader = SharedReader(self)
        self._folds: dict[str, Fold] = {}
        self._internal_ready = False
        self._namings: dict[str, TopicNaming] = {}  # stream uuid -> naming, kept after a stream is deleted
        self._installations = Installations(self)  # what other installations on the brokers hold

    @property
    def internal_prefix(self) -> str:
        """The prefix of this installation's internal topics and transactional ids."""
        return self._internal

    def _fresh(self) -> None:
        if self._pid != os.getpid():  # librdkafka handles do not survive a fork
            self._reset()
        if not self._broker_checked:  # before the first client: a broker too old is refused in one line
            with self._errors("cannot connect"):  # its refusals, as every call's, name the cluster
                versions.check_cluster(self.bootstrap, self._client)
            self._broker_checked = True

    # -- clients -------------------------------------------------------------------
    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Kafka's errors as streamrep's one-line errors."""
        try:
            yield
        except KafkaException as exc:
            raise self._translate(exc, what) from None

    def _translate(self, exc: Any, what: str) -> StreamrepError | RetryNow:
        """A Kafka error as streamrep's one line naming its cause (``client.translate``)."""
        return translate(
            exc,
            what,
            cluster=self.cluster,
            bootstrap=self.bootstrap,
            settings=self._settings,
            internal_prefix=self._internal,
        )

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

    # -- internal topics -----------------------------------------------------------
    def _ensure_internal(self) -> None:
        if self._internal_ready:
            return
        with self._errors("cannot read topics"):
            existing = self._admin().list_topics(timeout=TIMEOUT_SECONDS).topics
        missing = [
            NewTopic(name, 1, config=INTERNAL_TOPIC_CONFIG) for name in self._topics.values() if name not in existing
        ]
        if missing and not self.create_internal:
            raise Unavailable(
                f"cluster {self.cluster}: {self.bootstrap} holds no streamrep catalog of this installation "
                f"(topic {missing[0].topic} is missing): check its namespace, or add the cluster with 'cluster add'"
            )
        if missing:
            for name, future in self._admin().create_topics(missing, request_timeout=TIMEOUT_SECONDS).items():
                try:
                    future.result()
                except KafkaException as exc:
                    err = kafka_error(exc)
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

    def _fold(self, name: str, kind: type[_F]) -> _F:
        self._fresh()
        fold = self._folds.get(name)
        if fold is None:
            self._ensure_internal()
            fold = self._folds[name] = kind(self, self._topics[name])
        return cast("_F", fold)  # each topic's fold is of the one kind its accessor names

    def _marks_fold(self) -> MarksFold:
        return self._fold("marks", MarksFold)

    def _syncs_fold(self) -> SyncsFold:
        return self._fold("syncs", SyncsFold)

    # -- transactions ----------------------------------------------------------------
    def _transaction(
        self, txid: str, reads: str, compression: str | None = None
    ) -> AbstractContextManager[Transaction]:
        """``Transactions.transaction``, on this process's clients."""
        self._fresh()
        return self._transactions.transaction(txid, reads, compression)

    def _catalog(self) -> dict[tuple[str, str], CatalogDoc]:
        fold = self._fold("catalog", CatalogFold)
        fold.catch_up()
        return fold.state

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

    def _held(self, naming: TopicNaming) -> dict[str, int]:
        """The Kafka topics of ``naming`` that no other installation holds: name -> partition count."""
        listed = self._kafka_topics()
        names = [name for name in listed if naming.topic_of(name) is not None]
        foreign = self._installations.foreign(naming, names, listed)
        return {name: listed[name] for name in names if name not in foreign}

    def _kafka_name(self, stream: str, topic: str) -> str:
        """The Kafka topic of the stream's ``topic``; NotFound if another installation holds it."""
        naming = self._naming(stream)
        name = naming.kafka_topic(topic)
        claim = self._installations.foreign(naming, [name]).get(name)
        if claim is not None:
            raise NotFound(
                f"topic {topic} does not exist: Kafka topic {name} belongs to {claim.whose} on the same brokers"
            )
        return name

    def _kafka_topics(self) -> dict[str, int]:
        with self._errors("cannot read topics"):
            metadata = self._admin().list_topics(timeout=TIMEOUT_SECONDS)
        return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}

    def _flush(self, producer: Producer, what: str) -> None:
        with self._errors(what):
            left = producer.flush(TIMEOUT_SECONDS)
        if left:
            raise Unavailable(
                f"cluster {self.cluster}: {what}: {left} messages not acknowledged within "
                f"{TIMEOUT_SECONDS:.0f} s (is Kafka at {self.bootstrap} up?)"
            )

    def _watermarks(self, name: str, partition: int, topic: str, uncommitted: bool = False) -> tuple[int, int]:
        """``(first offset held, last stable offset)`` of a Kafka partition (the high watermark instead,
        with ``uncommitted``). A partition just created may have no leader yet: asked again. A client
        whose answer stays transient past ``STALE_CLIENT_SECONDS`` is replaced: after a broker's kill and
        restart, librdkafka's metadata cache was seen to say "Unknown partition" for minutes, through
        every metadata refresh, while a new client read the same partition at once."""
        deadline = time.monotonic() + TIMEOUT_SECONDS
        replace_at = time.monotonic() + STALE_CLIENT_SECONDS
        while True:
            consumer = self._uncommitted() if uncommitted else self._meta()
            try:
                return watermarks(consumer, name, partition)
            except KafkaException as exc:
                err = kafka_error(exc)
                code = err.code() if err is not None else None
                if code not in TRANSIENT or time.monotonic() >= deadline:
                    raise self._translate(exc, f"cannot read offsets of {name}") from None
                if code in UNKNOWN_PART:
                    missing = self._no_partition(name, topic, partition)
                    if missing is not None:
                        raise missing from None
                    with self._errors(f"cannot read metadata of {name}"):  # added since the client last looked
                        consumer.list_topics(name, timeout=TIMEOUT_SECONDS)
                if time.monotonic() >= replace_at:
                    self._drop_offsets_client(uncommitted)
                    replace_at = time.monotonic() + STALE_CLIENT_SECONDS
                time.sleep(0.05)

    def _no_partition(self, name: str, topic: str, partition: int) -> NotFound | None:
        """NotFound if Kafka topic ``name`` (``topic``) has no ``partition``; None if it has (a client's
        stale metadata said otherwise). An internal topic exists once ``_ensure_internal`` returned: a
        broker whose metadata does not show it yet lags (seen under load on three brokers)."""
        if name in self._topics.values():
            return None
        if self._kafka_topics().get(name, 0) <= partition:
            return NotFound(f"topic {topic} has no partition {partition}")
        return None

    def _drop_offsets_client(self, uncommitted: bool) -> None:
        """Close the cached client that reads offsets (the next call makes a new one)."""
        if uncommitted:
            stale, self._uncommitted_consumer = self._uncommitted_consumer, None
        else:
            stale, self._meta_consumer = self._meta_consumer, None
        if stale is not None:
            stale.close()

    def close(self) -> None:
        if self._pid == os.getpid():
            for fold in self._folds.values():
                fold.close()
            self._installations.close()
            self._reader.close()
            if self._meta_consumer is not None:
                self._meta_consumer.close()
            if self._uncommitted_consumer is not None:
                self._uncommitted_consumer.close()
            if self._plain_producer is not None:
                self._plain_producer.flush(TIMEOUT_SECONDS)
        self._reset()

    def __getstate__(self) -> dict[str, Any]:
        # Pickled into Spark tasks: clients are opened again where the store is used.
        return {
            "cluster": self.cluster,
            "bootstrap": self.bootstrap,
            "settings": {**self._settings, **self._own, NAMESPACE_SETTING: self.namespace},
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        KafkaCore.__init__(self, state["cluster"], state["bootstrap"], state["settings"])
