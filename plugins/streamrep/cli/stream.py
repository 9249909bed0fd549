"""``streamrep stream create|edit|info|delete|list``: streams and their settings."""

from __future__ import annotations

from typing import Any

from streamrep.cli import rows
from streamrep.cli.common import PATH, Context, Rows
from streamrep.cli.grammar import Command, Option
from streamrep.errors import InvalidArgument
from streamrep.model.naming import NAMING_HELP
from streamrep.model.stream import PERMISSIONS

STREAM_SETTINGS = (
    Option("defaultpartitions", int, help="partitions of a new topic"),
    Option("ttl", int, help="seconds a message is kept; 0 forever"),
    Option("autocreate", bool, help="create topics on first produce"),
    *(Option(perm, help="access control expression, e.g. 'u:alice | g:eng'") for perm in PERMISSIONS),
)


def stream_create(
    ctx: Context, path: str, copymetafrom: str | None = None, topicnaming: str | None = None, **settings: Any
) -> Rows:
    ctx.admin.create_stream(path, copymetafrom, topicnaming=topicnaming, **settings)
    return [rows.stream_info_row(ctx.admin.stream_info(path))]


def stream_edit(ctx: Context, path: str, **settings: Any) -> Rows:
    if not settings:
        raise InvalidArgument("stream edit needs at least one setting to change")
    ctx.admin.edit_stream(path, **settings)
    return [rows.stream_info_row(ctx.admin.stream_info(path))]


def stream_info(ctx: Context, path: str) -> Rows:
    return [rows.stream_info_row(ctx.admin.stream_info(path))]


def stream_delete(ctx: Context, path: str) -> Rows:
    ctx.admin.delete_stream(path)
    return []


def stream_list(ctx: Context, cluster: str | None = None) -> Rows:
    cluster = cluster or ctx.admin.clusters.default
    return [
        {"path": f"/mapr/{cluster}{e.path}", "uuid": e.uuid, "replicas": len(e.replicas), "upstreams": len(e.upstreams)}
        for e in ctx.admin.list_streams(cluster)
    ]


COMMANDS: tuple[Command, ...] = (
    Command(
        ("stream", "create"),
        stream_create,
        (
            PATH,
            Option("copymetafrom", help="copy the settings of this stream"),
            Option("topicnaming", help=f"Kafka clusters only: how topics are named there ({NAMING_HELP})"),
            *STREAM_SETTINGS,
        ),
        "create a stream",
    ),
    Command(("stream", "edit"), stream_edit, (PATH, *STREAM_SETTINGS), "change a stream's settings"),
    Command(("stream", "info"), stream_info, (PATH,), "show a stream"),
    Command(("stream", "delete"), stream_delete, (PATH,), "delete a stream and its messages"),
    Command(
        ("stream", "list"),
        stream_list,
        (Option("cluster", help="default: the default cluster"),),
        "list the streams of a cluster",
    ),
)
