"""``streamrep stream cursor ...``: consumer groups' committed cursors, and carrying them to a replica."""

from __future__ import annotations

from streamrep.cli import rows
from streamrep.cli.common import PATH, REPLICA, Context, Rows
from streamrep.cli.grammar import Command, Option
from streamrep.replication.cursors import list_cursors, sync_cursors
from streamrep.replication.translate import translate_cursors


def cursor_translate(ctx: Context, path: str, replica: str, group: str, commit: bool = False) -> Rows:
    return [rows.translated_cursor_row(row) for row in translate_cursors(ctx.admin, path, replica, group, commit)]


def cursor_list(ctx: Context, path: str, group: str | None = None) -> Rows:
    return [rows.cursor_row(row) for row in list_cursors(ctx.admin, path, group)]


def cursor_sync(ctx: Context, path: str, replica: str, takeover: bool = False) -> Rows:
    return [rows.cursor_sync_row(row) for row in sync_cursors(ctx.admin, path, replica, takeover)]


COMMANDS: tuple[Command, ...] = (
    Command(
        ("stream", "cursor", "translate"),
        cursor_translate,
        (
            PATH,
            REPLICA,
            Option("group", required=True, help="consumer group"),
            Option("commit", bool, help="also set the translated cursors on the replica"),
        ),
        "translate a consumer group's cursors from a stream to its replica",
    ),
    Command(
        ("stream", "cursor", "list"),
        cursor_list,
        (PATH, Option("group", help="only this consumer group")),
        "list the committed cursors of every consumer group on a stream",
    ),
    Command(
        ("stream", "cursor", "sync"),
        cursor_sync,
        (
            PATH,
            REPLICA,
            Option("takeover", bool, help="adopt the replica's cursors first (failback: its consumers are stopped)"),
        ),
        "carry every consumer group's committed cursors to a replica (as gateways do)",
    ),
)
