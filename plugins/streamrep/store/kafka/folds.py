"""The folds of the Kafka store's three internal topics: catalog, marks and offset syncs.

Invariants:

- Each internal topic has one partition and is compacted; its records' formats are ``keys``'.
- A fold reads committed records only (read_committed), in offset order, and applies each as a
  replace-or-delete of its key: folding a record twice gives the same state (a consumer that
  restarts from the earliest offset only replays), so positions never have to be exact.
- ``catch_up`` reads up to the last stable offset read when it is called: after it, the state
  holds every transaction committed before the call.
"""

from __future__ import annotations

import json
import time

from confluent_kafka import KafkaError, TopicPartition

import streamrep.store.kafka.keys as keys
from streamrep.errors import Unavailable
from streamrep.model.catalog import STREAM_KIND
from streamrep.store.base import CatalogDoc
from streamrep.store.kafka.client import TIMEOUT_SECONDS, fetched
from streamrep.store.kafka.parts import StoreCore


class Fold:
    """The state of one internal compacted topic, folded from its committed records."""

    def __init__(self, store: StoreCore, name: str):
        self.store = store
        self.name = name
        self.position = 0
        self.consumer = store._consumer()
        self.consumer.assign([TopicPartition(name, 0, 0)])

    def _renew(self) -> None:
        """A new consumer from the position reached: one that fetched nothing for a whole
        ``catch_up`` may hold stale metadata after a broker restart (see ``KafkaStore._watermarks``)."""
        stale, self.consumer = self.consumer, self.store._consumer()
        self.consumer.assign([TopicPartition(self.name, 0, self.position)])
        stale.close()

    def catch_up(self) -> None:
        """Read every record committed before now (up to the last stable offset)."""
        store = self.store
        _, end = store._watermarks(self.name, 0, self.name)
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while self.position < end:
            if time.monotonic() > deadline:
                self._renew()
                raise Unavailable(
                    f"cluster {store.cluster}: reading {self.name} timed out at offset {self.position} of {end}"
                )
            with store._errors(f"cannot read {self.name}"):
                batch = fetched(self.consumer, 10000)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise store._translate(err, f"cannot read {self.name}")
                key, offset = msg.key(), msg.offset()
                assert key is not None and offset is not None  # a consumed record streamrep wrote has both
                self.apply(key.decode("utf-8"), msg.value())
                self.position = offset + 1
            with store._errors(f"cannot read {self.name}"):
                at = self.consumer.position([TopicPartition(self.name, 0)])[0].offset
            if at > self.position:
                self.position = at  # past transaction markers

    def apply(self, key: str, value: bytes | None) -> None:
        """Fold one record (None: a tombstone)."""
        raise NotImplementedError

    def close(self) -> None:
        self.consumer.close()


class CatalogFold(Fold):
    """``state``: every catalog document by ``(kind, key)``.

    :param learn: the store's own catalog: its streams' namings are the store's (``KafkaStore._learn``);
        another installation's catalog is folded read-only.
    """

    def __init__(self, store: StoreCore, name: str, learn: bool = True):
        super().__init__(store, name)
        self.learn = learn
        self.state: dict[tuple[str, str], CatalogDoc] = {}

    def apply(self, key: str, value: bytes | None) -> None:
        doc_key = keys.parse_catalog_key(key)
        if value is None:
            self.state.pop(doc_key, None)
            return
        doc = json.loads(value)
        self.state[doc_key] = doc
        if doc_key[0] == STREAM_KIND and self.learn:
            self.store._learn(doc)


class MarksFold(Fold):
    """``state``: every stream's replication marks, by stream UUID and mark."""

    def __init__(self, store: StoreCore, name: str):
        super().__init__(store, name)
        self.state: dict[str, dict[str, int]] = {}

    def apply(self, key: str, value: bytes | None) -> None:
        stream, mark = keys.parse_mark_key(key)
        marks = self.state.setdefault(stream, {})
        if value is None:
            marks.pop(mark, None)
        else:
            marks[mark] = keys.parse_mark_value(value)


class SyncsFold(Fold):
    """``state``: every stream's offset syncs: stream UUID -> source -> source offset ->
    ``(replica partition, replica offset, run length)``."""

    def __init__(self, store: StoreCore, name: str):
        super().__init__(store, name)
        self.state: dict[str, dict[str, dict[int, tuple[int, int, int]]]] = {}

    def apply(self, key: str, value: bytes | None) -> None:
        stream, source, offset = keys.parse_sync_key(key)
        runs = self.state.setdefault(stream, {}).setdefault(source, {})
        if value is None:
            runs.pop(offset, None)
        else:
            runs[offset] = keys.parse_sync_value(value)
