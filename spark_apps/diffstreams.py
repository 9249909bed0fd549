"""diffstreams and diffstreamswithcrc on Spark: compare two streams, write the ops directories.

    spark-submit spark_apps/diffstreams.py --src /mapr/a/s --dst /mapr/b/s --outdir O
        [--crc] [--first-exit] [--home H] [--numthreads N]

Writes ``O/opsForDst`` and ``O/opsForSrc`` and prints one JSON line on stdout
(``DiffResult.to_dict``: ``same``, the counts, ``summary``, as the CLI's ``-json`` row); exits 0
whether the streams are the same or differ (the caller decides). An error prints one line on
stderr and exits non-zero, as ``copystream.py``. The work is ``streamrep.spark.diff.diff_job``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from streamrep.spark.jobs import fail, run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamrep.client import StreamAdmin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="diffstreams", description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="the source stream path")
    parser.add_argument("--dst", required=True, help="the destination stream path")
    parser.add_argument("--outdir", required=True, help="a new or empty directory for opsForDst/ and opsForSrc/")
    parser.add_argument("--crc", action="store_true", help="diffstreamswithcrc: CRCs of runs first")
    parser.add_argument("--first-exit", action="store_true", help="stop at the first difference")
    parser.add_argument("--home", help="STREAMREP_HOME (the cluster registry)")
    parser.add_argument("--numthreads", type=int, help="scan threads (a local master's thread count)")
    args = parser.parse_args(argv)

    def job(spark: SparkSession, admin: StreamAdmin) -> None:
        from streamrep.replication.ops import DiffRequest
        from streamrep.spark.diff import diff_job

        request = DiffRequest(args.src, args.dst, args.outdir, args.crc, args.first_exit)
        result = diff_job(spark, admin, request, args.home)
        print(json.dumps(result.to_dict(args.outdir)), flush=True)

    return run("diffstreams", args.home, job)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as err:  # noqa: BLE001 - one line, never a traceback for user error
        sys.exit(fail(err))
