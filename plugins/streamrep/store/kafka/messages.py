"""A stream's messages on Kafka: appends through the store's idempotent producer, and reads
through its one read_committed consumer (``reader``).

Offsets are Kafka's: a partition's end is its last stable offset, and offsets may have gaps
(transaction markers), so ``read_span`` says where the next read starts. Kafka keeps no counts:
``range_stats`` reads the range.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from streamrep.errors import RetryNow, StreamrepError, Unavailable
from streamrep.model.message import Message
from streamrep.store.base import SpanRead
from streamrep.store.kafka.client import TIMEOUT_SECONDS, kafka_error
from streamrep.store.kafka.core import KafkaCore
from streamrep.store.kafka.reader import Span
from streamrep.store.kafka.serialized import unheld


class KafkaMessages(KafkaCore):
    """The Store's message methods: append, read, count."""

    counts_cheaply = False  # Kafka keeps no counts: range_stats reads every message

    def _produce_all(
        self,
        producer: Producer,
        name: str,
        partition: int,
        messages: Sequence[Message],
        offsets: list[int],
        errors: list[KafkaError],
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
                    err = kafka_error(exc)
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
        errors: list[KafkaError] = []
        for partition, messages in batches.items():
            results[partition] = [-1] * len(messages)
            self._produce_all(producer, name, partition, messages, results[partition], errors)
        self._flush(producer, f"cannot write to {name}")
        if errors:
            raise self._translate(errors[0], f"cannot write to {name}")
        return {partition: min(offsets) for partition, offsets in results.items() if offsets}

    def await_messages(self, timeout: float) -> bool | None:
        return self._reader.wait(timeout)

    def prepare_read(self, stream: str, topic: str, partition: int, start: int) -> None:
        self._fresh()
        self._reader.prepare(self._kafka_name(stream, topic), partition, start)

    def read(self, stream: str, topic: str, partition: int, start: int, max_messages: int) -> list[Message]:
        return self.read_span(stream, topic, partition, start, max_messages)[0]

    def read_span(
        self, stream: str, topic: str, partition: int, start: int, max_messages: int, readable: int | None = None
    ) -> tuple[list[Message], int]:
        [found] = self.read_spans([SpanRead(stream, topic, partition, start, max_messages, readable)])
        if isinstance(found, StreamrepError):
            raise found
        return found

    def read_spans(self, spans: Sequence[SpanRead]) -> list[tuple[list[Message], int] | StreamrepError]:
        self._fresh()
        wanted: list[Span | StreamrepError] = []
        for stream, topic, partition, start, max_messages, readable in spans:
            try:
                name = self._kafka_name(stream, topic)
                if readable is None:
                    first, end = self._watermarks(name, partition, topic)
                    start = max(start, first)
                else:  # below the oldest offset held, the reader resets to it (auto.offset.reset)
                    end = readable
                wanted.append(Span(name, topic, partition, start, max_messages, end))
            except StreamrepError as err:
                wanted.append(err)
        spans_read = [w for w in wanted if isinstance(w, Span)]
        found = iter(self._reader.read(spans_read))
        result: list[tuple[list[Message], int] | StreamrepError] = []
        for w in wanted:
            got = w if isinstance(w, StreamrepError) else next(found)
            if isinstance(got, RetryNow):  # no transaction reads: a fenced reader is a client that failed
                got = Unavailable(str(got))
            result.append(got)
        return result

    @unheld  # serialized per read: see below
    def range_stats(
        self, stream: str, topic: str, partition: int, start: int, stop: int | None = None
    ) -> tuple[int, int, int | None, int | None]:
        # Kafka keeps no counts, so the range is read. It ends where the partition ended when
        # the count began (a busy topic would otherwise never be counted to its end), and the
        # store is not held between reads, so gateways sharing it keep applying meanwhile.
        _, end = self.offsets(stream, topic, partition)
        end = end if stop is None else min(stop, end)
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
