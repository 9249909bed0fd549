"""The ``streamrep`` writer: ``df.write`` / ``df.writeStream`` with ``format("streamrep")`` into one
stream (``copyto``), and what a write task reports to the driver (``ApplyCommit``, also the
result of the gateway's and copystream's tasks, ``tasks.py``).

Each run of rows of one source partition is applied in one destination transaction
(``transfer.apply_batch``), with the source position stored with the messages: rows already
applied are skipped, and rows that would leave a gap in the source offsets are refused.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from streamrep.replication.copy import check_copy
from streamrep.replication.lag import flow_key
from streamrep.replication.transfer import SourcePartition, apply_batch, ensure_topics
from streamrep.spark.rows import batch_runs
from streamrep.spark.runtime import admin_for
from streamrep.store.base import Store

log = logging.getLogger(__name__)


@dataclass
class ApplyCommit(WriterCommitMessage):
    """What one write task applied: rows seen, and messages written and errors by flow (the
    source and the stream written into, ``lag.flow_key``)."""

    rows: int = 0
    written: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    key: str | None = None  # the source partition's offset key, when one task applied one
    worker: str | None = None  # the Python worker that applied it (``worker_id``), in a gateway pass


def totals(messages: Iterable[WriterCommitMessage | None]) -> ApplyCommit:
    """The sum of the write tasks' commits (a task that wrote nothing may send None)."""
    total = ApplyCommit()
    for m in messages:
        if not isinstance(m, ApplyCommit):
            continue
        total.rows += m.rows
        for k, n in m.written.items():
            total.written[k] = total.written.get(k, 0) + n
        total.errors.update(m.errors)
    return total


def source_start(source_store: Store, unit: SourcePartition) -> int:
    """The oldest offset the source holds, read when rows are applied, after their read (as
    ``reads.read_source``): what retention removed before the read is recorded as lost."""
    return source_store.offsets(unit.source_uuid, unit.topic, unit.partition)[0]


def write_copy(home: str | None, destination: str, batches: Iterator[pa.RecordBatch]) -> ApplyCommit:
    """Apply rows into one destination stream; raises on the first error (a batch job fails)."""
    admin = admin_for(home)
    dst = admin.path(destination)
    dst_entry = admin.entry(dst)
    dest_store = admin.store(dst)
    commit = ApplyCommit()
    prepared: set[SourcePartition] = set()
    for batch in batches:
        for unit, messages in batch_runs(batch):
            source_store = admin.store(unit.source)
            if unit not in prepared:
                check_copy(admin, unit.source, dst)  # the rights every copy needs, per source
                ensure_topics(source_store, unit.source_uuid, dest_store, dst_entry.uuid, only=[unit.topic])
                prepared.add(unit)
            written = apply_batch(dest_store, dst_entry.uuid, unit, messages, source_start(source_store, unit))
            commit.rows += len(messages)
            key = flow_key(unit.source_uuid, dst_entry.uuid)
            commit.written[key] = commit.written.get(key, 0) + written
    return commit


def _report(path: str | None, total: ApplyCommit) -> None:
    if not path:
        return
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"rows": total.rows, "written": sum(total.written.values()), "errors": total.errors}, f)
    os.replace(tmp, path)


class _CopyTasks:
    """What the batch and the streaming writer's tasks share: apply their rows into ``destination``
    (``write_copy``). Option ``report``: a file where commit() leaves the totals as JSON
    (``{"rows", "written", "errors"}``)."""

    def __init__(self, home: str | None, destination: str, report: str | None):
        self.home = home
        self.destination = destination
        self.report = report

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ApplyCommit:
        return write_copy(self.home, self.destination, iterator)


class CopyWriter(_CopyTasks, DataSourceArrowWriter):
    """Batch write into the stream ``copyto``."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = totals(messages)
        log.info("copied %d rows into %s: %d written", total.rows, self.destination, sum(total.written.values()))
        _report(self.report, total)


class CopyStreamWriter(_CopyTasks, DataSourceStreamArrowWriter):
    """Streaming write into the stream ``copyto``."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _report(self.report, totals(messages))
