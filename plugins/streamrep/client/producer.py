"""The producer: buffers messages and appends them to the store in batches.

A message is acknowledged when ``flush()`` (or ``send(..., flush=True)``) returns: by then
it is committed in its cluster's store and survives the kill of this process. A flush fails
only for messages that were not written: once an append has committed, a retry would write
it twice, so what goes wrong afterwards (retention, waiting for synchronous replicas) becomes
a warning (``Producer.warnings`` and the log) or a replica state, never an error.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import SupportsFloat

from streamrep.client.admin import StreamAdmin
from streamrep.client.catalog import now_ms
from streamrep.errors import AlreadyExists, Conflict, InvalidArgument, NotFound, StreamrepError
from streamrep.model import replication as rules
from streamrep.model.acls import one_way_replica
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import FailoverRecord, check_writable
from streamrep.model.message import Headers, Message
from streamrep.model.partitioner import partition_for_key
from streamrep.model.paths import StreamPath, TopicPath, parse_topic_path
from streamrep.model.replication import ReplicaLink, ReplicaState

_new_tuple = tuple.__new__

SYNC_POLL_SECONDS = 0.01

log = logging.getLogger(__name__)


def covers(marks: dict[str, int], targets: dict[str, int]) -> bool:
    """Whether a replica's positions have reached every target offset."""
    return all(marks.get(key, -1) >= end for key, end in targets.items())


def check_sync_timeout(value: object, what: str = "sync_timeout") -> float:
    """``value`` as seconds to wait for synchronous replicas: a finite number, 0 or more."""
    try:
        seconds = float(value) if isinstance(value, SupportsFloat | str) and not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidArgument(f"{what} must be a number of seconds, 0 or more, not {value!r}")
    return seconds


def default_sync_timeout() -> float:
    return check_sync_timeout(os.environ.get("STREAMREP_SYNC_TIMEOUT", "5"), "STREAMREP_SYNC_TIMEOUT")


PARSED_TOPICS_MAX = 1024  # topic strings whose parse a producer keeps
# How stale a producer's view of a stream's failover record may be: a failover waits longer than
# this (``replication.failover.FENCE_GRACE_SECONDS``) after refusing writes, before it drains.
FAILOVER_CHECK_SECONDS = 0.5


def to_bytes(value: bytes | str, what: str) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise InvalidArgument(f"a message {what} must be bytes or str, not {type(value).__name__}")


class Producer:
    """Send messages to topics of any stream on any registered cluster.

    :param admin: the admin API to resolve streams and check produceperm with.
    :param batch_size: buffered messages that trigger a flush by themselves.
    :param sync_timeout: how long ``flush()`` waits for synchronous replicas to apply its
        messages before falling back to asynchronous (``STREAMREP_SYNC_TIMEOUT``, default 5 s).
    """

    def __init__(self, admin: StreamAdmin | None = None, batch_size: int = 10_000, sync_timeout: float | None = None):
        self.admin = admin or StreamAdmin()
        self.batch_size = batch_size
        self.sync_timeout = default_sync_timeout() if sync_timeout is None else check_sync_timeout(sync_timeout)
        self.warnings: list[str] = []  # what went wrong after a commit (the messages were written)
        self._pending: dict[TopicPath, dict[int, list[Message]]] = defaultdict(lambda: defaultdict(list))
        self._count = 0
        self._streams: dict[
            StreamPath, tuple[StreamEntry, dict[str, int]]
        ] = {}  # path -> (entry, topics) resolved once per producer
        # Parsing a topic string reads the registry (for the default cluster): once per string.
        self._parsed: dict[str, TopicPath] = {}
        # send()'s fast path: topic as given -> (path, partition count, its pending batches).
        # Cleared by flush() and by any stream refresh, so it never outlives what it points to.
        self._open: dict[str | TopicPath, tuple[TopicPath, int, dict[int, list[Message]]]] = {}
        self._round_robin = itertools.count()
        self._writable: dict[
            StreamPath, tuple[float, FailoverRecord | None]
        ] = {}  # path -> (when read, failover record)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.flush()

    def _stream(self, sp: StreamPath, refresh: bool = False) -> tuple[StreamEntry, dict[str, int]]:
        cached = self._streams.get(sp)
        if cached is None or refresh:
            self._open.clear()
            entry = self.admin.entry(sp)
            self.admin.require(entry, sp, "produceperm")
            if one_way_replica(entry):  # only its gateways write it (on Kafka, the broker refuses anyone else)
                upstreams = ", ".join(u.path for u in entry.upstreams)
                raise Conflict(
                    f"stream {sp} is a one-way replica of {upstreams}: only its gateways write it; "
                    "produce to the source"
                )
            cached = (entry, self.admin.store(sp).topics(entry.uuid))
            self._streams[sp] = cached
        return cached

    def partitions(self, topic: TopicPath) -> int:
        """The partition count of ``topic``, creating the topic if the stream autocreates."""
        entry, topics = self._stream(topic.stream)
        if topic.topic not in topics:
            entry, topics = self._stream(topic.stream, refresh=True)
        if topic.topic not in topics:
            if not entry.meta.autocreate:
                raise NotFound(f"topic {topic} does not exist and stream {topic.stream} does not autocreate topics")
            self.admin.check_new_topic(topic.stream, entry, topic.topic)  # the fan-in topic rule
            try:
                self.admin.store(topic.stream).create_topic(entry.uuid, topic.topic, entry.meta.defaultpartitions)
            except AlreadyExists:
                pass  # another producer created it first: the same outcome
            entry, topics = self._stream(topic.stream, refresh=True)
        return topics[topic.topic]

    def send(
        self,
        topic: str | TopicPath,
        value: bytes | str,
        key: bytes | str | None = None,
        headers: Iterable[tuple[str, bytes | str]] | None = None,
        timestamp: int | None = None,
        partition: int | None = None,
        flush: bool = False,
    ) -> None:
        """Buffer one message.

        :param topic: ``<stream path>:<topic>``.
        :param key: picks the partition by Kafka's murmur2 hash; None spreads round-robin.
        :param timestamp: ms since the epoch; now if None.
        :param partition: an explicit partition, overriding the key.
        :param flush: flush at once (the message is acknowledged when this returns).
        """
        try:
            resolved = self._open.get(topic)
        except TypeError:  # unhashable: not a topic path, _resolve says so
            resolved = None
        tp, count, pending = resolved or self._resolve(topic)
        if key is not None:
            key = to_bytes(key, "key")
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else next(self._round_robin) % count
        elif isinstance(partition, bool) or not isinstance(partition, int) or not 0 <= partition < count:
            raise InvalidArgument(f"topic {tp} has partitions 0 to {count - 1}; partition {partition!r} does not exist")
        header_tuple: Headers = tuple((str(k), to_bytes(v, "header")) for k, v in headers) if headers else ()
        if type(value) is not bytes:
            value = to_bytes(value, "value")
        # tuple.__new__ skips Message's Python-level __new__: the same tuple, cheaper per message.
        pending[partition].append(
            _new_tuple(
                Message,
                (value, key, header_tuple, now_ms() if timestamp is None else int(timestamp), partition, -1, ""),
            )
        )
        self._count += 1
        if flush or self._count >= self.batch_size:
            self.flush()

    def _resolve(self, topic: str | TopicPath) -> tuple[TopicPath, int, dict[int, list[Message]]]:
        """Parse ``topic`` (once per string), find its partition count, and open it in ``_open``."""
        if isinstance(topic, TopicPath):
            tp = topic
        elif isinstance(topic, str):
            cached = self._parsed.get(topic)
            if cached is None:
                cached = parse_topic_path(topic, self.admin.clusters.default)
                if len(self._parsed) >= PARSED_TOPICS_MAX:
                    self._parsed.clear()
                self._parsed[topic] = cached
            tp = cached
        else:
            tp = parse_topic_path(topic, self.admin.clusters.default)  # raises InvalidArgument
        count = self.partitions(tp)
        resolved = (tp, count, self._pending[tp])
        self._open[topic] = resolved
        return resolved

    def flush(self) -> dict[TopicPath, dict[int, tuple[int, int]]]:
        """Commit everything buffered, one atomic append per topic. Returns, per topic and
        partition, the ``(first, next)`` offsets assigned.

        If a topic's append fails, its messages stay buffered (flush again to retry them) and the
        error says which topics this flush did write, so a retry never duplicates them.
        """
        acked: dict[TopicPath, dict[int, tuple[int, int]]] = {}
        self._open.clear()  # it points into the batches deleted below
        while self._pending:
            tp, batches = next(iter(self._pending.items()))
            if not batches:  # opened by a send() that then raised
                del self._pending[tp]
                continue
            try:
                entry, _ = self._stream(tp.stream)
                self._check_writable(tp.stream)
                store = self.admin.store(tp.stream)
                firsts = store.append(entry.uuid, tp.topic, batches)
            except StreamrepError as err:
                if not acked:
                    raise
                written = sum(end - first for parts in acked.values() for first, end in parts.values())
                raise type(err)(
                    f"{err}; the messages to {tp} stay buffered, and the {written} messages to "
                    f"{', '.join(map(str, acked))} were written"
                ) from None
            acked[tp] = {p: (first, first + len(batches[p])) for p, first in firsts.items()}
            del self._pending[tp]
            self._count -= sum(len(b) for b in batches.values())
            self._after_commit(f"retention of {tp}", lambda: store.retain(entry.uuid, tp.topic, entry.meta.ttl))
        if acked:
            self._await_synchronous(acked)
        return acked

    def _check_writable(self, sp: StreamPath) -> None:
        """Refuse to write to a stream that a failover or failback has taken the role from
        (``model.failover.check_writable``); its record is read again at most every
        ``FAILOVER_CHECK_SECONDS``."""
        now = time.monotonic()
        seen = self._writable.get(sp)
        if seen is None or now - seen[0] >= FAILOVER_CHECK_SECONDS:
            seen = (now, self.admin.entry(sp).failover)
            self._writable[sp] = seen
        check_writable(str(sp), seen[1])

    def _after_commit(self, what: str, action: Callable[[], object]) -> None:
        """Run ``action`` after messages were committed: a failure is a warning, not an error."""
        try:
            action()
        except Exception as err:  # noqa: BLE001 - the messages are written; failing would make callers resend them
            self._warn(f"{what} failed after the messages were written: {err}")

    def _warn(self, message: str) -> None:
        """A warning about messages already written (the CLI prints each as one line)."""
        self.warnings.append(message)
        log.warning("%s", message)

    def _await_synchronous(self, acked: dict[TopicPath, dict[int, tuple[int, int]]]) -> None:
        """Synchronous replication: return only once every synchronous replica has applied
        these messages; past ``sync_timeout``, fall back to asynchronous (as MapR does) and
        say so in the replica's state, until it has caught up again. The messages are written:
        anything that goes wrong here is a warning."""
        for sp in {tp.stream for tp in acked}:
            self._after_commit(f"waiting for the synchronous replicas of {sp}", lambda: self._await_stream(sp, acked))

    def _await_stream(self, sp: StreamPath, acked: dict[TopicPath, dict[int, tuple[int, int]]]) -> None:
        """Wait for every synchronous, unpaused replica of ``sp``; one failing does not stop the others."""
        entry = self.admin.entry(sp)  # fresh: replicas may have been added or paused
        for link in entry.replicas:
            if link.synchronous and not link.paused:
                self._after_commit(
                    f"waiting for synchronous replica {link.path}", lambda: self._await_replica(sp, entry, link, acked)
                )

    def _await_replica(
        self, sp: StreamPath, entry: StreamEntry, link: ReplicaLink, acked: dict[TopicPath, dict[int, tuple[int, int]]]
    ) -> None:
        """Wait until the synchronous replica of ``link`` has applied ``acked``, or fall back."""
        replica = self.admin.path(link.path)
        try:
            replica_entry = self.admin.entry(replica)
        except NotFound:
            return
        if not rules.agreement(sp, entry, replica, replica_entry).agreed:
            return  # no gateway will apply anything: there is nothing to wait for
        store = self.admin.store(replica)
        targets = {
            rules.position_key(entry.uuid, tp.topic, p): end
            for tp, parts in acked.items()
            if tp.stream == sp
            for p, (_, end) in parts.items()
        }

        fell_back = link.state is ReplicaState.SYNC_FALLBACK
        if fell_back:
            # Asynchronous while the replica lags. Once it has applied everything before
            # these messages it has caught up: wait for these again, as a synchronous
            # replica, and if they arrive in time it is synchronous again.
            firsts = {
                rules.position_key(entry.uuid, tp.topic, p): first
                for tp, parts in acked.items()
                if tp.stream == sp
                for p, (first, _) in parts.items()
            }
            marks = store.marks(replica_entry.uuid)
            if not all(marks.get(key, 0) >= first for key, first in firsts.items()):
                return
        deadline = time.monotonic() + self.sync_timeout
        while not covers(store.marks(replica_entry.uuid), targets):
            if time.monotonic() >= deadline:
                if not fell_back:
                    self.admin.set_replica_state(sp, replica, ReplicaState.SYNC_FALLBACK)
                self._warn(
                    f"synchronous replica {replica} did not apply the messages within {self.sync_timeout:g} s: "
                    f"it is replicated asynchronously until it catches up ({ReplicaState.SYNC_FALLBACK.value}); "
                    f"the messages are written to {sp}"
                )
                return
            time.sleep(SYNC_POLL_SECONDS)
        if fell_back:  # caught up: synchronous again
            self.admin.set_replica_state(sp, replica, ReplicaState.REPLICATING)
