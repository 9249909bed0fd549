"""``streamrep diffstreams`` and ``streamrep diffstreamswithcrc``: compare two streams, as MapR's
commands do, and write the ops directories a later ``importstream`` applies."""

from __future__ import annotations

from collections.abc import Callable

from streamrep.cli import rows
from streamrep.cli.common import Context, Rows
from streamrep.cli.grammar import Command, Option
from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.replication.diff import diff_streams, diff_streams_crc
from streamrep.replication.ops import check_outdir, write_ops

ENGINES = ("auto", "local", "spark")


class StreamsDiffer(StreamrepError):
    """The streams differ: exit 1 with the one-line summary (``differ: ...``), after the ops
    directories are written, as every exit 1 is one line on stderr."""


def _compare(
    ctx: Context, crc: bool, src: str, dst: str, outdir: str, first_exit: bool, engine: str, as_json: bool
) -> Rows | None:
    if engine != "local":
        raise InvalidArgument(
            f"-engine {engine} is not available for {'diffstreamswithcrc' if crc else 'diffstreams'} yet "
            "(it comes with the Spark step of issue 32); use -engine local"
        )
    target = check_outdir(outdir)
    compare = diff_streams_crc if crc else diff_streams
    result = compare(ctx.admin, src, dst, first_exit=first_exit)
    write_ops(ctx.admin, result, target)
    if not result.same:
        raise StreamsDiffer(result.summary())
    if as_json:
        return [rows.diff_row(result, str(target))]
    ctx.out.write(result.summary() + "\n")
    return None


def _handler(crc: bool) -> Callable[..., Rows | None]:
    """The handler of diffstreams (``crc`` False) or diffstreamswithcrc (True)."""

    def handler(
        ctx: Context,
        src: str,
        dst: str,
        outdir: str,
        first_exit: bool = False,
        engine: str = "local",
        as_json: bool = False,
    ) -> Rows | None:
        return _compare(ctx, crc, src, dst, outdir, first_exit, engine, as_json)

    return handler


diffstreams = _handler(crc=False)
diffstreamswithcrc = _handler(crc=True)


OPTIONS = (
    Option("src", required=True, help="source stream path"),
    Option("dst", required=True, help="destination stream path"),
    Option("outdir", required=True, help="a new or empty directory for opsForDst/ and opsForSrc/"),
    Option("first_exit", bool, help="stop at the first difference (default false)"),
    Option("engine", help="local: in this process (spark and auto come later)", choices=ENGINES),
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
