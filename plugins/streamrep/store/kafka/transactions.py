"""Kafka transactions and fencing: the store's compare-and-set.

Invariants:

- Every write that must not be lost to a concurrent writer is one Kafka transaction whose
  transactional id names the thing written (``keys.catalog_txid``, ``keys.apply_txid``).
  ``init_transactions`` fences every older writer of that id: its later commit fails.
- A new writer reads the state only after fencing, and after every record already in the internal
  topic it decides on is committed or aborted (``await_decided``), so it sees the previous writer's
  last commit and the state cannot change under it until it commits.
- A transaction returns only once its internal records are readable (``_await_visible``): the next
  read, by this process or another, sees what was just written. A commit not yet readable drops its
  producer, so the next transaction of that id starts a new one that waits for it.
- A writer that finds itself fenced raises RetryNow, and the caller retries from the stored state.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

import streamrep.store.kafka.keys as keys
from streamrep.errors import RetryNow, Unavailable
from streamrep.store.kafka.client import (
    FENCED,
    FENCING_RACE,
    MAX_TRANSACTIONAL_PRODUCERS,
    TIMEOUT_SECONDS,
    kafka_error,
)
from streamrep.store.kafka.parts import StoreCore

# A writer killed inside a transaction holds back the last stable offset of every topic it wrote (every
# reader of the catalog or marks) until Kafka aborts it: after this timeout, at the broker's next
# check (transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by default).
TRANSACTION_TIMEOUT_MS = 10000
VISIBLE_WITHIN_SECONDS = TRANSACTION_TIMEOUT_MS / 1000 + 10.0 + 10.0  # a committed write waits out a dead one


class Transaction:
    """The records of one transaction; remembers the last offset written to each internal topic."""

    def __init__(self, topics: Mapping[str, str], producer: Producer, txid: str):
        self.topics = topics  # internal topic kind -> its Kafka topic
        self.producer = producer
        self.txid = txid
        self.last_offsets: dict[str, int] = {}

    def internal(self, kind: str, key: str, value: bytes | None, record_format: int = 1) -> None:
        """Write one record (``keys``' format ``record_format``; None: a tombstone) to internal topic ``kind``."""
        name = self.topics[kind]
        headers: list[tuple[str, str | bytes | None]] | None = None
        if record_format > 1:
            headers = [(keys.FORMAT_HEADER, str(record_format).encode("ascii"))]

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self.last_offsets[name] = max(self.last_offsets.get(name, -1), msg.offset())

        self.producer.produce(name, key=key.encode("utf-8"), value=value, headers=headers, on_delivery=delivered)


class Transactions:
    """The transactional producers of one store object, by transactional id; the least recently
    used are closed beyond ``MAX_TRANSACTIONAL_PRODUCERS``. Made anew when the store is reset
    (librdkafka handles do not survive a fork)."""

    def __init__(self, store: StoreCore):
        self.store = store
        self._producers: OrderedDict[str, Producer] = OrderedDict()
        self._codecs: dict[str, str] = {}  # txid -> the compression.type its cached producer writes with

    def producer(self, txid: str, reads: str, compression: str | None = None) -> Producer:
        """The transactional producer of ``txid``, initialised (which fences every older one).

        :param reads: the internal topic (``catalog``, ``marks``) whose state this id's writes are decided on.
        :param compression: the ``compression.type`` its records must be written with; None: any
            (a new producer gets librdkafka's default, none).
        """
        producer = self._producers.get(txid)
        if producer is not None and compression is not None and self._codecs.get(txid) != compression:
            # A producer's codec is fixed when it is made: a replica now written with another one
            # gets a new producer of the same id, whose init fences the old one (between transactions).
            self._producers.pop(txid).flush(0)
            producer = None
        if producer is not None:
            self._producers.move_to_end(txid)
            return producer
        # None keeps the cluster's client settings (librdkafka's default: none)
        codec = compression or str(self.store._client.get("compression.type", "none"))
        producer = Producer(
            {
                **self.store._client,
                "transactional.id": txid,
                "linger.ms": 2,
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "compression.type": codec,
            }
        )
        with self.store._errors("cannot start a transaction"):
            # Connected first: librdkafka otherwise often waits its 500 ms coordinator timer. One
            # small topic's metadata: every topic's costs the CPU of all their partitions' (1,024+).
            producer.list_topics(self.store._topics[reads], timeout=TIMEOUT_SECONDS)
            producer.init_transactions(TIMEOUT_SECONDS)
        self.await_decided(reads)
        self._producers[txid] = producer
        self._codecs[txid] = codec
        while len(self._producers) > MAX_TRANSACTIONAL_PRODUCERS:
            evicted, oldest = self._producers.popitem(last=False)
            self._codecs.pop(evicted, None)
            oldest.flush(0)
        return producer

    def prepare(self, txid: str, reads: str, compression: str | None = None) -> bool:
        """Make ``txid``'s producer ready before its first transaction (as ``producer``), while the
        cache has room for it: a prepared producer the cache would evict at once is wasted work.
        Returns whether it was made now."""
        if txid in self._producers or len(self._producers) >= MAX_TRANSACTIONAL_PRODUCERS:
            return False
        self.producer(txid, reads, compression)
        return True

    def await_decided(self, kind: str) -> None:
        """Wait until every record already in internal topic ``kind`` is committed or aborted (its last
        stable offset reaches the high watermark read now). A new writer of an id reads the state after
        fencing the previous one, and must see that writer's last commit; but any other open transaction
        (one whose writer was killed inside it lasts until Kafka aborts it) holds the last stable offset,
        and so every read_committed reader, below that commit."""
        self.store._ensure_internal()
        name = self.store._topics[kind]
        high = self.store._watermarks(name, 0, name, uncommitted=True)[1]
        deadline = time.monotonic() + VISIBLE_WITHIN_SECONDS
        while self.store._watermarks(name, 0, name)[1] < high:
            if time.monotonic() > deadline:
                raise Unavailable(
                    f"cluster {self.store.cluster}: a transaction on {name} stayed open for "
                    f"{VISIBLE_WITHIN_SECONDS:.0f} s; try again"
                )
            time.sleep(0.005)

    @contextmanager
    def transaction(self, txid: str, reads: str, compression: str | None = None) -> Iterator[Transaction]:
        """One transaction of ``txid``; ``RetryNow`` if another writer fenced this one (retry from the new state).
        It returns once its internal records are readable: Kafka writes commit markers after the commit
        returns, and the next read (by this process or another) must see what was just written.

        :param compression: as ``producer``.
        """
        txn = self.begin(txid, reads, compression)
        try:
            yield txn
            self.commit(txn)
        except BaseException as exc:
            failure = self.fail(txn, exc)
            if failure is exc:
                raise
            raise failure from None
        self.visible([txn])

    def begin(self, txid: str, reads: str, compression: str | None = None) -> Transaction:
        """Begin a transaction of ``txid`` (as ``transaction``, in steps: several of them may be open at
        once, one per id); end it with ``commit`` then ``visible``, or ``fail``."""
        producer = self.producer(txid, reads, compression)
        txn = Transaction(self.store._topics, producer, txid)
        try:
            producer.begin_transaction()
        except BaseException as exc:  # noqa: BLE001  # not swallowed: aborted, then raised as ``fail`` translates it
            raise self.fail(txn, exc) from None
        return txn

    def commit(self, txn: Transaction) -> None:
        """Commit ``txn``: its records delivered, then its commit. Not yet readable (``visible``)."""
        txn.producer.flush(TIMEOUT_SECONDS)  # serves the delivery reports that give the offsets
        self._commit(txn.producer)

    def fail(self, txn: Transaction, exc: BaseException) -> BaseException:
        """Abort ``txn``, which ``exc`` ended, and return what to raise for it: ``RetryNow`` if another
        writer fenced this one, the store's error for a Kafka error, else ``exc`` itself."""
        producer, txid = txn.producer, txn.txid
        fenced = False
        try:
            producer.abort_transaction(TIMEOUT_SECONDS)
        except KafkaException as refused:  # fenced, fatal, or a commit still under way: the next transaction
            # starts a new producer, whose init_transactions waits until this one's transaction has ended
            self._producers.pop(txid, None)
            err = kafka_error(refused)
            fenced = err is not None and err.code() in FENCED
        else:
            if not isinstance(exc, RetryNow):  # a failure, not a lost race: its client may be stale
                self._producers.pop(txid, None)  # (see KafkaStore._watermarks); the next gets a new one
        if fenced and err is not None and isinstance(exc, Exception):
            # Another writer of this id (another process applying this replica partition: Spark gives a
            # gateway's tasks to any idle Python worker) fenced this cached producer since its last
            # transaction. librdkafka then fails the produce ("Local: Fatal error"), or a delivery
            # report during flush, before the commit could say "fenced". ``RetryNow`` makes the caller
            # retry at once from the stored state, read again by a new producer after it fenced the
            # other (so exact whether or not anything committed), instead of failing the replica.
            return RetryNow(f"cluster {self.store.cluster}: another writer took over ({err.str()}); retry")
        if isinstance(exc, KafkaException):
            err = kafka_error(exc)
            if err is not None and err.txn_requires_abort() and err.code() in FENCING_RACE:
                return RetryNow(
                    f"cluster {self.store.cluster}: another writer took over (transaction aborted: {err.str()}); retry"
                )
            return self.store._translate(exc, "transaction failed")
        return exc

    def visible(self, txns: Sequence[Transaction]) -> None:
        """Return once the internal records of every committed ``txns`` are readable."""
        last: dict[str, int] = {}
        for txn in txns:
            for name, offset in txn.last_offsets.items():
                last[name] = max(last.get(name, -1), offset)
        try:
            self._await_visible(last)
        except BaseException:
            # Committed, but not yet readable: Kafka writes the commit markers after the commit returns
            # (after a broker restart, only once its coordinator has reloaded the transaction). Until
            # then the last stable offset stops before this commit, so a next transaction of this
            # producer would read the state from before it and compare-and-set against that (a
            # replayed batch). A new producer's init_transactions waits for the commit to complete,
            # and await_decided for it to be readable.
            for txn in txns:
                self._producers.pop(txn.txid, None)
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
                err = kafka_error(exc)
                if err is None or not err.retriable() or err.txn_requires_abort() or time.monotonic() > deadline:
                    raise

    def _await_visible(self, last_offsets: Mapping[str, int]) -> None:
        """Wait until each internal topic's last stable offset is past the given record."""
        deadline = time.monotonic() + VISIBLE_WITHIN_SECONDS
        for name, offset in last_offsets.items():
            while self.store._watermarks(name, 0, name)[1] <= offset:
                if time.monotonic() > deadline:
                    raise Unavailable(
                        f"cluster {self.store.cluster}: a committed write to {name} did not become readable "
                        f"within {VISIBLE_WITHIN_SECONDS:.0f} s"
                    )
                time.sleep(0.0005)
