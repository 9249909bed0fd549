"""diffstreams and diffstreamswithcrc: compare two streams' content, MapR's way, by identity.

A replica's offsets are its own, and multi-master replicas interleave two origins, so messages
are matched by **identity**: (topic, origin stream UUID, origin partition, origin offset), from
the header ``streamrep.origin`` a replicated message carries, else the stream's own UUID,
partition and offset (a message produced there). For each identity both streams hold, the key,
value, headers (but the origin header), timestamp and partition must be equal; and the messages
of one origin partition must come in the same relative order in each partition of both streams.
docs/user-guide.md ("Comparing and repairing streams") states it for users.

**Imported messages.** importstream appends what a stream lacks (a log cannot insert) and marks it
with the header ``streamrep.imported``. That header is not content (like ``streamrep.origin``), and
a message imported on either side is compared in order only with the other imported messages of
its order group: its place after what the partition already held says nothing about the source's
order, while imports append in the source's order (``replication/importstream.py``).

**The consistent point.** Each side is read up to its end when the run starts. A message one side
holds and the other lacks is **in flight** (counted as how far behind the other is, never as a
difference) when the other has not applied it yet, by either of two marks it read before its ends:
- its position mark for the holder's partition (``p|<holder uuid>|<topic>|<partition>``, as
  ``replication/pending.py`` reads it), when it replicates the holder directly;
- its origin mark for the message's stream of origin (``o|<origin uuid>|<topic>|<partition>``, the
  next origin offset it needs, whichever path brought the last one), when that origin still flows
  into it along agreed links (``Feeds``: the walk up its upstreams, less the flows a failover
  stopped). So in a mesh of three masters, what one side has applied of the third and the other has
  not yet is in flight; in a chain A->B->C, comparing A with C, what C has not got yet through B is.
A message that originated in a stream past the end it had when the run started is not compared
either (the other stream may have got it after that end was read).

**Retention.** A message one side holds that originated in the other below the other's start now
*expired* there (``expired_in_src``, ``expired_in_dst``): counted, not a difference, nothing to
import. Messages the source's retention removed before its replica applied them are held by neither:
they are **lost** (``DiffResult.losses``, from the replica's loss records and a position below the
source's start), acknowledged or not (``stream replica acknowledge`` keeps an acknowledged record).

**Exit 1** (``DiffResult.same`` false) when there is a difference or an unacknowledged loss: a
replica about to take over lacks messages nobody accepted losing. Expired messages, acknowledged
losses and what is in flight do not make it differ; the summary line counts each.

Limits: a path of the walk through a cluster that cannot be read ends there (that upstream still
counts as feeding); a loss on an intermediate stream of a chain (B, comparing A with C in A->B->C)
is B's record, not reported here (``stream replica list`` of A shows it).

The full compare (``diff_streams``) keeps a small record per message (identity, place, a digest
of its content). The CRC variant (``diff_streams_crc``) first sums CRC32s of **runs** of identities
(``CRC_RUN`` consecutive origin offsets of one origin partition, so a run means the same messages on
both sides; each message's CRC input holds its place and its predecessor of the same origin in its
partition, so an order difference changes a run's CRC too), then runs the full compare only on the
(partition, origin partition) groups that hold a run whose CRCs differ: it finds exactly the
differences the full compare finds (``tests/unit/test_diffstreams.py`` checks every planted case).

Reads go through the ``Store`` interface only, so both backends (and a mix of them) compare alike.
The reading and digesting (the expensive step) is a ``Scanner``: ``Reader`` in this process, or
``streamrep.spark.diff.SparkScanner`` in Spark tasks (``-engine spark``); the compare is this one.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any, NamedTuple, Protocol, cast

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument, NotFound, StreamrepError
from streamrep.model import replication as rules
from streamrep.model.catalog import StreamEntry
from streamrep.model.message import IMPORTED_HEADER, ORIGIN_HEADER, Message
from streamrep.model.paths import StreamPath
from streamrep.replication.pending import applied_position
from streamrep.store.base import Store

CRC_RUN = 1_000  # identities per CRC run: consecutive origin offsets of one origin partition
READ_BATCH = 5_000  # messages read at a time


class Origin(NamedTuple):
    """Where a message was first produced: stream UUID, partition, offset."""

    uuid: str
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.uuid}/{self.partition}/{self.offset}"


def origin_of(message: Message, stream_uuid: str) -> Origin:
    """A message's origin: its ``streamrep.origin`` header, else (the stream, its partition and offset).
    A header that is not ``<uuid>/<partition>/<offset>`` is content, not an origin."""
    header = message.header(ORIGIN_HEADER)
    if header is not None:
        parts = header.split(b"/")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            return Origin(_text(parts[0]), int(parts[1]), int(parts[2]))
    return Origin(stream_uuid, message.partition, message.offset)


@lru_cache(maxsize=1024)
def _text(uuid: bytes) -> str:
    return uuid.decode("ascii", "replace")


@lru_cache(maxsize=1024)
def _uuid_field(uuid: str) -> bytes:
    return _field(uuid.encode("utf-8"))


def content_headers(message: Message) -> tuple[tuple[str, bytes], ...]:
    """The headers compared: all but the origin and the imported header, in order."""
    headers = message.headers
    if not headers or (len(headers) == 1 and headers[0][0] == ORIGIN_HEADER):
        return ()
    return tuple((k, v) for k, v in headers if k not in _NOT_CONTENT)


_NOT_CONTENT = frozenset({ORIGIN_HEADER, IMPORTED_HEADER})  # where a message came from, not what it holds


_LENGTH = struct.Struct(">q")
_NUMBERS = struct.Struct(">qqqq")
_NONE = _LENGTH.pack(-1)


def _field(data: bytes | None) -> bytes:
    return _NONE if data is None else _LENGTH.pack(len(data)) + data


def canonical(origin: Origin, partition: int, message: Message) -> bytes:
    """The canonical encoding of what is compared: identity, partition, key, value, headers (but the
    origin header) and timestamp; lengths before bytes, None distinct from empty."""
    headers = content_headers(message)
    encoded = (
        _uuid_field(origin.uuid)
        + _NUMBERS.pack(origin.partition, origin.offset, partition, message.timestamp)
        + _field(message.key)
        + _field(message.value)
        + _LENGTH.pack(len(headers))
    )
    for name, value in headers:
        encoded += _field(name.encode("utf-8")) + _field(value)
    return encoded


class Kind(str, Enum):
    """What differs about one identity."""

    MISSING_IN_DST = "missing in dst"  # the source holds it, the destination does not
    EXTRA_IN_DST = "extra in dst"  # the destination holds it, the source does not
    CHANGED = "changed"  # both hold it, with another key, value, headers, timestamp or partition
    OUT_OF_ORDER = "out of order"  # both hold it, but not in the same order among its origin's messages
    DUPLICATED = "duplicated"  # one stream holds it twice


class Place(NamedTuple):
    """Where a stream holds a message: partition and offset."""

    partition: int
    offset: int


@dataclass(frozen=True)
class Difference:
    """One difference: ``kind``, the identity (``topic``, ``origin``), and where each side holds it
    (None: not there). ``duplicate`` is the second copy's place, for ``DUPLICATED`` (on ``side``)."""

    kind: Kind
    topic: str
    origin: Origin
    src: Place | None
    dst: Place | None
    side: str = ""  # for DUPLICATED: "src" or "dst"
    duplicate: Place | None = None


class PartitionPoint(NamedTuple):
    """The consistent point of one topic partition: each side's ``[start, end)`` when the run
    started (None: the side has no such partition), and what each had applied of the other (its
    position mark; None: it does not replicate the other)."""

    topic: str
    partition: int
    src: tuple[int, int] | None
    dst: tuple[int, int] | None
    dst_applied: int | None
    src_applied: int | None


@dataclass(frozen=True)
class Loss:
    """Offsets ``first`` to ``last`` of a partition of ``source`` ("src" or "dst") that its retention
    removed before the other stream, its replica, applied them: neither holds them. From the
    replica's loss records (``model.replication.loss_key``), or its position below the source's
    start (a loss a gateway has yet to record); ``acknowledged`` by ``stream replica acknowledge``."""

    source: str
    topic: str
    partition: int
    first: int
    last: int
    acknowledged: bool

    @property
    def messages(self) -> int:
        return self.last - self.first + 1


@dataclass
class DiffResult:
    """What a comparison found, up to its consistent point."""

    src: StreamPath
    src_uuid: str
    dst: StreamPath
    dst_uuid: str
    crc: bool
    dst_replicates_src: bool
    src_replicates_dst: bool
    points: list[PartitionPoint] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    compared: int = 0  # messages compared (both sides)
    dst_behind: int = 0  # source messages the destination has not applied yet (in flight)
    src_behind: int = 0  # destination messages the source has not applied yet (multi-master)
    read_messages: int = 0  # messages read from both stores (the CRC variant reads some twice)
    read_bytes: int = 0  # their keys and values
    runs: int = 0  # CRC runs compared (the CRC variant)
    runs_differing: int = 0
    stopped_early: bool = False  # -first_exit stopped at the first difference
    expired_in_src: int = 0  # the destination holds them; the source's retention removed them since
    expired_in_dst: int = 0  # the source holds them; the destination's retention removed them since
    losses: list[Loss] = field(default_factory=list)

    def count(self, kind: Kind) -> int:
        return sum(1 for d in self.differences if d.kind is kind)

    @property
    def lost(self) -> int:
        """Messages lost to retention before replication that no admin has acknowledged."""
        return sum(loss.messages for loss in self.losses if not loss.acknowledged)

    @property
    def lost_acknowledged(self) -> int:
        return sum(loss.messages for loss in self.losses if loss.acknowledged)

    @property
    def same(self) -> bool:
        """No difference and no unacknowledged loss (the rule of exit 1: the module's docstring)."""
        return not self.differences and not self.lost

    def summary(self) -> str:
        """The one line: ``same: ...`` or ``differ: 3 missing in dst, ...``."""
        behind = f"dst {self.dst_behind} behind"
        if self.src_replicates_dst:
            behind += f", src {self.src_behind} behind"
        notes = [f"{behind}, not counted"]
        for count, text in (
            (self.expired_in_src, "expired in src"),
            (self.expired_in_dst, "expired in dst"),
            (self.lost_acknowledged, "lost to retention before replication, acknowledged"),
        ):
            if count:
                notes.append(f"{count} {text}")
        if self.same:
            return f"same: {self.compared} messages compared ({'; '.join(notes)})"
        counts = [f"{self.count(k)} {k.value}" for k in Kind if k is not Kind.DUPLICATED]
        if self.count(Kind.DUPLICATED):
            counts.append(f"{self.count(Kind.DUPLICATED)} duplicated")
        if self.lost:
            counts.append(f"{self.lost} lost to retention before replication, not acknowledged")
        stopped = "; stopped at the first difference" if self.stopped_early else ""
        return f"differ: {', '.join(counts)} ({'; '.join(notes)}){stopped}"

    def to_dict(self, outdir: str) -> dict[str, Any]:
        """The result as the CLI's ``-json`` row, the Spark app's JSON line and the operators'
        return value: the counts and the summary line (``outdir``: where the ops were written)."""
        return {
            "src": str(self.src),
            "srcUuid": self.src_uuid,
            "dst": str(self.dst),
            "dstUuid": self.dst_uuid,
            "same": self.same,
            "missingInDst": self.count(Kind.MISSING_IN_DST),
            "extraInDst": self.count(Kind.EXTRA_IN_DST),
            "changed": self.count(Kind.CHANGED),
            "outOfOrder": self.count(Kind.OUT_OF_ORDER),
            "duplicated": self.count(Kind.DUPLICATED),
            "dstBehind": self.dst_behind,
            "srcBehind": self.src_behind,
            "expiredInSrc": self.expired_in_src,
            "expiredInDst": self.expired_in_dst,
            "lost": self.lost,
            "lostAcknowledged": self.lost_acknowledged,
            "compared": self.compared,
            "readMessages": self.read_messages,
            "readBytes": self.read_bytes,
            "stoppedEarly": self.stopped_early,
            "outdir": outdir,
            "summary": self.summary(),
        }


# -- the snapshot --------------------------------------------------------------------------------


@dataclass
class Feeds:
    """The agreed replica links that carry messages into a stream, walked up from it: the UUIDs of
    each stream's ``upstreams`` on the walk, and the flows a failover ``stopped`` (replica, upstream,
    topic, partition). A replicated message keeps its topic and partition along every link."""

    upstreams: dict[str, set[str]] = field(default_factory=dict)
    stopped: set[tuple[str, str, str, int]] = field(default_factory=set)

    def reaches(self, origin: str, stream: str, topic: str, partition: int) -> bool:
        """Whether messages first produced in ``origin`` (topic, partition) still flow into ``stream``."""
        seen, todo = {stream}, [stream]
        while todo:
            at = todo.pop()
            for upstream in self.upstreams.get(at, ()):
                if upstream in seen or (at, upstream, topic, partition) in self.stopped:
                    continue
                if upstream == origin:
                    return True
                seen.add(upstream)
                todo.append(upstream)
        return False


@dataclass
class Side:
    """One stream at the start of the run: its partitions' ``[start, end)``, what it had applied of
    the other stream (its position marks for it; None when it does not replicate the other), how far
    it had got in each stream of origin (its origin marks: (origin uuid, topic, origin partition) ->
    the next origin offset it needs), the links that feed it, and its losses from the other stream."""

    path: StreamPath
    uuid: str
    store: Store
    bounds: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    applied: dict[tuple[str, int], int] | None = None
    origins: dict[tuple[str, str, int], int] = field(default_factory=dict)
    feeds: Feeds = field(default_factory=Feeds)
    losses: list[Loss] = field(default_factory=list)

    def end_of(self, topic: str, partition: int) -> int | None:
        held = self.bounds.get((topic, partition))
        return None if held is None else held[1]

    def held(self) -> int:
        """How many messages it holds up to the consistent point (``-engine auto`` decides by it)."""
        return sum(end - start for start, end in self.bounds.values())


def check_diff(
    admin: StreamAdmin, source: str, destination: str
) -> tuple[StreamPath, StreamEntry, StreamPath, StreamEntry]:
    """The rights a comparison needs, as MapR's diffstreams: consumeperm or copyperm on each stream
    (no user is exempt); two streams, distinct by path and by UUID."""
    src, dst = admin.path(source), admin.path(destination)
    if src == dst:
        raise InvalidArgument(f"cannot compare stream {src} with itself")
    src_entry = admin.entry(src)
    dst_entry = admin.entry(dst)
    admin.require_any(src_entry, src, "consumeperm", "copyperm")
    admin.require_any(dst_entry, dst, "consumeperm", "copyperm")
    if src_entry.uuid == dst_entry.uuid:
        raise InvalidArgument(f"cannot compare stream {src} with itself: {dst} is the same stream {src_entry.uuid}")
    return src, src_entry, dst, dst_entry


def _replicates(source: StreamPath, source_entry: StreamEntry, replica: StreamPath, replica_entry: StreamEntry) -> bool:
    """Whether ``replica`` is the source's replica, by identity (a link bound to its UUID; paused or
    not yet agreed by the replica still counts: what it has not applied is pending)."""
    found = rules.agreement(source, source_entry, replica, replica_entry)
    return found.link is not None and not found.broken


def _bounds(store: Store, uuid: str) -> dict[tuple[str, int], tuple[int, int]]:
    """Every partition's ``[start, end)`` now, asked all at once (one round trip on a network store)."""
    parts = [
        (uuid, topic, partition) for topic, count in sorted(store.topics(uuid).items()) for partition in range(count)
    ]
    result = {}
    for (_, topic, partition), found in zip(parts, store.offsets_many(parts), strict=True):
        if isinstance(found, NotFound):  # deleted meanwhile: holds nothing
            continue
        if isinstance(found, StreamrepError):
            raise found
        result[(topic, partition)] = found
    return result


def _applied(marks: dict[str, int], other: Side) -> dict[tuple[str, int], int]:
    """A replica's positions for ``other``'s partitions (``pending.partition_pending``'s rule: no mark,
    or one below what ``other`` still holds, is its first offset held). A partition whose flow a
    failover stopped (a stop mark) has none: nothing more arrives from it, so nothing is in flight."""
    return {
        (topic, partition): applied_position(marks, other.uuid, topic, partition, start)
        for (topic, partition), (start, _) in other.bounds.items()
        if rules.stop_key(other.uuid, topic, partition) not in marks
    }


def _origins(marks: Mapping[str, int]) -> dict[tuple[str, str, int], int]:
    found = {}
    for key, needed in marks.items():
        if key.startswith("o|"):
            origin, rest = key[2:].split("|", 1)
            topic, partition = rest.rsplit("|", 1)
            found[(origin, topic, int(partition))] = needed
    return found


def _stops(uuid: str, marks: Mapping[str, int]) -> set[tuple[str, str, str, int]]:
    return {(uuid, key.split("|")[1], *rules.mark_partition(key)) for key in marks if key.startswith("s|")}


def _feeds(admin: StreamAdmin, path: StreamPath, entry: StreamEntry, marks: Mapping[str, int]) -> Feeds:
    """Walk the agreed links up from a stream (``_replicates``). An upstream whose cluster cannot be
    read counts by its link's UUID, and the walk stops there: its own upstreams are unknown."""
    feeds = Feeds(stopped=_stops(entry.uuid, marks))
    todo, seen = [(path, entry)], {entry.uuid}
    while todo:
        replica, replica_entry = todo.pop()
        ups = feeds.upstreams.setdefault(replica_entry.uuid, set())
        for link in replica_entry.upstreams:
            try:
                up = admin.path(link.path)
                up_entry = admin.entry(up)
            except StreamrepError:
                ups.update([link.uuid] if link.uuid else [])
                continue
            if not _replicates(up, up_entry, replica, replica_entry):
                continue
            ups.add(up_entry.uuid)
            if up_entry.uuid not in seen:
                seen.add(up_entry.uuid)
                todo.append((up, up_entry))
                try:
                    feeds.stopped |= _stops(up_entry.uuid, admin.store(up).marks(up_entry.uuid))
                except StreamrepError:
                    pass  # its stop marks unknown: its flows count as running
    return feeds


def _losses(marks: Mapping[str, int], source: Side, name: str) -> list[Loss]:
    """A replica's losses from ``source`` (named ``name``): its loss records, acknowledged or not
    (an acknowledged record wins: acknowledge writes it before it drops the loss mark), and the
    losses a gateway has yet to record (its position is below the source's start)."""
    found: dict[tuple[str, int, int], Loss] = {}
    for prefix, acknowledged in (("l|", False), ("a|", True)):
        for key, end in rules.recorded_losses(marks, source.uuid, prefix).items():
            # recorded_losses keeps only the keys parse_loss_key reads
            _, topic, partition, first = cast("tuple[str, str, int, int]", rules.parse_loss_key(key, prefix))
            found[(topic, partition, first)] = Loss(name, topic, partition, first, end - 1, acknowledged)
    starts = {unit: start for unit, (start, _) in source.bounds.items()}
    for topic, partition, first, end in rules.unrecorded_losses(marks, source.uuid, starts):
        found.setdefault((topic, partition, first), Loss(name, topic, partition, first, end - 1, False))
    return [found[k] for k in sorted(found)]


def snapshot(admin: StreamAdmin, source: str, destination: str) -> tuple[Side, Side]:
    """Check the rights (``check_diff``) and fix the consistent point. Each side's marks are read
    before its own ends, and the source's ends last, so whatever the destination holds from the
    source is within the source's ends, and every message a side had applied (by its position or
    origin marks) is within its own ends."""
    src, src_entry, dst, dst_entry = check_diff(admin, source, destination)
    src_side = Side(src, src_entry.uuid, admin.store(src))
    dst_side = Side(dst, dst_entry.uuid, admin.store(dst))
    dst_marks = dst_side.store.marks(dst_side.uuid)
    dst_side.bounds = _bounds(dst_side.store, dst_side.uuid)
    src_marks = src_side.store.marks(src_side.uuid)
    src_side.bounds = _bounds(src_side.store, src_side.uuid)
    for side, marks, entry, other, other_entry, other_name in (
        (dst_side, dst_marks, dst_entry, src_side, src_entry, "src"),
        (src_side, src_marks, src_entry, dst_side, dst_entry, "dst"),
    ):
        side.origins = _origins(marks)
        side.feeds = _feeds(admin, side.path, entry, marks)
        if _replicates(other.path, other_entry, side.path, entry):  # it replicates the other directly
            side.feeds.upstreams[side.uuid].add(other.uuid)
            side.applied = _applied(marks, other)
            side.losses = _losses(marks, other, other_name)
    return src_side, dst_side


# -- reading -------------------------------------------------------------------------------------


class Scanned(NamedTuple):
    """One message as the comparison keeps it: identity, place, digest of its canonical encoding,
    and whether importstream appended it (its order is compared only with others imported)."""

    origin: Origin
    place: Place
    digest: bytes
    imported: bool = False


@dataclass
class Reader:
    """Reads one side's partitions up to the consistent point, counting what it read: the
    ``Scanner`` of a comparison in this process, and what a Spark task of one scans with."""

    messages: int = 0
    bytes: int = 0

    def scan(self, side: Side, topic: str, partition: int) -> Iterator[Message]:
        held = side.bounds.get((topic, partition))
        if held is None:
            return
        at, end = held
        while at < end:
            try:
                batch, after = side.store.read_span(side.uuid, topic, partition, at, min(READ_BATCH, end - at), end)
            except NotFound:  # the topic was deleted after the run started: it holds nothing now
                return
            for message in batch:
                if message.offset < end:
                    self.messages += 1
                    self.bytes += len(message.value or b"") + len(message.key or b"")
                    yield message
            if after <= at:
                return
            at = after

    def digests(
        self, sides: Mapping[str, Side], units: Sequence[Unit], keep: set[Group] | None
    ) -> Iterator[tuple[Unit, list[Scanned]]]:
        for unit in units:
            yield unit, scan_digests(self, sides[unit[0]], unit[1], unit[2], keep)

    def crcs(self, sides: Mapping[str, Side], units: Sequence[Unit]) -> Iterator[tuple[Unit, PartitionCrcs]]:
        for unit in units:
            yield unit, scan_crcs(self, sides[unit[0]], unit[1], unit[2])


Group = tuple[str, int, str, int]  # (topic, stream partition, origin uuid, origin partition): an order group
Run = tuple[str, str, int, int]  # (topic, origin uuid, origin partition, origin offset // CRC_RUN)
Unit = tuple[str, str, int]  # ("src" or "dst", topic, partition): what one scan reads


class PartitionCrcs(NamedTuple):
    """One partition's CRC32 of each run it holds messages of, and how many messages it read."""

    crcs: dict[Run, int]
    messages: int


class Scanner(Protocol):
    """The expensive step of a comparison, pluggable: read partitions up to the consistent point and
    reduce each message to a ``Scanned`` record (``scan_digests``) or into its run's CRC
    (``scan_crcs``). ``Reader`` scans in this process; ``streamrep.spark.diff.SparkScanner`` in
    Spark tasks. Each yields one result per unit, in the order of ``units``, and counts what it read."""

    messages: int
    bytes: int

    def digests(
        self, sides: Mapping[str, Side], units: Sequence[Unit], keep: set[Group] | None
    ) -> Iterable[tuple[Unit, list[Scanned]]]: ...

    def crcs(self, sides: Mapping[str, Side], units: Sequence[Unit]) -> Iterable[tuple[Unit, PartitionCrcs]]: ...


def _imported(message: Message) -> bool:
    headers = message.headers
    return bool(headers) and any(name == IMPORTED_HEADER for name, _ in headers)


def _digest(encoded: bytes) -> bytes:
    return hashlib.blake2b(encoded, digest_size=16).digest()


def scan_digests(reader: Reader, side: Side, topic: str, partition: int, keep: set[Group] | None) -> list[Scanned]:
    """One partition's messages as the full compare keeps them (only those of the order groups in
    ``keep``, when given)."""
    found = []
    for message in reader.scan(side, topic, partition):
        origin = origin_of(message, side.uuid)
        if keep is not None and (topic, partition, origin.uuid, origin.partition) not in keep:
            continue
        digest = _digest(canonical(origin, partition, message))
        found.append(Scanned(origin, Place(partition, message.offset), digest, _imported(message)))
    return found


def scan_crcs(reader: Reader, side: Side, topic: str, partition: int) -> PartitionCrcs:
    """One partition's CRC32 of each run. A message's CRC input is its canonical encoding and the
    origin offset of the message before it of the same origin partition in this partition (-1: none)."""
    crcs: dict[Run, int] = {}
    before: dict[tuple[str, int], int] = {}
    read = 0
    for message in reader.scan(side, topic, partition):
        origin = origin_of(message, side.uuid)
        group = (origin.uuid, origin.partition)
        run = (topic, origin.uuid, origin.partition, origin.offset // CRC_RUN)
        encoded = canonical(origin, partition, message) + _LENGTH.pack(before.get(group, -1))
        before[group] = origin.offset
        crcs[run] = zlib.crc32(encoded, crcs.get(run, 0))
        read += 1
    return PartitionCrcs(crcs, read)


def _units(sides: Mapping[str, Side], topic: str, partitions: Iterable[int] | None = None) -> list[Unit]:
    """The units of ``topic`` (of ``partitions`` only, when given) each side holds, the source's first,
    each side's in partition order (the order decides which of two copies is the first)."""
    wanted = None if partitions is None else set(partitions)
    return [
        (name, t, partition)
        for name, side in sides.items()
        for t, partition in sorted(side.bounds)
        if t == topic and (wanted is None or partition in wanted)
    ]


# -- the full compare ----------------------------------------------------------------------------


def _longest_increasing(ranks: list[int]) -> set[int]:
    """The indexes of one longest strictly increasing subsequence of ``ranks`` (patience sorting)."""
    import bisect

    tails: list[int] = []  # ranks
    tail_index: list[int] = []
    previous = [-1] * len(ranks)
    for i, rank in enumerate(ranks):
        at = bisect.bisect_left(tails, rank)
        if at == len(tails):
            tails.append(rank)
            tail_index.append(i)
        else:
            tails[at] = rank
            tail_index[at] = i
        previous[i] = tail_index[at - 1] if at else -1
    kept = set()
    i = tail_index[-1] if tail_index else -1
    while i >= 0:
        kept.add(i)
        i = previous[i]
    return kept


def _one_only(scanned: Scanned, holder: Side, other: Side, topic: str) -> str:
    """Why ``holder`` has a message ``other`` lacks: "beyond" (it originated in ``other`` after the
    end ``other`` had when the run started: not compared), "expired" (it originated in ``other``,
    whose retention has removed it since), "in flight" (``other`` has not applied it yet: by its
    position mark for ``holder``'s partition when it replicates ``holder``, or by its origin mark
    when the message's origin still flows into it along any chain of links) or "differs"."""
    origin = scanned.origin
    if origin.uuid == other.uuid:
        held = other.bounds.get((topic, origin.partition))
        if held is not None and origin.offset >= held[1]:
            return "beyond"
        if held is not None and origin.offset < held[0]:
            return "expired"
        return "differs"
    if other.applied is not None:
        position = other.applied.get((topic, scanned.place.partition))
        if position is not None and scanned.place.offset >= position:
            return "in flight"
    needed = other.origins.get((origin.uuid, topic, origin.partition), 0)
    if origin.offset >= needed and other.feeds.reaches(origin.uuid, other.uuid, topic, origin.partition):
        return "in flight"
    return "differs"


Held = dict[Origin, Scanned]  # one side's first copy of each identity
InOrder = dict[tuple[Group, bool], list[tuple[int, int, Origin]]]


def _compare_topic(
    result: DiffResult,
    scanner: Scanner,
    src: Side,
    dst: Side,
    topic: str,
    keep: set[Group] | None = None,
) -> None:
    """Compare one topic of both sides (only the order groups in ``keep``, when given: only the
    partitions holding them are read)."""
    sides = {"src": src, "dst": dst}
    partitions = None if keep is None else {p for (_, p, _, _) in keep}
    held, again = _first_copies(scanner.digests(sides, _units(sides, topic, partitions), keep))
    if keep is None:  # the CRC variant counted every message in its first pass
        result.compared += sum(len(held[name]) + len(again[name]) for name in sides)
    # the final sort is stable: a duplicate stays before a difference of the same identity and place
    found = _duplicates(topic, held, again)
    only_src = _only_in(src, dst, held["src"], held["dst"], topic)
    result.dst_behind += len(only_src["in flight"])
    result.expired_in_dst += len(only_src["expired"])
    changed, in_order = _matched(topic, held["src"], held["dst"])
    found += [Difference(Kind.MISSING_IN_DST, topic, s.origin, s.place, None) for s in only_src["differs"]]
    found += changed
    only_dst = _only_in(dst, src, held["dst"], held["src"], topic)
    result.src_behind += len(only_dst["in flight"])
    result.expired_in_src += len(only_dst["expired"])
    found += [Difference(Kind.EXTRA_IN_DST, topic, s.origin, None, s.place) for s in only_dst["differs"]]
    found += _out_of_order(topic, in_order)
    found.sort(key=_where)
    result.differences += found


def _first_copies(
    digests: Iterable[tuple[Unit, Iterable[Scanned]]],
) -> tuple[dict[str, Held], dict[str, list[Scanned]]]:
    """Each side's first copy of each identity (in the order the units come), and any further copies."""
    held: dict[str, Held] = {"src": {}, "dst": {}}
    again: dict[str, list[Scanned]] = {"src": [], "dst": []}
    for (name, _, _), scans in digests:
        for scanned in scans:
            if scanned.origin in held[name]:
                again[name].append(scanned)
            else:
                held[name][scanned.origin] = scanned
    return held, again


def _duplicates(topic: str, held: dict[str, Held], again: dict[str, list[Scanned]]) -> list[Difference]:
    """A ``DUPLICATED`` difference for each further copy, with where each side holds the first."""

    def first(name: str, origin: Origin) -> Place | None:
        return held[name][origin].place if origin in held[name] else None

    return [
        Difference(
            Kind.DUPLICATED, topic, copy.origin, first("src", copy.origin), first("dst", copy.origin), name, copy.place
        )
        for name in ("src", "dst")
        for copy in again[name]
    ]


def _only_in(holder: Side, other: Side, held: Held, others: Held, topic: str) -> dict[str, list[Scanned]]:
    """The messages ``holder`` holds and ``other`` lacks, by why (``_one_only``)."""
    why: dict[str, list[Scanned]] = defaultdict(list)
    for origin, scanned in held.items():
        if origin not in others:
            why[_one_only(scanned, holder, other, topic)].append(scanned)
    return why


def _matched(topic: str, src_held: Held, dst_held: Held) -> tuple[list[Difference], InOrder]:
    """The identities both sides hold: a ``CHANGED`` difference where the digests differ, else their
    offsets (dst, src) by order group and whether either copy was imported (appended), to order."""
    changed: list[Difference] = []
    in_order: InOrder = defaultdict(list)
    for origin, mine in src_held.items():
        theirs = dst_held.get(origin)
        if theirs is None:
            continue
        if theirs.digest != mine.digest:  # the digest covers the partition
            changed.append(Difference(Kind.CHANGED, topic, origin, mine.place, theirs.place))
        else:
            group = (topic, mine.place.partition, origin.uuid, origin.partition)
            in_order[(group, mine.imported or theirs.imported)].append((theirs.place.offset, mine.place.offset, origin))
    return changed, in_order


def _out_of_order(topic: str, in_order: InOrder) -> list[Difference]:
    """An ``OUT_OF_ORDER`` difference for each message outside one longest run in the same order on both sides."""
    found: list[Difference] = []
    for ((_, partition, _, _), _), common in sorted(in_order.items()):
        common.sort()  # the destination's order
        kept = _longest_increasing([src_offset for _, src_offset, _ in common])
        found += [
            Difference(Kind.OUT_OF_ORDER, topic, origin, Place(partition, src_offset), Place(partition, dst_offset))
            for i, (dst_offset, src_offset, origin) in enumerate(common)
            if i not in kept
        ]
    return found


def _where(difference: Difference) -> tuple[int, int, str, int, int]:
    place = difference.src or difference.dst or Place(-1, -1)
    return place.partition, place.offset, difference.origin.uuid, difference.origin.partition, difference.origin.offset


def _topics(src: Side, dst: Side) -> list[str]:
    return sorted({t for t, _ in (*src.bounds, *dst.bounds)})


def _finish(result: DiffResult, scanner: Scanner, first_exit: bool) -> DiffResult:
    result.read_messages, result.read_bytes = scanner.messages, scanner.bytes
    if first_exit and result.differences:
        result.differences = result.differences[:1]
        result.stopped_early = True
    return result


def _new_result(src: Side, dst: Side, crc: bool) -> DiffResult:
    result = DiffResult(src.path, src.uuid, dst.path, dst.uuid, crc, dst.applied is not None, src.applied is not None)
    result.losses = dst.losses + src.losses
    for topic, partition in sorted({*src.bounds, *dst.bounds}):
        result.points.append(
            PartitionPoint(
                topic,
                partition,
                src.bounds.get((topic, partition)),
                dst.bounds.get((topic, partition)),
                None if dst.applied is None else dst.applied.get((topic, partition)),
                None if src.applied is None else src.applied.get((topic, partition)),
            )
        )
    return result


def diff_streams(
    admin: StreamAdmin, source: str, destination: str, first_exit: bool = False, scanner: Scanner | None = None
) -> DiffResult:
    """``diffstreams``: compare every message of both streams up to the consistent point
    (``snapshot``), scanning with ``scanner`` (default: a ``Reader``, in this process).
    ``first_exit`` stops after the first topic with a difference and keeps only its first difference."""
    src, dst = snapshot(admin, source, destination)
    result = _new_result(src, dst, crc=False)
    scanner = Reader() if scanner is None else scanner
    for topic in _topics(src, dst):
        _compare_topic(result, scanner, src, dst, topic)
        if first_exit and result.differences:
            break
    return _finish(result, scanner, first_exit)


# -- the CRC variant -----------------------------------------------------------------------------

_PART_CRC = struct.Struct(">qI")


def diff_streams_crc(
    admin: StreamAdmin, source: str, destination: str, first_exit: bool = False, scanner: Scanner | None = None
) -> DiffResult:
    """``diffstreamswithcrc``: CRC32s of runs of identities first, then the full compare of the
    order groups that hold a run whose CRCs differ; scanning with ``scanner`` (default: a ``Reader``,
    in this process). The same differences as ``diff_streams``."""
    src, dst = snapshot(admin, source, destination)
    result = _new_result(src, dst, crc=True)
    scanner = Reader() if scanner is None else scanner
    sides = {"src": src, "dst": dst}
    for topic in _topics(src, dst):
        # A run's CRC on a side: the CRCs of its parts in each partition, in partition order.
        crcs: dict[str, dict[Run, int]] = {"src": {}, "dst": {}}
        where: dict[Run, set[int]] = defaultdict(set)  # the partitions holding a run's messages, either side
        for (name, _, partition), part in scanner.crcs(sides, _units(sides, topic)):
            result.compared += part.messages
            for run, crc in part.crcs.items():
                crcs[name][run] = zlib.crc32(_PART_CRC.pack(partition, crc), crcs[name].get(run, 0))
                where[run].add(partition)
        runs = set(crcs["src"]) | set(crcs["dst"])
        differing = {run for run in runs if crcs["src"].get(run) != crcs["dst"].get(run)}
        result.runs += len(runs)
        result.runs_differing += len(differing)
        if not differing:
            continue
        groups = {(topic, partition, run[1], run[2]) for run in differing for partition in where[run]}
        _compare_topic(result, scanner, src, dst, topic, keep=groups)
        if first_exit and result.differences:
            break
    return _finish(result, scanner, first_exit)


def fetch(store: Store, uuid: str, topic: str, places: Iterable[Place]) -> dict[Place, Message]:
    """The messages at ``places`` of one stream's topic, read a span at a time per partition."""
    wanted: dict[int, set[int]] = defaultdict(set)
    for place in places:
        wanted[place.partition].add(place.offset)
    found: dict[Place, Message] = {}
    for partition, offsets in wanted.items():
        at, end = min(offsets), max(offsets) + 1
        while at < end:
            try:
                batch, after = store.read_span(uuid, topic, partition, at, min(READ_BATCH, end - at))
            except NotFound:
                break
            for message in batch:
                if message.offset in offsets:
                    found[Place(partition, message.offset)] = message
            if after <= at:
                break
            at = after
    return found


__all__ = [
    "CRC_RUN",
    "DiffResult",
    "Difference",
    "Kind",
    "Origin",
    "PartitionCrcs",
    "PartitionPoint",
    "Place",
    "Reader",
    "Scanned",
    "Scanner",
    "Side",
    "Unit",
    "canonical",
    "check_diff",
    "content_headers",
    "diff_streams",
    "diff_streams_crc",
    "fetch",
    "origin_of",
    "scan_crcs",
    "scan_digests",
    "snapshot",
]
