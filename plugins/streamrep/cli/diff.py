"""``streamrep diffstreams`` and ``streamrep diffstreamswithcrc``: compare two streams, as MapR's
commands do, and write the ops directories a later ``importstream`` applies; in this process or,
as MapR's ``-mapreduce true``, as a Spark application (``spark_apps/diffstreams.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from streamrep.cli.common import SPARK_MASTER, Context, Rows, spark_master
from streamrep.cli.grammar import Command, Option
from streamrep.client import StreamAdmin
from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.replication.ops import DIFF_IN_PROCESS_MAX, DiffRequest, check_outdir, diff_engine, diff_to_ops

ENGINES = ("auto", "local", "spark")


class StreamsDiffer(StreamrepError):
    """The streams differ: exit 1 with the one-line summary (``differ: ...``), after the ops
    directories are written, as every exit 1 is one line on stderr."""


def run_diff(
    admin: StreamAdmin,
    request: DiffRequest,
    engine: str = "auto",
    numthreads: int | None = None,
    master: str | None = None,
) -> dict[str, Any]:
    """``request`` in this process, or as the Spark app through spark-submit (on ``master``);
    returns ``DiffResult.to_dict``."""
    # the directory is refused before any work (the job checks it again)
    request = replace(request, outdir=str(check_outdir(request.outdir)))
    if engine == "auto":
        engine = diff_engine(admin, request.src, request.dst)
    if engine == "local":
        return diff_to_ops(admin, request).to_dict(request.outdir)
    from streamrep.spark.submit import submit_diff  # Spark is only imported when used

    return submit_diff(
        request.src,
        request.dst,
        request.outdir,
        crc=request.crc,
        first_exit=request.first_exit,
        home=admin.clusters.home,
        numthreads=numthreads,
        master=master,
    )


def _handler(crc: bool) -> Callable[..., Rows | None]:
    """The handler of diffstreams (``crc`` False) or diffstreamswithcrc (True)."""

    def handler(
        ctx: Context,
        src: str,
        dst: str,
        outdir: str,
        first_exit: bool = False,
        engine: str = "auto",
        numthreads: int | None = None,
        master: str | None = None,
        as_json: bool = False,
    ) -> Rows | None:
        if numthreads is not None and numthreads < 1:
            raise InvalidArgument("option -numthreads must be 1 or more")
        spark_master(master)
        row = run_diff(ctx.admin, DiffRequest(src, dst, outdir, crc, first_exit), engine, numthreads, master)
        if not row["same"]:
            raise StreamsDiffer(row["summary"])
        if as_json:
            return [row]
        ctx.out.write(row["summary"] + "\n")
        return None

    return handler


diffstreams = _handler(crc=False)
diffstreamswithcrc = _handler(crc=True)


OPTIONS = (
    Option("src", required=True, help="source stream path"),
    Option("dst", required=True, help="destination stream path"),
    Option("outdir", required=True, help="a new or empty directory for opsForDst/ and opsForSrc/"),
    Option("first_exit", bool, help="stop at the first difference (default false)"),
    Option(
        "engine",
        help=f"auto: in this process up to {DIFF_IN_PROCESS_MAX} messages (both streams), else Spark",
        choices=ENGINES,
    ),
    Option("numthreads", int, help="Spark parallelism (a local master's threads)"),
    SPARK_MASTER,
)

COMMANDS: tuple[Command, ...] = (
    Command(
        ("diffstreams",),
        diffstreams,
        OPTIONS,
        "compare two streams message by message; exit 1 if they differ",
    ),
    Command(
        ("diffstreamswithcrc",),
        diffstreamswithcrc,
        OPTIONS,
        "compare two streams by CRCs of runs of messages, then the runs that differ",
    ),
)
