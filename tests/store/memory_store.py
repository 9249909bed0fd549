"""An in-memory ``Store``: test code, never shipped. The smallest backend that passes the conformance
suite (``tests/store/test_conformance.py``), which runs it as the backend ``memory``.

It writes the abstract methods of ``store/base.py``'s ``Store`` and nothing else, so it proves that
the base builds the rest from them (``test_memory_store.py`` checks that it overrides no other).

``MemoryState`` is the backing store, as a SQLite file or a Kafka namespace is: every ``MemoryStore``
opened on it (two gateways, two processes) sees the same data. Each method is one transaction under
the state's lock, one writer at a time as under SQLite's write lock, and a write checks all it needs
before it changes anything, so one that fails writes nothing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from streamrep.errors import AlreadyExists, InvalidArgument, NotFound, RetryNow, StreamrepError
from streamrep.model.message import Message
from streamrep.model.offsetsyncs import Sync, prune
from streamrep.store.base import ApplyResult, CatalogDoc, PartitionApplies, ReplicaApply, Store


@dataclass
class Partition:
    """One partition's log: ``messages[i]`` is at offset ``start + i`` (gap-free, never reused)."""

    start: int = 0
    messages: list[Message] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.start + len(self.messages)

    def between(self, start: int, stop: int) -> list[Message]:
        """The messages held from offset ``start`` up to ``stop``."""
        return self.messages[max(start - self.start, 0) : max(stop - self.start, 0)]

    def append(self, messages: Sequence[Message], partition: int, topic: str) -> int:
        """Append ``messages`` at the end, with their partition and offsets; returns the first offset."""
        first = self.end
        self.messages += [
            m._replace(partition=partition, offset=first + i, topic=topic) for i, m in enumerate(messages)
        ]
        return first

    def drop_before(self, timestamp: int) -> int:
        """Drop the prefix of messages older than ``timestamp``; returns how many were dropped."""
        kept = next((i for i, m in enumerate(self.messages) if m.timestamp >= timestamp), len(self.messages))
        del self.messages[:kept]
        self.start += kept
        return kept


@dataclass
class MemoryState:
    """The data every ``MemoryStore`` opened on it shares."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    catalog: dict[str, dict[str, str]] = field(default_factory=dict)  # kind -> key -> JSON: a read is a copy
    logs: dict[tuple[str, str], list[Partition]] = field(default_factory=dict)  # (stream, topic) -> partitions
    cursors: dict[tuple[str, str, str], dict[int, int]] = field(default_factory=dict)  # (group, stream, topic)
    marks: dict[str, dict[str, int]] = field(default_factory=dict)  # stream -> mark -> value
    syncs: dict[tuple[str, str], dict[int, Sync]] = field(default_factory=dict)  # (stream, source) -> by source offset


class MemoryStore(Store):
    """A cluster kept in a ``MemoryState``, shared with the other store objects opened on it."""

    def __init__(self, cluster: str, state: MemoryState):
        super().__init__(cluster)
        self._state = state

    def _partition(self, stream: str, topic: str, partition: int) -> Partition:
        partitions = self._state.logs.get((stream, topic), [])
        if not 0 <= partition < len(partitions):
            raise NotFound(f"topic {topic} has no partition {partition}")
        return partitions[partition]

    # -- catalog -------------------------------------------------------------------
    def catalog_list(self, kind: str) -> dict[str, CatalogDoc]:
        with self._state.lock:
            return {key: json.loads(doc) for key, doc in sorted(self._state.catalog.get(kind, {}).items())}

    def catalog_update(
        self, kind: str, key: str, change: Callable[[CatalogDoc | None], CatalogDoc | None]
    ) -> CatalogDoc | None:
        with self._state.lock:
            docs = self._state.catalog.setdefault(kind, {})
            new = change(json.loads(docs[key]) if key in docs else None)
            if new is None:
                docs.pop(key, None)
            else:
                docs[key] = json.dumps(new)
            return new

    # -- topics --------------------------------------------------------------------
    def create_topic(self, stream: str, topic: str, partitions: int) -> None:
        with self._state.lock:
            if (stream, topic) in self._state.logs:
                raise AlreadyExists(f"topic {topic} already exists")
            self._state.logs[(stream, topic)] = [Partition() for _ in range(partitions)]

    def add_partitions(self, stream: str, topic: str, partitions: int) -> None:
        with self._state.lock:
            held = self._state.logs.get((stream, topic))
            if not held:
                raise NotFound(f"topic {topic} does not exist")
            if partitions < len(held):
                raise InvalidArgument(f"topic {topic} has {len(held)} partitions; partitions can only be added")
            held += [Partition() for _ in range(len(held), partitions)]

    def delete_topic(self, stream: str, topic: str) -> None:
        state = self._state
        with state.lock:
            if state.logs.pop((stream, topic), None) is None:
                raise NotFound(f"topic {topic} does not exist")
            state.cursors = {key: held for key, held in state.cursors.items() if key[1:] != (stream, topic)}

    def topics(self, stream: str) -> dict[str, int]:
        with self._state.lock:
            return {topic: len(held) for (s, topic), held in sorted(self._state.logs.items()) if s == stream}

    def drop_stream(self, stream: str) -> None:
        state = self._state
        with state.lock:
            state.logs = {key: held for key, held in state.logs.items() if key[0] != stream}
            state.cursors = {key: held for key, held in state.cursors.items() if key[1] != stream}
            state.marks.pop(stream, None)
            state.syncs = {key: held for key, held in state.syncs.items() if key[0] != stream}

    # -- messages ------------------------------------------------------------------
    def append(self, stream: str, topic: str, batches: Mapping[int, Sequence[Message]]) -> dict[int, int]:
        with self._state.lock:
            partitions = {p: self._partition(stream, topic, p) for p in batches}  # all found before any is written
            return {p: partitions[p].append(messages, p, topic) for p, messages in batches.items()}

    def read(self, stream: str, topic: str, partition: int, start: int, max_messages: int) -> list[Message]:
        with self._state.lock:
            held = self._partition(stream, topic, partition)
            first = max(start, held.start)
            return held.between(first, first + max_messages)

    def offsets(self, stream: str, topic: str, partition: int) -> tuple[int, int]:
        with self._state.lock:
            held = self._partition(stream, topic, partition)
            return held.start, held.end

    def purge_before(self, stream: str, topic: str, timestamp: int) -> int:
        with self._state.lock:
            return sum(held.drop_before(timestamp) for held in self._state.logs.get((stream, topic), []))

    def range_stats(
        self, stream: str, topic: str, partition: int, start: int, stop: int | None = None
    ) -> tuple[int, int, int | None, int | None]:
        with self._state.lock:
            held = self._partition(stream, topic, partition)
            messages = held.between(start, held.end if stop is None else stop)
        times = [m.timestamp for m in messages]
        return len(messages), sum(len(m.value) for m in messages), min(times, default=None), max(times, default=None)

    # -- consumer-group cursors ----------------------------------------------------
    def commit_cursors(self, group: str, stream: str, topic: str, cursors: Mapping[int, int]) -> None:
        with self._state.lock:
            for partition in cursors:  # every partition there before any cursor is kept
                self._partition(stream, topic, partition)
            self._state.cursors.setdefault((group, stream, topic), {}).update(cursors)

    def cursors(self, group: str, stream: str, topic: str) -> dict[int, int]:
        with self._state.lock:
            return dict(self._state.cursors.get((group, stream, topic), {}))

    def groups(self, stream: str) -> list[str]:
        with self._state.lock:
            return sorted({group for (group, s, _), held in self._state.cursors.items() if s == stream and held})

    # -- replication marks ---------------------------------------------------------
    def marks(self, stream: str) -> dict[str, int]:
        with self._state.lock:
            return dict(self._state.marks.get(stream, {}))

    def apply_partitions(self, batches: Sequence[PartitionApplies]) -> list[list[ApplyResult]]:
        return [[self._apply(batch, apply) for apply in batch.applies] for batch in batches]

    def _apply(self, batch: PartitionApplies, apply: ReplicaApply) -> ApplyResult:
        """One replica's apply, all or nothing: compare the marks with ``expect``, then write the
        messages, the marks and the offset syncs (pruned when ``prune_due`` says so)."""
        with self._state.lock:
            held = self._state.marks.get(apply.stream, {})
            moved = sorted(key for key, value in apply.expect.items() if held.get(key) != value)
            if moved:
                return RetryNow(f"replication marks {moved} of stream {apply.stream} moved; another gateway applied")
            try:
                partition = self._partition(apply.stream, batch.topic, batch.partition)
            except StreamrepError as err:
                return err
            first = partition.append(apply.messages, batch.partition, batch.topic)
            self._state.marks.setdefault(apply.stream, {}).update(apply.marks)
            # A sync covers the run of messages up to the next sync (or the end of the batch).
            ends = [index for index, _ in apply.syncs[1:]] + [len(apply.messages)]
            syncs = self._state.syncs.setdefault((apply.stream, batch.source), {})
            for (index, source_offset), end in zip(apply.syncs, ends, strict=False):
                syncs[source_offset] = (source_offset, batch.partition, first + index, end - index)
            if apply.syncs and self.prune_due(apply.stream, batch.source, len(apply.syncs)):
                kept = prune(syncs.values())
                syncs.clear()
                syncs.update((sync[0], sync) for sync in kept)
            return first

    def drop_marks(self, stream: str, marks: Mapping[str, int]) -> int:
        with self._state.lock:
            held = self._state.marks.get(stream, {})
            unchanged = [key for key, value in marks.items() if key in held and held[key] == value]
            for key in unchanged:
                del held[key]
            return len(unchanged)

    def offset_syncs(self, stream: str, source: str) -> list[tuple[int, int, int, int]]:
        with self._state.lock:
            return sorted(self._state.syncs.get((stream, source), {}).values())
