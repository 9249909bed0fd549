"""The Kafka store: a Kafka-API cluster (Apache Kafka, HPE Data Fabric's Kafka API, Redpanda) behind
the store interface, over confluent-kafka.

- **Topics.** Each stream's topics are Kafka topics named by the stream's naming policy
  (``model/naming.py``), so existing topics can be adopted as they are.
- **Catalog, marks, offset syncs** live in the cluster, in three single-partition compacted topics
  ``_streamrep[.<namespace>].catalog|marks|syncs``. Every store object folds them into memory and
  catches up to the last stable offset before it answers, reading committed data only. A record
  there that streamrep cannot read is skipped, or held back if of a newer format (``folds``).
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
``streamrep.namespace`` is streamrep's own: it lets several installations share one Kafka cluster,
each owning its topics (``installations``).

The store is split into modules, each stating its invariants. ``KafkaStore`` is the Store's methods
from one mixin each over ``core`` (the clients, the internal topics and their folds, each stream's
naming): ``catalog`` (the catalog documents), ``topics`` (a stream's Kafka topics), ``messages``
(appends and reads), ``offsets`` (partitions' bounds, many at once, and retention) and ``cursors``
(consumer groups); this module holds the replication marks and the transactional apply. Beside them:
``keys`` (the internal records' and transactional ids' formats), ``transactions`` (compare-and-set
by fencing), ``folds`` (the internal topics read into memory), ``installations`` (what other
installations on the brokers hold), ``acls`` (Kafka ACLs kept in step with the catalog), ``reader``
(one consumer for every partition read), ``serialized`` (one thread at a time per store object, for
every public method) and ``client`` (settings and Kafka's errors).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, cast

from confluent_kafka import KafkaError, Producer

import streamrep.store.kafka.keys as keys
from streamrep.errors import Conflict, RetryNow, StreamrepError
from streamrep.model.offsetsyncs import prune
from streamrep.model.replication import mark_partition
from streamrep.store.base import ApplyResult, PartitionApplies, ReplicaApply
from streamrep.store.kafka.catalog import KafkaCatalog
from streamrep.store.kafka.client import CATALOG_RETRIES, MAX_TRANSACTIONAL_PRODUCERS, TIMEOUT_SECONDS
from streamrep.store.kafka.cursors import KafkaCursors
from streamrep.store.kafka.folds import SyncsFold
from streamrep.store.kafka.messages import KafkaMessages
from streamrep.store.kafka.offsets import KafkaOffsets
from streamrep.store.kafka.serialized import serialized
from streamrep.store.kafka.topics import KafkaTopics
from streamrep.store.kafka.transactions import TRANSACTION_TIMEOUT_MS, Transaction

# After another writer wrote into a replica partition between two applies of this store (a takeover, or
# local producers to a multi-master replica), its offsets are not guessed for this long (_apply_round).
UNGUESSED_SECONDS = 60.0
FENCE_THREADS = 32  # producers initialised at once to fence a replica's pre-lane ids (``_to_lanes``)


@serialized
class KafkaStore(KafkaCatalog, KafkaTopics, KafkaMessages, KafkaOffsets, KafkaCursors):
    """A Kafka-API cluster. The replication marks and the transactional apply are this class's own;
    every other method of the Store comes from one of its mixins.

    :param cluster: the cluster's name (used in messages).
    :param bootstrap: ``host:port[,host:port...]``.
    :param settings: confluent-kafka client settings, passed through; ``streamrep.namespace`` is ours.
    :param create_internal: False for a reader that must change nothing (the page).
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        serialized(cls)  # a subclass's own public methods hold the lock too

    def _reset(self) -> None:
        super()._reset()
        # The offset the next apply into a replica partition gets if nobody else writes there (after its last
        # commit, whose marker takes one offset), and until when (monotonic) it is not guessed for a partition
        # where another writer proved it wrong.
        self._next_offsets: dict[tuple[str, int], int] = {}
        self._unguessed_until: dict[tuple[str, int], float] = {}
        self._laned: set[str] = set()  # replica streams whose writers are known to use lane ids (``_to_lanes``)

    # -- replication marks ---------------------------------------------------------
    def marks(self, stream: str) -> dict[str, int]:
        fold = self._marks_fold()
        fold.catch_up()
        fold.refuse_newer("the replication marks of stream", stream)  # an apply from stale marks would repeat
        return {key: value for key, value in fold.state.get(stream, {}).items() if key != keys.LANES_MARK}

    def _to_lanes(self, streams: Iterable[str]) -> None:
        """Make sure every writer of each replica stream writes under lane ids (``keys.apply_txid``),
        once per stream ever. A streamrep from before lanes writes a partition under an id of its
        own, which a lane's id does not fence. So ``keys.LANES_MARK`` (format 2) is written first: such
        a streamrep refuses the stream's marks from then on, so it starts no apply there. Then every
        partition's old id is fenced, so that none of its transactions still open can commit. The
        mark says when that is done; a writer that finds it only marked (the last one died in
        between) fences again."""
        for stream in sorted(set(streams) - self._laned):
            fold = self._marks_fold()
            fold.catch_up()
            state = fold.state.get(stream, {}).get(keys.LANES_MARK)
            if state != keys.LANES_FENCED:
                if state is None:
                    self._write_lanes_mark(stream, keys.LANES_MARKED)
                self._fence_partition_writers(stream)
                self._write_lanes_mark(stream, keys.LANES_FENCED)
            self._laned.add(stream)

    def _born_laned(self, txn: Transaction, stream: str) -> None:
        """Mark a new stream as written under lane ids, in the transaction that creates it: no
        streamrep from before lanes ever saw its UUID, so there is no per-partition id to fence (at
        1,024 partitions that fence was a third of a first drain's CPU)."""
        mark = keys.mark_value(keys.LANES_FENCED)
        txn.internal("marks", keys.mark_key(stream, keys.LANES_MARK), mark, keys.LANES_FORMAT)

    def _write_lanes_mark(self, stream: str, value: int) -> None:
        with self._transaction(keys.lanes_txid(self._internal, stream), "marks") as txn:
            txn.internal("marks", keys.mark_key(stream, keys.LANES_MARK), keys.mark_value(value), keys.LANES_FORMAT)

    def _fence_partition_writers(self, stream: str) -> None:
        """Fence every writer of ``stream``'s partitions under their pre-lane ids (``keys.partition_txid``):
        a producer of each id is initialised, which aborts its open transaction, and closed."""
        ids = [
            keys.partition_txid(self._internal, stream, topic, partition)
            for topic, count in self.topics(stream).items()
            for partition in range(count)
        ]

        def fence(txid: str) -> None:
            producer = Producer(
                {**self._client, "transactional.id": txid, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS}
            )
            with self._errors(f"cannot fence the writers of stream {stream}"):
                producer.init_transactions(TIMEOUT_SECONDS)

        with ThreadPoolExecutor(FENCE_THREADS) as pool:
            list(pool.map(fence, ids))

    def apply_partitions(self, batches: Sequence[PartitionApplies]) -> list[list[ApplyResult]]:
        """Each apply goes in the transaction of its replica partition's lane (``keys.apply_txid``):
        one transaction per lane and round, holding every partition of that lane the round applies.
        Applies that write one replica partition, or write or expect one mark, go in successive
        rounds (``_rounds``), so each sees the one before it."""
        tasks = [_ApplyTask(b.topic, b.partition, b.source, a) for b in batches for a in b.applies]
        self._to_lanes(t.apply.stream for t in tasks)
        results: list[ApplyResult | None] = [None] * len(tasks)
        for group in _rounds(tasks, self._apply_txid):
            for i, result in zip(group, self._apply_round([tasks[i] for i in group]), strict=True):
                results[i] = result
        flat = iter(cast("list[ApplyResult]", results))
        return [[next(flat) for _ in b.applies] for b in batches]

    def _apply_txid(self, task: _ApplyTask) -> str:
        return keys.apply_txid(self._internal, task.apply.stream, task.topic, task.partition)

    def _apply_round(self, tasks: Sequence[_ApplyTask]) -> list[ApplyResult]:
        """One round of applies: a transaction per lane, all open at once so that their round trips
        overlap. Each is begun (a new producer fences every other writer of its id), the marks read
        once after that, every apply checked and produced, one flush per transaction, marks and
        syncs, the commits, and one wait until all are readable. A transaction commits or aborts
        whole: an apply that fails in it (its records refused) gets its error, and the others of its
        transaction ``RetryNow``, so the caller applies them again without it. An apply whose expected
        marks moved is left out before it writes anything.

        The syncs name the replica offsets the messages got. Where those can be predicted (this store
        was the partition's last writer), the marks and syncs go with the messages, in one flush, and
        the offsets are checked before the commit; a wrong guess aborts (``RetryNow``: planned again
        from the stored state), and that partition is not guessed for ``UNGUESSED_SECONDS``."""
        results: list[ApplyResult | None] = [None] * len(tasks)
        lanes: dict[str, list[int]] = {}  # txid -> its tasks still in its transaction
        for i, task in enumerate(tasks):
            lanes.setdefault(self._apply_txid(task), []).append(i)
        txns: dict[str, Transaction] = {}  # open
        committed: dict[str, Transaction] = {}
        offsets = [[-1] * len(t.apply.messages) for t in tasks]
        predicted: dict[int, list[int]] = {}  # the replica offsets the marks and syncs were written with
        errors: list[list[KafkaError]] = [[] for _ in tasks]
        stored: dict[str, dict[str, int]] = {}  # each stream's marks, read once all are begun
        syncs_caught_up = False  # in this round, after every begin

        def syncs_fold() -> SyncsFold:
            """The syncs fold, caught up once per round: every lane of it is fenced by then."""
            nonlocal syncs_caught_up
            fold = self._syncs_fold()
            if not syncs_caught_up:
                fold.catch_up()
                syncs_caught_up = True
            return fold

        def abort(txid: str, exc: BaseException, culprit: int | None = None) -> None:
            """End lane ``txid``'s transaction, which ``exc`` failed (raised by ``culprit``'s apply,
            or by the transaction as a whole)."""
            failure = self._transactions.fail(txns.pop(txid), exc)
            if not isinstance(failure, (StreamrepError, RetryNow)):
                raise failure from None
            alone = culprit is not None and not isinstance(failure, RetryNow)  # its own records were refused
            for i in lanes[txid]:
                if alone and i != culprit:
                    results[i] = RetryNow(f"cluster {self.cluster}: aborted with another apply ({failure}); retry")
                else:
                    results[i] = failure

        def each(step: Callable[[int, _ApplyTask, Transaction], object]) -> None:
            """Run ``step`` for every apply of every open transaction."""
            for txid in list(txns):
                for i in list(lanes[txid]):
                    try:
                        step(i, tasks[i], txns[txid])
                    except Exception as exc:
                        abort(txid, exc, i)
                        break

        def each_transaction(step: Callable[[str, Transaction], object]) -> None:
            for txid in list(txns):
                try:
                    step(txid, txns[txid])
                except Exception as exc:
                    abort(txid, exc)

        def check(i: int, task: _ApplyTask, txn: Transaction) -> None:
            """Leave the apply out of its transaction, before it writes anything, if its marks moved."""
            stream, expect = task.apply.stream, task.apply.expect
            if stream not in stored:  # read after every writer here fenced the others of its id
                stored[stream] = self.marks(stream)
            moved = [key for key, expected in expect.items() if stored[stream].get(key) != expected]
            if moved:
                key = moved[0]
                results[i] = RetryNow(
                    f"replication mark {key} of stream {stream} moved ({expect[key]} -> {stored[stream].get(key)}); "
                    "another gateway applied this batch"
                )
                lanes[txn.txid].remove(i)

        def produce(i: int, task: _ApplyTask, txn: Transaction) -> None:
            stream, messages = task.apply.stream, task.apply.messages
            if messages:
                name = self._kafka_name(stream, task.topic)
                # Set again only by this commit: a failed apply leaves the next offset unknown.
                first = self._next_offsets.pop((name, task.partition), None)
                self._produce_all(txn.producer, name, task.partition, messages, offsets[i], errors[i])
                if first is not None and self._unguessed_until.get((name, task.partition), 0) < time.monotonic():
                    predicted[i] = list(range(first, first + len(messages)))
                    write_marks(task, txn, predicted[i])

        def write_marks(task: _ApplyTask, txn: Transaction, replica_offsets: Sequence[int]) -> None:
            stream, _, marks, _, syncs = task.apply[:5]
            for key, value in marks.items():
                txn.internal("marks", keys.mark_key(stream, key), keys.mark_value(value))
            runs = [(s, task.partition, r, n) for s, r, n in _runs(syncs, replica_offsets)]
            for source_offset, sync in self._syncs_writes(stream, task.source, runs, syncs_fold).items():
                txn.internal(
                    "syncs",
                    keys.sync_key(stream, task.source, source_offset),
                    None if sync is None else keys.sync_value(*sync[1:]),
                )

        def flush(txid: str, txn: Transaction) -> None:
            """Deliver the messages: the offsets they got are needed for the syncs."""
            written = [tasks[i] for i in lanes[txid] if tasks[i].apply.messages]
            if written:
                names = sorted({self._kafka_name(t.apply.stream, t.topic) for t in written})
                self._flush(txn.producer, f"cannot write to {', '.join(names)}")

        def mark(i: int, task: _ApplyTask, txn: Transaction) -> None:
            if task.apply.messages:
                name = self._kafka_name(task.apply.stream, task.topic)
                if errors[i]:
                    raise self._translate(errors[i][0], f"cannot write to {name}")
                if i in predicted:
                    if predicted[i] == offsets[i]:
                        return  # written with the messages, and right
                    self._unguessed_until[(name, task.partition)] = time.monotonic() + UNGUESSED_SECONDS
                    raise RetryNow(f"cluster {self.cluster}: another writer wrote to {name}/{task.partition}; retry")
            write_marks(task, txn, offsets[i])

        def commit(txid: str, txn: Transaction) -> None:
            if not lanes[txid]:  # every apply of it left out: nothing to commit
                raise RetryNow("no apply left in the transaction")
            self._transactions.commit(txn)
            committed[txid] = txns.pop(txid)
            for i in lanes[txid]:
                task = tasks[i]
                if task.apply.messages:  # the commit's marker takes the offset after the last message
                    name = self._kafka_name(task.apply.stream, task.topic)
                    self._next_offsets[(name, task.partition)] = offsets[i][-1] + 2

        try:
            for txid, members in lanes.items():
                try:
                    txns[txid] = self._transactions.begin(txid, "marks", tasks[members[0]].apply.compression)
                except (StreamrepError, RetryNow) as err:
                    for i in members:
                        results[i] = err
            each(check)
            each(produce)
            each_transaction(flush)
            each(mark)
            each_transaction(lambda txid, txn: txn.producer.flush(TIMEOUT_SECONDS))  # every commit's records at once
            each_transaction(commit)
        except BaseException as exc:  # an interrupt, or a failure of no one transaction: none is left open
            for txn in txns.values():
                self._transactions.fail(txn, exc)
            raise
        try:
            self._transactions.visible(list(committed.values()))
        except (StreamrepError, RetryNow) as err:  # committed, but whether it is readable is unknown
            for txid in committed:
                for i in lanes[txid]:
                    results[i] = err
            return cast("list[ApplyResult]", results)
        for txid in committed:
            for i in lanes[txid]:
                task = tasks[i]
                if task.apply.messages:
                    results[i] = offsets[i][0]
                else:
                    name = self._kafka_name(task.apply.stream, task.topic)
                    results[i] = self._watermarks(name, task.partition, task.topic)[1]
        return cast("list[ApplyResult]", results)

    def prepare_apply(self, stream: str, topic: str, partition: int, compression: str | None = None) -> None:
        self._fresh()
        if self._transactions.prepare(keys.apply_txid(self._internal, stream, topic, partition), "marks", compression):
            self._syncs_fold().catch_up()  # what the first apply's prune reads

    def _syncs_writes(
        self, stream: str, source: str, runs: list[tuple[int, int, int, int]], caught_up: Callable[[], SyncsFold]
    ) -> dict[int, tuple[int, int, int, int] | None]:
        """The syncs records an apply writes, by source offset (None: a tombstone): its ``runs``,
        and when a prune is due, what ``prune`` changes. ``caught_up`` is the fold read after the
        apply's fence, so it holds every earlier apply's syncs of ``source``."""
        writes: dict[int, tuple[int, int, int, int] | None] = {run[0]: run for run in runs}
        self._syncs_fold().refuse_newer("the offset syncs of stream", stream, "from", source)
        if not runs or not self.prune_due(stream, source, len(runs)):
            return writes
        fold = caught_up()
        fold.refuse_newer("the offset syncs of stream", stream, "from", source)
        before = {offset: (offset, *value) for offset, value in fold.state.get(stream, {}).get(source, {}).items()}
        kept = {sync[0]: sync for sync in prune([*before.values(), *runs])}
        writes = {offset: sync for offset, sync in kept.items() if before.get(offset) != sync}
        writes.update((offset, None) for offset in before if offset not in kept)
        return writes

    def drop_marks(self, stream: str, marks: Mapping[str, int]) -> int:
        self._to_lanes([stream])
        by_partition: dict[tuple[str, int], dict[str, int]] = {}
        for key, value in marks.items():
            by_partition.setdefault(mark_partition(key), {})[key] = value
        dropped = 0
        for (topic, partition), wanted in sorted(by_partition.items()):
            for attempt in range(CATALOG_RETRIES):
                try:
                    with self._transaction(keys.apply_txid(self._internal, stream, topic, partition), "marks") as txn:
                        current = self.marks(stream)
                        gone = [key for key, value in wanted.items() if current.get(key) == value]
                        for key in gone:
                            txn.internal("marks", keys.mark_key(stream, key), None)
                    break
                except RetryNow as retry:  # fenced (by a gateway, or another store object, since): read again
                    if attempt == CATALOG_RETRIES - 1:
                        raise Conflict(str(retry)) from None
            dropped += len(gone)
        return dropped

    def offset_syncs(self, stream: str, source: str) -> list[tuple[int, int, int, int]]:
        return self.offset_syncs_many([(stream, source)])[0]

    def offset_syncs_many(self, parts: Sequence[tuple[str, str]]) -> list[list[tuple[int, int, int, int]]]:
        fold = self._syncs_fold()
        fold.catch_up()  # once for all: a round trip
        result = []
        for stream, source in parts:
            fold.refuse_newer("the offset syncs of stream", stream, "from", source)
            runs = fold.state.get(stream, {}).get(source, {})
            result.append([(offset, *runs[offset]) for offset in sorted(runs)])
        return result


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


class _ApplyTask(NamedTuple):
    """One replica's apply within ``KafkaStore.apply_partitions``."""

    topic: str
    partition: int
    source: str
    apply: ReplicaApply


def _rounds(tasks: Sequence[_ApplyTask], txid: Callable[[_ApplyTask], str]) -> list[list[int]]:
    """``tasks``' indexes in rounds: no two in a round write one replica partition, or write or expect
    one mark of one stream (their checks would not see each other's writes), and a round has no more
    transactional ids than the producers kept (``MAX_TRANSACTIONAL_PRODUCERS``: a round's own are never
    closed under it). A task goes in a round after the last one holding any of these, so order is kept."""
    last: dict[object, int] = {}
    rounds: list[list[int]] = []
    ids: list[set[str]] = []  # each round's transactional ids
    for i, task in enumerate(tasks):
        stream = task.apply.stream
        held = [
            (stream, task.topic, task.partition),
            *((stream, key) for key in (*task.apply.marks, *task.apply.expect)),
        ]
        at = max((last[h] + 1 for h in held if h in last), default=0)
        lane = txid(task)
        while at < len(rounds) and lane not in ids[at] and len(ids[at]) >= MAX_TRANSACTIONAL_PRODUCERS:
            at += 1
        if at == len(rounds):
            rounds.append([])
            ids.append(set())
        rounds[at].append(i)
        ids[at].add(lane)
        for h in held:
            last[h] = max(last.get(h, at), at)
    return rounds
