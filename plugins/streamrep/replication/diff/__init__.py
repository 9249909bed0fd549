"""diffstreams and diffstreamswithcrc: compare two streams' content, MapR's way, by identity.

A replica's offsets are its own, and multi-master replicas interleave two origins, so messages
are matched by **identity**: (topic, origin stream UUID, origin partition, origin offset), from
the header ``streamrep.origin`` a replicated message carries, else the stream's own UUID,
partition and offset (a message produced there). For each identity both streams hold, the key,
value, headers (but the origin header), timestamp and partition must be equal; and the messages
of one origin partition must come in the same relative order in each partition of both streams.
A message one side lacks is a difference unless it is in flight or expired at the consistent point.
docs/user-guide.md ("Comparing and repairing streams") states it for users.

Reads go through the ``Store`` interface only, so both backends (and a mix of them) compare alike.
The modules, in the order a comparison runs:

- ``identity``: what a message is matched by (``Origin``) and compared by (``canonical``);
- ``snapshot``: the consistent point, each stream as a ``Side``, and the rights (``check_diff``);
- ``scan``: the expensive step, a ``Scanner`` (``Reader`` here, ``streamrep.spark.diff.SparkScanner``
  in Spark tasks) reducing each message to a digest or into its run's CRC;
- ``compare``: the full compare (``diff_streams``), one topic at a time;
- ``crc``: the CRC variant (``diff_streams_crc``), the full compare only where runs' CRCs differ;
- ``result``: what was found (``DiffResult``, its summary line and the rule of exit 1).

The names below are the package's public ones: the CLI, Spark, Airflow and importstream import
them from here.
"""

from __future__ import annotations

from streamrep.replication.diff.compare import diff_streams
from streamrep.replication.diff.crc import diff_streams_crc
from streamrep.replication.diff.identity import DIGEST_SIZE, Origin, Place, canonical, content_headers, origin_of
from streamrep.replication.diff.result import Difference, DiffResult, Kind, Loss, PartitionPoint
from streamrep.replication.diff.scan import (
    Group,
    PartitionCrcs,
    Reader,
    Scanned,
    Scanner,
    Unit,
    fetch,
    scan_crcs,
    scan_digests,
)
from streamrep.replication.diff.snapshot import Side, check_diff, snapshot

__all__ = [
    "DIGEST_SIZE",
    "DiffResult",
    "Difference",
    "Group",
    "Kind",
    "Loss",
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
