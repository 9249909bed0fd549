"""The ops directories diffstreams writes and importstream will apply: ``<outdir>/opsForDst/`` (what
would make the destination hold what the source holds) and ``<outdir>/opsForSrc/`` (the other way).

Each directory holds JSON Lines files, one per topic partition of the stream it is for
(``<topic>.<partition>.jsonl``; topic names hold no ``/``), each line one operation, and
``manifest.json``, written last: a directory without one is incomplete. Bytes are base64.

- ``{"op": "put", "topic", "partition", "key", "value", "headers", "timestamp", "origin", "from"}``:
  a message the stream lacks; ``origin`` is its identity (``<uuid>/<partition>/<offset>``), which an
  import writes as the ``streamrep.origin`` header so that it applies each message once; ``headers``
  are the others, as ``[name, base64]`` pairs; ``from`` is where the other stream holds it.
- ``{"op": "differs", "kind", "topic", "origin", "fields", "src", "dst"}``: both streams hold the
  identity, but it differs (``kind`` "changed": ``fields`` names what, and ``src``/``dst`` hold both
  versions), comes in another order (``kind`` "out of order") or is held twice (``kind``
  "duplicated", ``copy`` is where). A log cannot change or move a message in place, so an import
  does not apply these: it reports them, and a person decides.

The manifest names both streams by path and UUID, the consistent point per partition, the counts
and ``format``, so an import can refuse a directory made for another stream or by a newer format.
It also lists the ``losses``: source offsets its retention removed before the replica applied them
(``DiffResult.losses``). Neither stream holds them, so no operation can repair them; and the
messages one stream holds that expired in the other (``expiredInSrc``, ``expiredInDst``) are counted,
not written as puts: importing them would bring back what retention removed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamrep.client.admin import StreamAdmin
from streamrep.errors import InvalidArgument
from streamrep.model.message import Message
from streamrep.replication.diff import (
    Difference,
    DiffResult,
    Kind,
    Place,
    Scanner,
    content_headers,
    diff_streams,
    diff_streams_crc,
    fetch,
    snapshot,
)

FORMAT = "streamrep-ops-1"
OPS_FOR_DST = "opsForDst"
OPS_FOR_SRC = "opsForSrc"
MANIFEST = "manifest.json"


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def check_outdir(text: str) -> Path:
    """The output directory, refused in one line (nothing written) if it exists and is not an empty
    directory, or cannot be written (it, or the nearest folder above it that exists)."""
    path = Path(text).expanduser()
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise InvalidArgument(f"output directory {text} exists and is not a directory")
        if any(path.iterdir()):
            raise InvalidArgument(f"output directory {text} exists and is not empty")
        writable = path
    else:
        writable = path.absolute().parent
        while not writable.exists() and writable != writable.parent:
            writable = writable.parent
        if not writable.is_dir():
            raise InvalidArgument(f"output directory {text} cannot be created: {writable} is not a directory")
    if not os.access(writable, os.W_OK | os.X_OK):
        raise InvalidArgument(f"output directory {text} cannot be written: no write permission on {writable}")
    return path


def _message(message: Message, place: Place) -> dict[str, Any]:
    return {
        "partition": place.partition,
        "offset": place.offset,
        "key": _b64(message.key),
        "value": _b64(message.value),
        "headers": [[name, _b64(value)] for name, value in content_headers(message)],
        "timestamp": message.timestamp,
    }


def _changed_fields(src: Message, dst: Message, src_place: Place, dst_place: Place) -> list[str]:
    checks = {
        "key": src.key != dst.key,
        "value": src.value != dst.value,
        "headers": content_headers(src) != content_headers(dst),
        "timestamp": src.timestamp != dst.timestamp,
        "partition": src_place.partition != dst_place.partition,
    }
    return [name for name, differs in checks.items() if differs]


def _put(difference: Difference, message: Message, place: Place, stream: str) -> dict[str, Any]:
    return {
        "op": "put",
        "topic": difference.topic,
        "partition": place.partition,
        "key": _b64(message.key),
        "value": _b64(message.value),
        "headers": [[name, _b64(value)] for name, value in content_headers(message)],
        "timestamp": message.timestamp,
        "origin": str(difference.origin),
        "from": {"stream": stream, "offset": place.offset},
    }


def _differs(difference: Difference, src: dict[Place, Message], dst: dict[Place, Message]) -> dict[str, Any]:
    line: dict[str, Any] = {
        "op": "differs",
        "kind": difference.kind.value,
        "topic": difference.topic,
        "origin": str(difference.origin),
        "fields": [],
        "src": None,
        "dst": None,
    }
    for side, place, held in (("src", difference.src, src), ("dst", difference.dst, dst)):
        if place is not None:
            message = held.get(place)
            line[side] = (
                _message(message, place)
                if message is not None
                else {"partition": place.partition, "offset": place.offset}
            )
    if difference.kind is Kind.CHANGED and difference.src and difference.dst:
        if difference.src in src and difference.dst in dst:
            line["fields"] = _changed_fields(src[difference.src], dst[difference.dst], difference.src, difference.dst)
    elif difference.kind is Kind.OUT_OF_ORDER:
        line["fields"] = ["order"]
    elif difference.kind is Kind.DUPLICATED and difference.duplicate is not None:
        line["fields"] = [f"held twice in {difference.side}"]
        line["copy"] = {
            "side": difference.side,
            "partition": difference.duplicate.partition,
            "offset": difference.duplicate.offset,
        }
    return line


def _ops(
    admin: StreamAdmin, result: DiffResult
) -> tuple[dict[tuple[str, int], list[dict[str, Any]]], dict[tuple[str, int], list[dict[str, Any]]]]:
    """The lines of opsForDst and opsForSrc, by the topic partition their file is for."""
    src_store, dst_store = admin.store(result.src), admin.store(result.dst)
    wanted_src: dict[str, list[Place]] = defaultdict(list)
    wanted_dst: dict[str, list[Place]] = defaultdict(list)
    for d in result.differences:
        if d.src is not None:
            wanted_src[d.topic].append(d.src)
        if d.dst is not None:
            wanted_dst[d.topic].append(d.dst)
    src_held = {t: fetch(src_store, result.src_uuid, t, places) for t, places in wanted_src.items()}
    dst_held = {t: fetch(dst_store, result.dst_uuid, t, places) for t, places in wanted_dst.items()}
    for_dst: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for_src: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for d in result.differences:
        src_msgs, dst_msgs = src_held.get(d.topic, {}), dst_held.get(d.topic, {})
        if d.kind is Kind.MISSING_IN_DST and d.src is not None and d.src in src_msgs:
            for_dst[(d.topic, d.src.partition)].append(_put(d, src_msgs[d.src], d.src, str(result.src)))
        elif d.kind is Kind.EXTRA_IN_DST and d.dst is not None and d.dst in dst_msgs:
            for_src[(d.topic, d.dst.partition)].append(_put(d, dst_msgs[d.dst], d.dst, str(result.dst)))
        else:
            line = _differs(d, src_msgs, dst_msgs)
            # every difference has a place on one side or both: the source's first, else the destination's
            places = [place for place in (d.src, d.dst) if place is not None]
            for_dst[(d.topic, places[0].partition)].append(line)
            for_src[(d.topic, places[-1].partition)].append(line)
    return for_dst, for_src


def manifest(result: DiffResult, direction: str, files: dict[str, int]) -> dict[str, Any]:
    """The manifest of one ops directory (``direction``: opsForDst or opsForSrc)."""
    src = {"path": str(result.src), "uuid": result.src_uuid}
    dst = {"path": str(result.dst), "uuid": result.dst_uuid}
    return {
        "format": FORMAT,
        "direction": direction,
        "target": dst if direction == OPS_FOR_DST else src,
        "src": src,
        "dst": dst,
        "command": "diffstreamswithcrc" if result.crc else "diffstreams",
        "created": int(time.time() * 1000),
        "summary": result.summary(),
        "same": result.same,
        "stoppedEarly": result.stopped_early,
        "counts": {
            **{kind.value: result.count(kind) for kind in Kind},
            "compared": result.compared,
            "dstBehind": result.dst_behind,
            "srcBehind": result.src_behind,
            "expiredInSrc": result.expired_in_src,
            "expiredInDst": result.expired_in_dst,
            "lost": result.lost,
            "lostAcknowledged": result.lost_acknowledged,
        },
        "losses": [
            {
                "source": loss.source,
                "topic": loss.topic,
                "partition": loss.partition,
                "first": loss.first,
                "last": loss.last,
                "acknowledged": loss.acknowledged,
            }
            for loss in result.losses
        ],
        "point": [
            {
                "topic": p.topic,
                "partition": p.partition,
                "src": None if p.src is None else list(p.src),
                "dst": None if p.dst is None else list(p.dst),
                "dstApplied": p.dst_applied,
                "srcApplied": p.src_applied,
            }
            for p in result.points
        ],
        "files": files,
    }


def write_ops(admin: StreamAdmin, result: DiffResult, outdir: Path) -> None:
    """Write ``opsForDst`` and ``opsForSrc`` under ``outdir`` (checked by ``check_outdir``), each
    manifest last. On an error, what this call created is removed again."""
    created = not outdir.exists()
    for_dst, for_src = _ops(admin, result)
    try:
        outdir.mkdir(parents=True, exist_ok=True)
        for direction, lines in ((OPS_FOR_DST, for_dst), (OPS_FOR_SRC, for_src)):
            folder = outdir / direction
            folder.mkdir()
            files = {}
            for (topic, partition), ops in sorted(lines.items()):
                name = f"{topic}.{partition}.jsonl"
                with open(folder / name, "w", encoding="utf-8") as out:
                    for op in ops:
                        out.write(json.dumps(op, sort_keys=True) + "\n")
                files[name] = len(ops)
            with open(folder / MANIFEST, "w", encoding="utf-8") as out:
                json.dump(manifest(result, direction, files), out, indent=2, sort_keys=True)
                out.write("\n")
    except BaseException:
        if created:
            shutil.rmtree(outdir, ignore_errors=True)
        else:
            for direction in (OPS_FOR_DST, OPS_FOR_SRC):
                shutil.rmtree(outdir / direction, ignore_errors=True)
        raise


# Up to this many messages (both streams together) a comparison runs in this process. Measured on
# 2 cores with embedded stores (docs/performance.md, "diffstreams on Spark"): in process the full
# compare runs at 78-93k msg/s; Spark takes ~15 s to start, and its tasks then scan at ~50k msg/s
# a core before the driver compares (~250k msg/s). So it never pays off on local[2]; with 8
# executor cores its start is repaid from about 2M messages.
DIFF_IN_PROCESS_MAX = 2_000_000


def diff_engine(admin: StreamAdmin, source: str, destination: str) -> str:
    """What ``-engine auto`` runs a comparison on: ``local`` up to ``DIFF_IN_PROCESS_MAX`` messages
    held by both streams together, else ``spark``."""
    held = sum(side.held() for side in snapshot(admin, source, destination))
    return "local" if held <= DIFF_IN_PROCESS_MAX else "spark"


@dataclass(frozen=True)
class DiffRequest:
    """One diffstreams (diffstreamswithcrc with ``crc``) as a command asks for it: the streams, the
    directory for the ops (a new or empty one) and whether to stop at the first difference. The CLI,
    the Spark app and the operator build one; ``diff_to_ops`` runs it."""

    src: str
    dst: str
    outdir: str
    crc: bool = False
    first_exit: bool = False


def diff_to_ops(admin: StreamAdmin, request: DiffRequest, scanner: Scanner | None = None) -> DiffResult:
    """``request`` as a command runs it: its ``outdir`` checked first (``check_outdir``), the
    comparison (scanning with ``scanner``: default in this process), then ``write_ops``."""
    target = check_outdir(request.outdir)
    compare = diff_streams_crc if request.crc else diff_streams
    result = compare(admin, request.src, request.dst, first_exit=request.first_exit, scanner=scanner)
    write_ops(admin, result, target)
    return result


def read_manifest(folder: str | Path) -> dict[str, Any]:
    """The manifest of an ops directory, refused in one line if it is missing, unreadable, or of
    another format (for importstream)."""
    path = Path(folder) / MANIFEST
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidArgument(f"{folder} is not a complete ops directory: it has no {MANIFEST}") from None
    except (OSError, ValueError) as err:
        raise InvalidArgument(f"{path} cannot be read: {err}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else None
        raise InvalidArgument(f"{path} is not an ops manifest of format {FORMAT} (format {found!r})")
    return data
