"""``streamrep stream upstream ...``: the streams a replica accepts messages from."""

from __future__ import annotations

from streamrep.cli import rows
from streamrep.cli.common import PATH, Context, Rows
from streamrep.cli.grammar import Command, Option

UPSTREAM = Option("upstream", required=True, help="upstream (source) stream path")


def upstream_add(ctx: Context, path: str, upstream: str) -> Rows:
    ctx.admin.add_upstream(path, upstream)
    return []


def upstream_list(ctx: Context, path: str) -> Rows:
    return [rows.upstream_row(row) for row in ctx.admin.list_upstreams(path)]


def upstream_remove(ctx: Context, path: str, upstream: str) -> Rows:
    ctx.admin.remove_upstream(path, upstream)
    return []


COMMANDS: tuple[Command, ...] = (
    Command(("stream", "upstream", "add"), upstream_add, (PATH, UPSTREAM), "accept a stream as an upstream source"),
    Command(("stream", "upstream", "list"), upstream_list, (PATH,), "list a replica's upstreams"),
    Command(("stream", "upstream", "remove"), upstream_remove, (PATH, UPSTREAM), "withdraw an upstream"),
)
