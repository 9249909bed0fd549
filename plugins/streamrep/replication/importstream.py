"""importstream: apply an ops directory that diffstreams wrote (``opsForDst`` or ``opsForSrc``, the
format of ``replication/ops.py``) to the stream it was made for, exactly once, as MapR's
``mapr importstream`` does.

**Refused in one line, before anything is written**: a folder that is not a complete ops directory
(no manifest, a listed file missing, a file it does not list, a file shorter or longer than listed),
a manifest of another format, a directory made for another stream (by UUID), and a corrupt file
(its name and line: bad JSON, an unknown op, bad base64, a topic or partition the stream does not
have...). Every file is read and checked before the first write.

**Rights.** produceperm on the stream. A one-way replica is written only by its gateways (its
producers are refused, and on Kafka its broker's ACLs let only the gateway principal write), so
there the caller needs the gateway's right instead: the replica cluster's admin or its gateway
principal (``StreamAdmin.require_gateway``), as ``gateway run``. A topic the stream lacks but the
other stream had when diffed (a deleted replica topic) is created with the other's partition count,
as copystream and the gateways create a replica's topics: that needs topicperm too (on a one-way
replica the gateway's right covers it). A stream a failover has fenced refuses imports as it
refuses producers.

**Exactly once.** Each ``put`` carries its identity (``origin``), written as the ``streamrep.origin``
header, and a put whose identity the stream already holds in that topic (``diff.origin_of``, the
rule diffstreams matches by) is skipped. A second run writes nothing; a run killed half way is
simply run again. Each partition's messages are written through ``Store.apply`` (the gateways'
transactional write), up to ``IMPORT_BATCH`` at a time, each batch all or nothing, with an import
mark ``i|import|<topic>|<partition>`` counting what imports wrote there. Each apply expects that
mark and the partition's replication positions (``p|...``) as they were read *before* the stream's
identities: so when another import, or a gateway applying into that partition, wrote meanwhile, the
apply writes nothing (``RetryNow``) and the import reads the identities again and goes on. Two
imports at once therefore write each message once. A plain producer writing a message with the
same ``streamrep.origin`` header meanwhile is not fenced: only streamrep's writers are.

**Appended, and marked.** A log cannot insert, so an imported message goes after what the
partition holds, with the header ``streamrep.imported`` (the import's time, ms). The diff leaves
that header out of the content it compares and compares the order of imported messages only
among themselves (``replication/diff/``), so a repaired stream compares clean.

**Not applied**: the ``differs`` lines (changed, out of order, duplicated: a log cannot change,
move or delete a message in place). They are counted and reported, for a person to decide.

**On a live link.** Importing a replica's extra messages into its source (``opsForSrc``) does not
send them back: each keeps its origin, the replica's UUID, and a gateway never applies a message to
its origin stream. Importing what a replica lacks (``opsForDst``) restores its content; what the
replica's link recorded as applied (its offset syncs) is not rewritten, so a link that reported lost
data (REPLICA_STATE_UNEXPECTED after a deleted replica topic) keeps reporting it where the offsets
moved: docs/user-guide.md gives the operator's path.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from streamrep.client.admin import StreamAdmin
from streamrep.errors import AlreadyExists, Conflict, InvalidArgument, NotFound, PermissionDenied, RetryNow
from streamrep.model.acls import one_way_replica
from streamrep.model.catalog import StreamEntry
from streamrep.model.failover import check_writable
from streamrep.model.message import IMPORTED_HEADER, ORIGIN_HEADER, Message
from streamrep.model.paths import StreamPath
from streamrep.model.replication import mark_partition
from streamrep.replication.diff import Kind, Origin, Reader, Side, origin_of
from streamrep.replication.ops import MANIFEST, OPS_FOR_DST, OPS_FOR_SRC, read_manifest
from streamrep.store.base import Store

IMPORT_BATCH = 10_000  # messages per transactional write
IMPORT_RETRIES = 20  # writes another writer's fence refused, before giving up
_ORIGIN = re.compile(r"^([^/]+)/(\d+)/(\d+)$")
_FILE = re.compile(r"^(.+)\.(\d+)\.jsonl$")

__all__ = ["IMPORT_BATCH", "ImportSummary", "import_key", "import_stream"]


def import_key(topic: str, partition: int) -> str:
    """The mark counting what imports wrote into one partition: the fence between two imports."""
    return f"i|import|{topic}|{partition}"


@dataclass(frozen=True)
class ImportSummary:
    """What ``import_stream`` did: messages ``applied``, puts ``present`` already (skipped),
    ``differs`` lines left for a person (by kind), the ``files`` read and the topics ``created``."""

    folder: str
    target: StreamPath
    files: int
    applied: int
    present: int
    differs: tuple[tuple[str, int], ...] = ()
    created: tuple[str, ...] = ()

    @property
    def left(self) -> int:
        """The differences not applied: left for a person."""
        return sum(n for _, n in self.differs)

    def summary(self) -> str:
        """The one line: what was written, and (never to be missed) what was not."""
        line = (
            f"imported {self.applied} messages into {self.target} ({self.present} already present, {self.files} files)"
        )
        if self.created:
            line += f"; created topics {', '.join(self.created)}"
        if self.left:
            kinds = ", ".join(f"{n} {kind}" for kind, n in self.differs)
            line += f"; NOT APPLIED: {self.left} differences left for a person ({kinds}): the differs lines of {self.folder}"
        return line

    def to_dict(self) -> dict[str, Any]:
        """The CLI's ``-json`` row."""
        return {
            "src": self.folder,
            "dst": str(self.target),
            "files": self.files,
            "applied": self.applied,
            "alreadyPresent": self.present,
            "leftForAPerson": self.left,
            "differs": dict(self.differs),
            "createdTopics": list(self.created),
            "summary": self.summary(),
        }


class _Put(NamedTuple):
    """One ``put`` line, checked: its file and line, and the message to write."""

    file: str
    line: int
    partition: int
    origin: Origin
    message: Message


@dataclass
class _Ops:
    """An ops directory, read and checked: the puts by topic, and the differs lines by kind."""

    folder: Path
    manifest: dict[str, Any]
    puts: dict[str, list[_Put]] = field(default_factory=lambda: defaultdict(list))
    differs: Counter[str] = field(default_factory=Counter)


class _Bad(Exception):
    """A line's fault, to be named with its file and line number."""


# -- reading and checking ------------------------------------------------------------------------


def _manifest(folder: Path) -> dict[str, Any]:
    if not folder.exists():
        raise InvalidArgument(f"ops directory {folder} does not exist")
    if not folder.is_dir():
        raise InvalidArgument(f"ops directory {folder} is not a directory")
    if not (folder / MANIFEST).exists() and (folder / OPS_FOR_DST).is_dir():
        raise InvalidArgument(
            f"{folder} holds {OPS_FOR_DST}/ and {OPS_FOR_SRC}/: give one of them as the ops directory"
        )
    data = read_manifest(folder)
    path = folder / MANIFEST
    target = data.get("target")
    if data.get("direction") not in (OPS_FOR_DST, OPS_FOR_SRC):
        raise InvalidArgument(f"{path} is not a valid ops manifest: direction {data.get('direction')!r}")
    if not isinstance(target, dict) or not all(isinstance(target.get(k), str) for k in ("path", "uuid")):
        raise InvalidArgument(f"{path} is not a valid ops manifest: no target path and uuid")
    files = data.get("files")
    if not isinstance(files, dict) or not all(
        isinstance(n, str) and type(c) is int and c >= 0 for n, c in files.items()
    ):
        raise InvalidArgument(f"{path} is not a valid ops manifest: no list of files with line counts")
    if not isinstance(data.get("point", []), list):
        raise InvalidArgument(f"{path} is not a valid ops manifest: its point is not a list")
    return data


def _read(folder: Path, manifest: dict[str, Any], stamp: bytes) -> _Ops:
    """Every file of the directory, checked line by line (``_Bad`` names what is wrong)."""
    listed: dict[str, int] = manifest["files"]
    present = {p.name for p in folder.iterdir() if p.name != MANIFEST}
    for name in sorted(listed):
        if name not in present:
            raise InvalidArgument(
                f"{folder} is not a complete ops directory: {name}, listed in its manifest, is missing"
            )
    for name in sorted(present - set(listed)):
        raise InvalidArgument(f"{folder / name} is not listed in the manifest of {folder}: not an ops file of it")
    ops = _Ops(folder, manifest)
    for name, count in sorted(listed.items()):
        path = folder / name
        named = _FILE.match(name)
        if named is None:
            raise InvalidArgument(f"{path}: not an ops file name (<topic>.<partition>.jsonl)")
        topic, partition = named.group(1), int(named.group(2))
        number = 0
        try:
            with open(path, encoding="utf-8") as lines:
                for number, text in enumerate(lines, 1):
                    _line(ops, name, topic, partition, number, text, stamp)
        except _Bad as bad:
            raise InvalidArgument(f"{path} line {number}: {bad}") from None
        except UnicodeDecodeError:
            raise InvalidArgument(f"{path} line {number + 1}: not UTF-8 text") from None
        except OSError as err:
            raise InvalidArgument(f"{path} cannot be read: {err.strerror or err}") from None
        if number != count:
            raise InvalidArgument(f"{path} has {number} lines, its manifest says {count}: cut short or changed")
    return ops


def _line(ops: _Ops, name: str, topic: str, partition: int, number: int, text: str, stamp: bytes) -> None:
    try:
        op = json.loads(text)
    except json.JSONDecodeError as err:
        raise _Bad(f"bad JSON ({err.msg})") from None
    if not isinstance(op, dict):
        raise _Bad("not a JSON object")
    if op.get("topic") != topic:
        raise _Bad(f"topic {op.get('topic')!r} in the file of topic {topic!r}")
    origin = _origin(op.get("origin"))
    kind = op.get("op")
    if kind == "differs":
        if op.get("kind") not in {k.value for k in Kind}:
            raise _Bad(f"unknown kind of difference {op.get('kind')!r}")
        ops.differs[op["kind"]] += 1
        return
    if kind != "put":
        raise _Bad(f"unknown op {kind!r} (put or differs)")
    if op.get("partition") != partition or type(op.get("partition")) is not int:
        raise _Bad(f"partition {op.get('partition')!r} in the file of partition {partition}")
    timestamp = op.get("timestamp")
    if type(timestamp) is not int or timestamp < 0:
        raise _Bad(f"timestamp {timestamp!r} is not a time in ms")
    headers = op.get("headers")
    if not isinstance(headers, list) or not all(
        isinstance(h, list) and len(h) == 2 and isinstance(h[0], str) for h in headers
    ):
        raise _Bad("headers are not a list of [name, base64] pairs")
    if any(header in (ORIGIN_HEADER, IMPORTED_HEADER) for header, _ in headers):
        raise _Bad(f"a header {ORIGIN_HEADER} or {IMPORTED_HEADER}: the identity belongs in origin")
    decoded = tuple((header, _bytes(value, f"header {header}")) for header, value in headers)
    message = Message(
        _bytes(op.get("value"), "value"),
        None if op.get("key") is None else _bytes(op["key"], "key"),
        (*decoded, (ORIGIN_HEADER, str(origin).encode("ascii")), (IMPORTED_HEADER, stamp)),
        timestamp,
    )
    ops.puts[topic].append(_Put(name, number, partition, origin, message))


def _origin(text: object) -> Origin:
    found = _ORIGIN.match(text) if isinstance(text, str) else None
    if found is None or not found.group(1).isascii():
        raise _Bad(f"origin {text!r} is not <stream uuid>/<partition>/<offset>")
    return Origin(found.group(1), int(found.group(2)), int(found.group(3)))


def _bytes(text: object, what: str) -> bytes:
    if not isinstance(text, str):
        raise _Bad(f"{what} is not base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise _Bad(f"bad base64 in {what}") from None


# -- checking against the stream -----------------------------------------------------------------


def _check_rights(admin: StreamAdmin, dst: StreamPath, entry: StreamEntry) -> None:
    if one_way_replica(entry):
        try:
            admin.require_gateway(dst.cluster)
        except PermissionDenied as err:
            upstreams = ", ".join(u.path for u in entry.upstreams)
            raise PermissionDenied(
                f"{err}: stream {dst} is a one-way replica of {upstreams}, written only by its gateways, so "
                "importing into it needs their right (the cluster's adminperm, or its gateway principal)"
            ) from None
    else:
        admin.require(entry, dst, "produceperm")
    check_writable(str(dst), entry.failover)


def _partitions_wanted(ops: _Ops, topic: str, have: int | None, dst: StreamPath) -> int | None:
    """The partitions ``topic`` must have for its puts; None if it has them. A topic the stream
    lacks gets the partition count the other stream had when diffed (the manifest's point)."""
    manifest = ops.manifest
    other = "src" if manifest["direction"] == OPS_FOR_DST else "dst"
    count = have
    if count is None:
        held = [
            p.get("partition")
            for p in manifest.get("point", [])
            if isinstance(p, dict) and p.get("topic") == topic and p.get(other) is not None
        ]
        count = max((p + 1 for p in held if type(p) is int), default=None)
    for put in ops.puts[topic]:
        where = f"{ops.folder / put.file} line {put.line}"
        if count is None:
            raise InvalidArgument(
                f"{where}: topic {topic}, which stream {dst} does not have (nor had {manifest[other]['path']})"
            )
        if put.partition >= count:
            raise InvalidArgument(
                f"{where}: partition {put.partition} of topic {topic}, which stream {dst} does not have "
                f"({count} partitions)"
            )
    return None if have is not None else count


# -- writing -------------------------------------------------------------------------------------


def _identities(store: Store, uuid: str, path: StreamPath, topic: str) -> set[Origin]:
    """Every identity ``topic`` of the stream holds now (``diff.origin_of``'s rule)."""
    count = store.topics(uuid).get(topic, 0)
    parts = [(uuid, topic, partition) for partition in range(count)]
    side = Side(path, uuid, store)
    for partition, bounds in enumerate(store.offsets_many(parts)):
        if isinstance(bounds, tuple):
            side.bounds[(topic, partition)] = bounds
    reader = Reader()
    return {origin_of(m, uuid) for partition in range(count) for m in reader.scan(side, topic, partition)}


def _fence(marks: dict[str, int], topic: str, partition: int) -> dict[str, int | None]:
    """What an import's apply into one partition expects unchanged: the import mark, and the
    replication positions a gateway moves when it applies there."""
    key = import_key(topic, partition)
    expect: dict[str, int | None] = {key: marks.get(key)}
    for name, value in marks.items():
        if name.startswith("p|") and mark_partition(name) == (topic, partition):
            expect[name] = value
    return expect


def _chunks(puts: list[_Put]) -> Iterator[list[_Put]]:
    for at in range(0, len(puts), IMPORT_BATCH):
        yield puts[at : at + IMPORT_BATCH]


def _write_topic(store: Store, uuid: str, path: StreamPath, topic: str, puts: list[_Put]) -> int:
    """Write the puts of one topic whose identity the stream does not hold; returns how many."""
    written = 0
    for _ in range(IMPORT_RETRIES):
        marks = store.marks(uuid)  # before the identities: a write after this read moves a fence
        held = _identities(store, uuid, path, topic)
        by_partition: dict[int, list[_Put]] = defaultdict(list)
        for put in puts:
            if put.origin not in held:
                held.add(put.origin)  # a put twice in the directory is written once
                by_partition[put.partition].append(put)
        try:
            for partition, todo in sorted(by_partition.items()):
                for chunk in _chunks(todo):
                    expect = _fence(marks, topic, partition)
                    key = import_key(topic, partition)
                    count = (marks.get(key) or 0) + len(chunk)
                    store.apply(uuid, topic, partition, [p.message for p in chunk], {key: count}, expect)
                    marks[key] = count
                    written += len(chunk)
            return written
        except RetryNow:
            continue  # another writer was here meanwhile: what it (or this run) wrote is held now
    raise Conflict(f"topic {topic} of stream {path} kept changing while importing into it; run importstream again")


def import_stream(admin: StreamAdmin, folder: str | Path, destination: str) -> ImportSummary:
    """``importstream -src <folder> -dst <destination>``: apply an ops directory, exactly once
    (the module's docstring). Everything is checked before the first write."""
    where = Path(folder).expanduser()
    manifest = _manifest(where)
    dst = admin.path(destination)
    entry = admin.entry(dst)
    target = manifest["target"]
    if target["uuid"] != entry.uuid:
        raise InvalidArgument(
            f"ops directory {folder} was made for stream {target['path']} (uuid {target['uuid']}), "
            f"not {dst} (uuid {entry.uuid})"
        )
    _check_rights(admin, dst, entry)
    ops = _read(where, manifest, str(int(time.time() * 1000)).encode("ascii"))
    store = admin.store(dst)
    topics = store.topics(entry.uuid)
    to_create = {}
    for topic in sorted(ops.puts):
        wanted = _partitions_wanted(ops, topic, topics.get(topic), dst)
        if wanted is not None:
            to_create[topic] = wanted
    if to_create and not one_way_replica(entry):
        admin.require(entry, dst, "topicperm")
    for topic, count in to_create.items():
        try:
            store.create_topic(entry.uuid, topic, count)
        except AlreadyExists:
            pass  # created meanwhile (a concurrent import)
    applied = present = 0
    for topic, puts in sorted(ops.puts.items()):
        try:
            written = _write_topic(store, entry.uuid, dst, topic, puts)
        except NotFound:
            raise Conflict(f"topic {topic} of stream {dst} was deleted while importing into it; run again") from None
        applied += written
        present += len(puts) - written
    return ImportSummary(
        str(folder),
        dst,
        len(manifest["files"]),
        applied,
        present,
        tuple(sorted(ops.differs.items())),
        tuple(to_create),
    )
