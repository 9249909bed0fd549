"""The CRC variant (``diff_streams_crc``, ``diffstreamswithcrc``): it first sums CRC32s of **runs** of
identities (``scan.CRC_RUN`` consecutive origin offsets of one origin partition, so a run means the
same messages on both sides; each message's CRC input holds its place and its predecessor of the
same origin in its partition, ``identity.chained``, so an order difference changes a run's CRC too),
then runs the full compare only on the (partition, origin partition) groups that hold a run whose
CRCs differ: it finds exactly the differences the full compare finds
(``tests/unit/test_diffstreams.py`` checks every planted case).
"""

from __future__ import annotations

import struct
import zlib
from collections import defaultdict

from streamrep.client.admin import StreamAdmin
from streamrep.replication.diff.compare import compare_topic, finish, start, topics
from streamrep.replication.diff.result import DiffResult
from streamrep.replication.diff.scan import Run, Scanner, units

_PART_CRC = struct.Struct(">qI")


def diff_streams_crc(
    admin: StreamAdmin, source: str, destination: str, first_exit: bool = False, scanner: Scanner | None = None
) -> DiffResult:
    """``diffstreamswithcrc``: CRC32s of runs of identities first, then the full compare of the
    order groups that hold a run whose CRCs differ; scanning with ``scanner`` (default: a ``Reader``,
    in this process). The same differences as ``diff_streams``."""
    src, dst, result, scanner = start(admin, source, destination, True, scanner)
    sides = {"src": src, "dst": dst}
    for topic in topics(src, dst):
        # A run's CRC on a side: the CRCs of its parts in each partition, in partition order.
        crcs: dict[str, dict[Run, int]] = {"src": {}, "dst": {}}
        where: dict[Run, set[int]] = defaultdict(set)  # the partitions holding a run's messages, either side
        for (name, _, partition), part in scanner.crcs(sides, units(sides, topic)):
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
        compare_topic(result, scanner, src, dst, topic, keep=groups)
        if first_exit and result.differences:
            break
    return finish(result, scanner, first_exit)
