"""A gateway on Spark: replicate this gateway's share of every source stream flowing into the
replicas on ``--cluster``.

    spark-submit spark_apps/gateway.py --cluster C [--id G] [--home H] [--once]
        [--interval SECONDS] [--max-records N] [--metrics-port P]

``--once`` replicates what is available now and exits; otherwise passes run (the next one at
once after a pass that moved messages, else after ``--interval`` seconds) until the cluster's gateways are asked to stop (``streamrep gateway stop``:
the pass in progress finishes, exit status 0) or the process is stopped (SIGTERM or SIGINT).
Started while its cluster's gateways are stopped, it exits at once with status 0 and one line.
The gateway's heartbeat is withdrawn on the way out. The work is ``streamrep.spark.jobs.gateway_job``.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from streamrep.model.replication import gateway_interval
from streamrep.spark.command import DEFAULT_INTERVAL
from streamrep.spark.jobs import fail, run, stop_on_signals

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamrep.client.admin import StreamAdmin


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", required=True, help="the destination cluster this gateway serves")
    parser.add_argument("--id", help="the gateway's name (default: the host name)")
    parser.add_argument("--home", help="STREAMREP_HOME (the cluster registry)")
    parser.add_argument("--once", action="store_true", help="replicate what is available now, then exit")
    parser.add_argument(
        "--interval", type=float, default=DEFAULT_INTERVAL, help="seconds an idle gateway waits between passes"
    )
    parser.add_argument("--max-records", type=int, help="source messages per pass at most")
    parser.add_argument("--metrics-port", type=int, help="serve Prometheus metrics from the driver on this port")
    args = parser.parse_args(argv)
    interval = gateway_interval(args.interval)
    stop_on_signals()

    def job(spark: SparkSession, admin: StreamAdmin) -> None:
        from streamrep.spark.jobs import gateway_job

        gateway_job(
            spark,
            admin,
            args.cluster,
            args.id,
            args.home,
            args.once,
            interval,
            args.max_records,
            metrics_port=args.metrics_port,
        )

    return run(f"gateway-{args.cluster}", args.home, job)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as err:  # noqa: BLE001 - one line, never a traceback for user error
        sys.exit(fail(err))
