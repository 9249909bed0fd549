"""``streamrep produce`` and ``streamrep consume``: messages from stdin to a topic and back to stdout."""

from __future__ import annotations

import sys
from typing import Any

from streamrep.cli.common import Context, OutputFailed, Rows, reason
from streamrep.cli.grammar import Command, Option
from streamrep.cli.output import print_messages
from streamrep.client import Consumer, Producer
from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.model.paths import parse_topic_path

PRODUCE_FLUSH_LINES = 10_000
# Bounds of the waiting options: beyond them a typo would look like a hang.
MAX_CONSUME_TIMEOUT = 86_400.0


def produce(ctx: Context, path: str, keysep: str | None = None, partition: int | None = None) -> Rows:
    """One message per stdin line; with ``-keysep`` the text before the first separator is the key.

    Lines are committed every ``PRODUCE_FLUSH_LINES``; the report covers every commit."""
    if keysep == "":
        raise InvalidArgument("option -keysep must not be empty")
    producer = Producer(ctx.admin, batch_size=sys.maxsize)  # flushed here, so no ack goes unreported
    topic = parse_topic_path(path, ctx.admin.clusters.default)  # once, not once a line
    producer.partitions(topic)  # an unknown stream or a missing permission fails even with no input
    acked: dict[Any, dict[int, tuple[int, int, int]]] = {}  # topic -> partition -> (first, last, count)

    def flush() -> None:
        try:
            flushed = producer.flush()
        except StreamrepError as err:  # this commit failed; say what earlier commits wrote
            written = sum(n for parts in acked.values() for _, _, n in parts.values())
            done = f"the {written} lines before them were produced" if written else "nothing was produced"
            raise type(err)(f"{err}; {done}") from None
        for warning in producer.warnings:  # after a commit: the lines are produced, so not an error
            ctx.err.write(f"streamrep: warning: {warning}\n")
        producer.warnings.clear()
        for tp, parts in flushed.items():
            for p, (first, nxt) in parts.items():
                lo, hi, n = acked.setdefault(tp, {}).get(p, (first, nxt - 1, 0))
                acked[tp][p] = (min(lo, first), max(hi, nxt - 1), n + nxt - first)

    # Lines are bytes as they came, so input that is not UTF-8 is produced unchanged.
    source = getattr(ctx.stdin, "buffer", None) or ctx.stdin
    sep = None if keysep is None else keysep.encode("utf-8", "surrogateescape")
    count = 0

    def done() -> str:
        committed = count - count % PRODUCE_FLUSH_LINES
        return f"; the {committed} lines before it were produced" if committed else "; nothing was produced"

    lines = iter(source)
    while True:
        try:
            raw = next(lines)
        except StopIteration:
            break
        except OSError as error:
            raise InvalidArgument(f"cannot read stdin ({reason(error)}){done()}") from None
        line = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
        line = line.rstrip(b"\n").rstrip(b"\r")
        key = None
        if sep is not None:
            if sep not in line:
                shown = line[:60].decode("utf-8", "replace")
                raise InvalidArgument(f"line {count + 1} has no key separator {keysep!r}: {shown!r}{done()}")
            key, line = line.split(sep, 1)
        producer.send(topic, line, key=key, partition=partition)
        count += 1
        if count % PRODUCE_FLUSH_LINES == 0:
            flush()
    flush()
    if not acked:  # empty input: say so rather than print nothing
        return [{"topic": str(topic), "partition": None, "firstoffset": None, "lastoffset": None, "messages": 0}]
    return [
        {"topic": str(tp), "partition": p, "firstoffset": first, "lastoffset": last, "messages": n}
        for tp, parts in acked.items()
        for p, (first, last, n) in sorted(parts.items())
    ]


def consume(
    ctx: Context,
    path: str,
    group: str | None = None,
    fromstart: bool = False,
    max: int | None = None,
    timeout: float = 1.0,
    as_json: bool = False,
) -> None:
    """Print messages until ``-max`` have been read or none arrived for ``-timeout`` seconds."""
    if max is not None and max < 1:
        raise InvalidArgument("option -max must be 1 or more")
    consumer = Consumer(path, group=group, from_start=fromstart, admin=ctx.admin)
    seen = 0
    while max is None or seen < max:
        batch = consumer.poll(1000 if max is None else min(1000, max - seen), timeout=timeout)
        if not batch:
            break
        try:
            print_messages(batch, as_json, ctx.out)
        except BrokenPipeError:
            return None  # the reader went away (`| head`): a normal end; this batch stays uncommitted
        except OSError as error:
            kept = f"; this batch was not committed for group {group}" if group else ""
            raise OutputFailed(f"cannot write messages to stdout ({reason(error)}){kept}") from None
        seen += len(batch)
        if group:
            consumer.commit()
    return None


COMMANDS: tuple[Command, ...] = (
    Command(
        ("produce",),
        produce,
        (
            Option("path", required=True, help="<stream path>:<topic>"),
            Option("keysep", help="the text before the first separator is the key"),
            Option("partition", int, help="the partition (default: by key)"),
        ),
        "produce stdin lines to <stream>:<topic>",
    ),
    Command(
        ("consume",),
        consume,
        (
            Option("path", required=True, help="<stream path>:<topic>"),
            Option("group", help="consumer group"),
            Option("fromstart", bool, help="without a committed cursor, start at the oldest message"),
            Option("max", int, help="stop after this many messages"),
            Option(
                "timeout",
                float,
                help="stop when nothing arrived for this many seconds (1)",
                maximum=MAX_CONSUME_TIMEOUT,
            ),
        ),
        "print messages of <stream>:<topic>",
    ),
)
