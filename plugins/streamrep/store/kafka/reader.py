"""One consumer for every partition a Kafka store object reads (``KafkaStore.read_spans``).

A gateway's pass reads each partition of its share up to the end it saw when the pass began. A
consumer per partition cost a client, its threads and its first fetch each; beyond a few dozen
partitions they were closed and made again inside every pass. Here one consumer stays assigned to
every partition read lately, and one poll serves them all.

Invariants, per partition (``_Part``):

- ``buf`` holds, in offset order, every message the consumer delivered and no read returned yet.
- No message of the partition lies in ``[low, pos)`` that is not in ``buf``, and ``pos`` is at most
  ``buf[0]``'s offset: a read from any start in ``[low, pos]`` continues without a seek. (Offsets with
  no message, such as transaction markers, are skipped: the consumer's position passes them.)
- A read from anywhere else repositions the partition, and drops its buffer: librdkafka drops what
  it fetched before (its op versions); a message below the new start is dropped here too.
- Messages past a read's end or limit stay in ``buf`` for the next read. Partitions no read asked
  for in ``IDLE_SECONDS`` are unassigned; beyond ``BUFFERED_MESSAGES`` or ``BUFFERED_BYTES`` held,
  the ones this read did not ask for pause until asked again.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streamrep.errors import RetryNow, StreamrepError, Unavailable
from streamrep.model.message import Message
from streamrep.store.kafka.client import TIMEOUT_SECONDS, fetched
from streamrep.store.kafka.parts import StoreCore

BUFFERED_MESSAGES = 100_000
BUFFERED_BYTES = 64 << 20  # as librdkafka's own prefetch bound (queued.max.messages.kbytes)
IDLE_SECONDS = 60.0
POLL_BATCH = 10_000


class Span(NamedTuple):
    """One partition's read: Kafka topic ``name`` (streamrep topic ``topic``) from ``start``, at most
    ``limit`` messages, none at or past ``end``."""

    name: str
    topic: str
    partition: int
    start: int
    limit: int
    end: int


class _Part:
    __slots__ = ("asked", "buf", "low", "nbytes", "paused", "pos")

    def __init__(self, start: int):
        self.low = self.pos = start
        self.buf: deque[Any] = deque()
        self.nbytes = 0  # of the values in ``buf``
        self.asked = time.monotonic()
        self.paused = False


# A span's result: its messages and the offset to read next, or its error.
Result = tuple[list[Message], int] | StreamrepError | RetryNow
Active = dict[int, tuple[Span, _Part, list[Message]]]  # the reads under way, by their index in spans


class SharedReader:
    """The reads of one store object (``KafkaStore``): one read_committed consumer, made at the first
    read, and the state of each partition it is assigned to."""

    def __init__(self, store: StoreCore):
        self.store = store
        self._consumer: Consumer | None = None
        self._parts: dict[tuple[str, int], _Part] = {}

    def _client(self) -> Consumer:
        if self._consumer is None:
            self._consumer = self.store._consumer()
        return self._consumer

    def prepare(self, name: str, partition: int, start: int) -> None:
        """Assign the partition at ``start`` ahead of its first read, so that its first fetch is under way."""
        if (name, partition) not in self._parts:
            with self.store._errors(f"cannot read {name}"):
                self._at(name, partition, start)

    def wait(self, timeout: float) -> bool | None:
        """Wait at most ``timeout`` s for a message of an assigned partition, filed for the next read as a
        read files it: whether one came. None at once when nothing is assigned, or when the consumer fails
        (the next read reports why)."""
        if self._consumer is None or not self._parts:
            return None
        try:
            with self.store._errors("cannot read"):
                batch = fetched(self._consumer, POLL_BATCH, wait=timeout)
        except (StreamrepError, RetryNow):
            return None
        for failed_key in self._file(batch):
            if failed_key is not None:  # as a read does for a partition no read asks for now
                self._drop([failed_key])
        return any(msg.error() is None for msg in batch)

    def forget(self, names: Sequence[str]) -> None:
        """Unassign every partition of the Kafka topics ``names`` (deleted, or read wrongly)."""
        self._drop([key for key in self._parts if key[0] in set(names)])

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        self._consumer, self._parts = None, {}

    def _unassign(self, keys: Sequence[tuple[str, int]]) -> None:
        with self.store._errors("cannot unassign partitions"):
            self._client().incremental_unassign([TopicPartition(name, p) for name, p in keys])
        for key in keys:
            del self._parts[key]

    def _drop(self, keys: Sequence[tuple[str, int]]) -> None:
        """``_unassign``, where a failure replaces the consumer (its assignment is no longer known)."""
        if keys and self._consumer is not None:
            try:
                self._unassign(keys)
            except (StreamrepError, RetryNow):
                self.close()

    def _at(self, name: str, partition: int, start: int) -> _Part:
        """The partition's state, positioned so that its next message is the first at or past ``start``."""
        key = (name, partition)
        part = self._parts.get(key)
        consumer = self._client()
        if part is not None and part.low <= start <= part.pos:
            if part.paused:
                consumer.resume([TopicPartition(name, partition)])
                part.paused = False
        else:
            try:
                if part is not None:
                    self._unassign([key])
                consumer.incremental_assign([TopicPartition(name, partition, start)])
            except (KafkaException, StreamrepError, RetryNow):
                self.close()  # its assignment is no longer known: the next read starts a new consumer
                raise
            part = self._parts[key] = _Part(start)
        part.asked = time.monotonic()
        return part

    def read(self, spans: Sequence[Span]) -> list[Result]:
        """Each span's messages and the offset to read next (every message of the partition in
        ``[start, next)`` is in the list), or its error; in the order of ``spans``. A partition that
        holds messages up to its end but returns none before ``TIMEOUT_SECONDS`` is ``Unavailable``."""
        results: list[Result | None] = [None] * len(spans)
        active = self._begin(spans, results)
        if active:
            self._gather(self._client(), active, results)
        stale = self._time_out(active, results)
        if stale:  # records there, none fetched: a client whose metadata went stale is replaced
            self.close()
        else:
            self._tidy({(s.name, s.partition) for s in spans})
        return cast("list[Result]", results)

    def _begin(self, spans: Sequence[Span], results: list[Result | None]) -> Active:
        """Position the partition of each span that can hold messages; the others' results (empty, or
        the error positioning met) go in ``results`` at once."""
        active: Active = {}
        for i, span in enumerate(spans):
            if span.start >= span.end or span.limit <= 0:
                results[i] = ([], span.start)
                continue
            try:
                with self.store._errors(f"cannot read {span.name}"):
                    active[i] = (span, self._at(span.name, span.partition, span.start), [])
            except (StreamrepError, RetryNow) as err:
                results[i] = err
        return active

    def _gather(self, consumer: Consumer, active: Active, results: list[Result | None]) -> None:
        """Poll until every read in ``active`` is done (its result in ``results``) or ``TIMEOUT_SECONDS``
        passed: what ``active`` still holds then timed out."""
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while True:
            self._settle(active, results)
            if not active or time.monotonic() >= deadline:
                return
            self._poll(consumer, active, results)

    def _settle(self, active: Active, results: list[Result | None]) -> None:
        """End the reads that their buffered messages complete, or whose partition's position reached their end."""
        for i, (span, part, out) in list(active.items()):
            done = _take(span, part, out)
            if done is not None:
                results[i] = (out, done)
                del active[i]
        if active:
            self._past_markers(active.values())
            for i, (span, part, out) in list(active.items()):
                if part.pos >= span.end:
                    results[i] = (out, _finish(part, span.end))
                    del active[i]

    def _poll(self, consumer: Consumer, active: Active, results: list[Result | None]) -> None:
        """One poll, its messages filed: an error ends the reads of its partition (the client's: every read)."""
        try:
            with self.store._errors("cannot read"):
                batch = fetched(consumer, POLL_BATCH)
        except (StreamrepError, RetryNow) as failure:
            for i in active:
                results[i] = failure
            active.clear()
            return
        for failed_key, error in self._file(batch).items():
            hit = [i for i, (span, _, _) in active.items() if failed_key in ((span.name, span.partition), None)]
            for i in hit:
                results[i] = error
                del active[i]
            if not hit and failed_key is not None:  # a partition no read asks for now: its errors stop
                self._drop([failed_key])

    def _time_out(self, active: Active, results: list[Result | None]) -> bool:
        """The results of the reads the deadline ended: what they got, else ``Unavailable``. Whether one got none."""
        stale = False
        for i, (span, part, out) in active.items():
            if out:
                results[i] = (out, _finish(part, min(part.pos, span.end)))
            else:
                stale = True
                results[i] = Unavailable(
                    f"cluster {self.store.cluster}: reading {span.name} timed out at offset {part.pos} of {span.end}"
                )
        return stale

    def _past_markers(self, reads: Any) -> None:
        """Move each waiting partition with an empty buffer to the consumer's position: every message
        before it was delivered, so the offsets between hold none (a transaction's marker)."""
        waiting = [(span, part) for span, part, _ in reads if not part.buf]
        if not waiting:
            return
        try:
            with self.store._errors("cannot read positions"):
                at = self._client().position([TopicPartition(span.name, span.partition) for span, _ in waiting])
        except (StreamrepError, RetryNow):
            return  # asked again after the next poll
        for (_, part), found in zip(waiting, at, strict=True):
            if found.offset is not None and found.offset > part.pos:
                part.pos = found.offset

    def _file(self, batch: list[Any]) -> dict[tuple[str, int] | None, StreamrepError | RetryNow]:
        """Put each delivered message in its partition's buffer; return the errors, by partition (None:
        the whole client)."""
        errors: dict[tuple[str, int] | None, StreamrepError | RetryNow] = {}
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                name, partition = msg.topic(), msg.partition()
                key = (name, partition) if name and partition is not None and partition >= 0 else None
                errors[key] = self.store._translate(KafkaException(err), f"cannot read {name or 'a topic'}")
                continue
            part = self._parts.get((msg.topic(), msg.partition()))
            if part is None:
                continue  # a partition unassigned meanwhile
            offset = msg.offset()
            if offset < (part.buf[-1].offset() + 1 if part.buf else part.pos):
                continue  # fetched before the partition was repositioned
            if not part.buf:
                part.pos = offset
            part.buf.append(msg)
            part.nbytes += len(msg.value() or b"")
        return errors

    def _tidy(self, asked: set[tuple[str, int]]) -> None:
        """Unassign the partitions idle for ``IDLE_SECONDS``; pause the unasked ones holding messages
        while more than ``BUFFERED_MESSAGES`` wait."""
        now = time.monotonic()
        self._drop([key for key, part in self._parts.items() if now - part.asked > IDLE_SECONDS])
        parts = self._parts.values()
        if sum(len(p.buf) for p in parts) <= BUFFERED_MESSAGES and sum(p.nbytes for p in parts) <= BUFFERED_BYTES:
            return
        pause = [key for key, part in self._parts.items() if key not in asked and part.buf and not part.paused]
        if pause:
            self._client().pause([TopicPartition(name, p) for name, p in pause])
            for key in pause:
                self._parts[key].paused = True


def _take(span: Span, part: _Part, out: list[Message]) -> int | None:
    """Move the buffered messages of ``span`` into ``out``; the offset to read next once the span is
    done (its limit, or a message at its end), else None."""
    buf, new, append = part.buf, tuple.__new__, out.append
    while buf and len(out) < span.limit:
        msg = buf[0]
        offset = msg.offset()
        if offset >= span.end:
            break
        buf.popleft()
        value = msg.value() or b""
        part.nbytes -= len(value)
        # A consumed message's headers are a list of (name, value) pairs (the stubs also allow a dict).
        headers = cast("list[tuple[str, bytes | None]] | None", msg.headers())
        append(
            new(
                Message,
                (
                    value,
                    msg.key(),
                    tuple([(k, v or b"") for k, v in headers]) if headers else (),
                    msg.timestamp()[1],
                    span.partition,
                    offset,
                    span.topic,
                ),
            )
        )
        part.pos = offset + 1
    if buf:
        part.pos = buf[0].offset()
    if out and len(out) >= span.limit:
        return _finish(part, out[-1].offset + 1)
    if part.pos >= span.end:
        return _finish(part, span.end)
    return None


def _finish(part: _Part, next_offset: int) -> int:
    part.low = next_offset
    return next_offset
