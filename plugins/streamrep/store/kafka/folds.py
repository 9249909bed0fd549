"""The folds of the Kafka store's three internal topics: catalog, marks and offset syncs.

Invariants:

- Each internal topic has one partition and is compacted; its records' formats are ``keys``'.
- A fold reads committed records only (read_committed), in offset order, and applies each as a
  replace-or-delete of its key: folding a record twice gives the same state (a consumer that
  restarts from the earliest offset only replays), so positions never have to be exact.
- ``catch_up`` reads up to the last stable offset read when it is called: after it, the state
  holds every transaction committed before the call.
- **A record the fold cannot parse is skipped**, and the records around it still count: no key, a
  key or value not in ``keys``' format, a catalog document ``check_document`` refuses (wrong shape),
  a value too deep or too big to parse. Streamrep never writes one; whoever else may write the topic
  can (issue 29: one such record stopped every command of its installation, and ``stream create``
  of every other installation on the brokers, which folds their catalogs). Skipping it changes
  nothing that such a writer could not change with a well-formed record. It is reported once per
  process: a warning naming the topic, partition, offset and why.
- **A record of a newer format** (``keys.FORMAT_HEADER`` above ``keys.FORMAT``) is neither folded
  nor silently dropped: what it names is held back (``newer``), and reading that catalog document,
  or that stream's marks or offset syncs, is refused in one line until streamrep is upgraded
  (``refuse_newer``); everything else keeps working. Skipping it could lose state: an older fold
  without a newer writer's mark would apply a batch again (a duplicate), and one without its
  catalog document would let a command write over it. Refusing the whole installation would let
  one record stop it all again. The key's format stays in every format (``keys``), so the fold can
  tell what the record names; a newer record whose key does not parse is skipped as above.
"""

from __future__ import annotations

import json
import logging
import time
from typing import NamedTuple, cast

from confluent_kafka import KafkaError, Message, TopicPartition

import streamrep.store.kafka.keys as keys
from streamrep.errors import CorruptStore, Unavailable
from streamrep.model.catalog import STREAM_KIND, check_document
from streamrep.store.base import CatalogDoc
from streamrep.store.kafka.client import TIMEOUT_SECONDS, fetched
from streamrep.store.kafka.parts import StoreCore

log = logging.getLogger(__name__)
# Records already reported by this process, by (topic, partition, offset): each store object, and
# each of a command's folds of another installation's catalog, folds the same records again.
_reported: set[tuple[str, int, int]] = set()
# What parsing a hostile value can raise (RecursionError: JSON nested too deep; OverflowError and
# MemoryError: numbers or strings too big), beside the ValueError of a format not kept.
_UNPARSABLE: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    RecursionError,
    OverflowError,
    MemoryError,
)


def report(topic: str, partition: int, offset: int, why: str) -> None:
    """Warn, once per process, that record ``offset`` of ``topic``/``partition`` was not folded."""
    if (topic, partition, offset) in _reported:
        return
    _reported.add((topic, partition, offset))
    why = " ".join(why.split())[:300]  # one line
    log.warning("streamrep: %s partition %d offset %d: %s", topic, partition, offset, why)


class Newer(NamedTuple):
    """A record of a newer format, held back: what it names (``Fold.scope``), its format and offset."""

    scope: tuple[str, ...]
    format: int
    offset: int


class Fold:
    """The state of one internal compacted topic, folded from its committed records."""

    def __init__(self, store: StoreCore, name: str):
        self.store = store
        self.name = name
        self.position = 0
        self.newer: dict[str, Newer] = {}  # record key -> the newer-format record last written there
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
                offset = cast("int", msg.offset())  # a record consumed without an error has one
                try:
                    self._take(msg, offset)
                except _UNPARSABLE as bad:  # not streamrep's: skipped, and the next records still count
                    report(self.name, 0, offset, f"skipped, not a record of this streamrep: {_why(bad)}")
                self.position = offset + 1
            with store._errors(f"cannot read {self.name}"):
                at = self.consumer.position([TopicPartition(self.name, 0)])[0].offset
            if at > self.position:
                self.position = at  # past transaction markers

    def _take(self, msg: Message, offset: int) -> None:
        """Fold ``msg`` (at ``offset``), or hold it back if it is of a newer format; ``_UNPARSABLE`` if it is
        no record of ours."""
        raw = msg.key()
        if raw is None:
            raise ValueError("the record has no key")
        try:
            key = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the key is not UTF-8") from None
        version = keys.record_format(msg.headers())  # type: ignore[arg-type]  # a list of pairs when consumed
        if version > keys.FORMAT:
            scope = self.scope(key)
            self.apply(key, None)  # its older version is not served in its stead either
            self.newer[key] = Newer(scope, version, offset)
            report(
                self.name,
                0,
                offset,
                f"written by a newer streamrep (format {version}; this one reads format {keys.FORMAT}): "
                f"{' '.join(scope)[:120]} is refused until streamrep is upgraded",
            )
            return
        self.apply(key, msg.value())
        self.newer.pop(key, None)  # replaced, or deleted, in a format this streamrep reads

    def scope(self, key: str) -> tuple[str, ...]:
        """What record key ``key`` names, as far as a newer format's record holds it back."""
        raise NotImplementedError

    def apply(self, key: str, value: bytes | None) -> None:
        """Fold one record (None: a tombstone); change nothing if it raises."""
        raise NotImplementedError

    def refuse_newer(self, *scope: str) -> None:
        """CorruptStore if a record of a newer format holds back ``scope`` or anything within it."""
        for held in self.newer.values():
            if held.scope[: len(scope)] == scope:
                raise CorruptStore(
                    f"cluster {self.store.cluster}: {' '.join(held.scope)[:120]} was written by a newer "
                    f"streamrep (format {held.format}, {self.name} offset {held.offset}); upgrade streamrep"
                )

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

    def scope(self, key: str) -> tuple[str, ...]:
        kind, doc_key = keys.parse_catalog_key(key)
        return "catalog document", kind, doc_key

    def apply(self, key: str, value: bytes | None) -> None:
        doc_key = keys.parse_catalog_key(key)
        if value is None:
            self.state.pop(doc_key, None)
            return
        doc = json.loads(value)
        check_document(*doc_key, doc)
        self.state[doc_key] = doc
        if doc_key[0] == STREAM_KIND and self.learn:
            self.store._learn(doc)


class MarksFold(Fold):
    """``state``: every stream's replication marks, by stream UUID and mark."""

    def __init__(self, store: StoreCore, name: str):
        super().__init__(store, name)
        self.state: dict[str, dict[str, int]] = {}

    def scope(self, key: str) -> tuple[str, ...]:
        return "the replication marks of stream", keys.parse_mark_key(key)[0]

    def apply(self, key: str, value: bytes | None) -> None:
        stream, mark = keys.parse_mark_key(key)
        if value is None:
            self.state.get(stream, {}).pop(mark, None)
        else:
            self.state.setdefault(stream, {})[mark] = keys.parse_mark_value(value)


class SyncsFold(Fold):
    """``state``: every stream's offset syncs: stream UUID -> source -> source offset ->
    ``(replica partition, replica offset, run length)``."""

    def __init__(self, store: StoreCore, name: str):
        super().__init__(store, name)
        self.state: dict[str, dict[str, dict[int, tuple[int, int, int]]]] = {}

    def scope(self, key: str) -> tuple[str, ...]:
        stream, source, _ = keys.parse_sync_key(key)
        return "the offset syncs of stream", stream, "from", source

    def apply(self, key: str, value: bytes | None) -> None:
        stream, source, offset = keys.parse_sync_key(key)
        if value is None:
            self.state.get(stream, {}).get(source, {}).pop(offset, None)
        else:
            sync = keys.parse_sync_value(value)
            self.state.setdefault(stream, {}).setdefault(source, {})[offset] = sync


def _why(err: BaseException) -> str:
    if isinstance(err, UnicodeDecodeError):
        return "the value is not UTF-8"
    if isinstance(err, json.JSONDecodeError):
        return f"the value is not JSON ({err.msg} at byte {err.pos})"
    if isinstance(err, RecursionError):
        return "the value is nested too deep to parse"
    if isinstance(err, MemoryError):
        return "the value is too big to parse"
    return str(err) if isinstance(err, ValueError) else f"{type(err).__name__}: {err}"
