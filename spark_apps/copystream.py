"""copystream on Spark: copy everything a stream holds now into another stream.

    spark-submit spark_apps/copystream.py --src /mapr/a/s --dst /mapr/b/s [--home H] [--numthreads N]

Prints one JSON line (``CopySummary.to_dict``) on stdout. A user error prints one line on stderr
and exits 1. The work is ``streamrep.spark.jobs.copystream_job``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from streamrep.spark.jobs import fail, run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamrep.client.admin import StreamAdmin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="copystream", description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="the source stream path")
    parser.add_argument("--dst", required=True, help="the destination stream path (created if missing)")
    parser.add_argument("--home", help="STREAMREP_HOME (the cluster registry)")
    parser.add_argument("--numthreads", type=int, help="copy threads (a local master's thread count)")
    args = parser.parse_args(argv)

    def job(spark: SparkSession, admin: StreamAdmin) -> None:
        from streamrep.spark.jobs import copystream_job

        print(json.dumps(copystream_job(spark, admin, args.src, args.dst, args.home).to_dict()), flush=True)

    return run("copystream", args.home, job)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as err:  # noqa: BLE001 - one line, never a traceback for user error
        sys.exit(fail(err))
