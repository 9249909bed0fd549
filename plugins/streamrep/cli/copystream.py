"""``streamrep copystream``: copy a stream, in this process or as a Spark application."""

from __future__ import annotations

from streamrep.cli import rows
from streamrep.cli.common import SPARK_MASTER, Context, Rows, spark_master
from streamrep.cli.grammar import Command, Option
from streamrep.client import StreamAdmin
from streamrep.errors import InvalidArgument
from streamrep.replication.copy import CopySummary, copy_stream, plan_copy

ENGINES = ("auto", "local", "spark")
# Up to this many messages a copy runs in this process. Measured on 2 cores with embedded stores
# (docs/performance.md, "Benchmarks against the goals"): in-process copies 145k msg/s in flat memory; Spark takes ~15 s to
# start and then moves ~55k msg/s, as its tasks share one SQLite writer. Above this, or with
# -engine spark, the copy is spread over a Spark cluster's executors.
COPY_IN_PROCESS_MAX = 5_000_000
COPY_ENGINE = Option(
    "engine", help=f"auto: in this process up to {COPY_IN_PROCESS_MAX} messages, else Spark", choices=ENGINES
)


def run_copy(
    admin: StreamAdmin,
    src: str,
    dst: str,
    engine: str = "auto",
    numthreads: int | None = None,
    master: str | None = None,
) -> CopySummary:
    """copystream in this process, or as the Spark app through spark-submit (on ``master``)."""
    if engine == "auto":
        engine = "local" if plan_copy(admin, src, dst).total(admin) <= COPY_IN_PROCESS_MAX else "spark"
    if engine == "local":
        return copy_stream(admin, src, dst)
    from streamrep.spark.submit import submit_copystream  # Spark is only imported when used

    return submit_copystream(src, dst, home=admin.clusters.home, numthreads=numthreads, master=master)


def copystream(
    ctx: Context, src: str, dst: str, numthreads: int | None = None, engine: str = "auto", master: str | None = None
) -> Rows:
    if numthreads is not None and numthreads < 1:
        raise InvalidArgument("option -numthreads must be 1 or more")
    spark_master(master)
    return [rows.copy_row(run_copy(ctx.admin, src, dst, engine, numthreads, master))]


COMMANDS: tuple[Command, ...] = (
    Command(
        ("copystream",),
        copystream,
        (
            Option("src", required=True, help="source stream path"),
            Option("dst", required=True, help="destination stream path (created if missing)"),
            Option("numthreads", int, help="Spark parallelism"),
            COPY_ENGINE,
            SPARK_MASTER,
        ),
        "copy all messages of a stream into another stream",
    ),
)
