"""``streamrep importstream -src <ops dir> -dst <stream>``: apply an ops directory that diffstreams
wrote, exactly once, as MapR's ``mapr importstream`` does (``replication/importstream.py``).

Exit 0 when it applied what it could, also when ``differs`` lines were left for a person: those
are no failure of the import (a log cannot change a message in place), and the one summary line
says ``NOT APPLIED: N differences left for a person`` so that nobody misses them."""

from __future__ import annotations

from streamrep.cli.common import Context, Rows
from streamrep.cli.grammar import Command, Option
from streamrep.replication.importstream import import_stream


def importstream(ctx: Context, src: str, dst: str, as_json: bool = False) -> Rows | None:
    summary = import_stream(ctx.admin, src, dst)
    if as_json:
        return [summary.to_dict()]
    ctx.out.write(summary.summary() + "\n")
    return None


COMMANDS: tuple[Command, ...] = (
    Command(
        ("importstream",),
        importstream,
        (
            Option("src", required=True, help="an opsForDst or opsForSrc directory that diffstreams wrote"),
            Option("dst", required=True, help="the stream it was made for"),
        ),
        "apply an ops directory of diffstreams to a stream, exactly once",
    ),
)
