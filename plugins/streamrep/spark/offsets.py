"""Spark offsets of the ``streamrep`` stream reader, and how a row budget is shared.

An offset maps each source partition, by ``offset_key``, to a source offset.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from streamrep.errors import InvalidArgument
from streamrep.replication.transfer import SourcePartition

Offsets = dict[str, int]  # a streaming read's offset as Spark keeps it: source offset by ``offset_key``


def offset_key(unit: SourcePartition) -> str:
    """The key of a source partition in a Spark offset: ``<source uuid>|<topic>|<partition>``."""
    return f"{unit.source_uuid}|{unit.topic}|{unit.partition}"


def spread(pending: Mapping[str, int], budget: int | None) -> dict[str, int]:
    """Share ``budget`` rows (None: no limit) among partitions with ``pending`` rows each,
    evenly, giving what a small partition does not need to the others."""
    if budget is None:
        return dict(pending)
    shares = {k: 0 for k in pending}
    waiting = sorted((n, k) for k, n in pending.items() if n > 0)
    left = max(0, budget)
    for i, (n, k) in enumerate(waiting):
        fair = left // (len(waiting) - i)
        if fair == 0 and left > 0:
            fair = 1
        shares[k] = min(n, fair)
        left -= shares[k]
    return shares


def limit_rows(limit: ReadLimit | None) -> int | None:
    """The row budget of a Spark ReadLimit; None for no limit."""
    if isinstance(limit, ReadMaxRows):
        return limit.max_rows
    if limit is None or isinstance(limit, ReadAllAvailable):
        return None
    raise InvalidArgument(f"the streamrep source supports no read limit {type(limit).__name__}")


def default_limit(options: Mapping[str, str]) -> ReadLimit:
    """The read limit of option ``maxRecordsPerTrigger`` (none: read all available)."""
    value = options.get("maxrecordspertrigger")
    if value is None:
        return ReadAllAvailable()
    try:
        rows = int(value)
    except ValueError:
        rows = 0
    if rows <= 0:
        raise InvalidArgument(f"maxRecordsPerTrigger must be a positive number, not {value!r}")
    return ReadMaxRows(rows)
