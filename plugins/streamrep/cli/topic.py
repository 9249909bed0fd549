"""``streamrep stream topic ...``: the topics of a stream."""

from __future__ import annotations

from streamrep.cli import rows
from streamrep.cli.common import PATH, Context, Rows
from streamrep.cli.grammar import Command, Option

TOPIC = Option("topic", required=True, help="topic name")


def topic_create(ctx: Context, path: str, topic: str, partitions: int | None = None) -> Rows:
    return [rows.topic_change_row(ctx.admin.create_topic(path, topic, partitions))]


def topic_edit(ctx: Context, path: str, topic: str, partitions: int) -> Rows:
    return [rows.topic_change_row(ctx.admin.edit_topic(path, topic, partitions))]


def topic_list(ctx: Context, path: str) -> Rows:
    return [rows.topic_row(topic) for topic in ctx.admin.list_topics(path)]


def topic_info(ctx: Context, path: str, topic: str) -> Rows:
    return [rows.partition_row(info) for info in ctx.admin.topic_info(path, topic)]


def topic_delete(ctx: Context, path: str, topic: str) -> Rows:
    ctx.admin.delete_topic(path, topic)
    return []


COMMANDS: tuple[Command, ...] = (
    Command(
        ("stream", "topic", "create"),
        topic_create,
        (PATH, TOPIC, Option("partitions", int, help="partitions (default: the stream's defaultpartitions)")),
        "create a topic",
    ),
    Command(
        ("stream", "topic", "edit"),
        topic_edit,
        (PATH, TOPIC, Option("partitions", int, required=True, help="the new, larger partition count")),
        "add partitions",
    ),
    Command(("stream", "topic", "list"), topic_list, (PATH,), "list topics"),
    Command(("stream", "topic", "info"), topic_info, (PATH, TOPIC), "show a topic's partitions"),
    Command(("stream", "topic", "delete"), topic_delete, (PATH, TOPIC), "delete a topic"),
)
