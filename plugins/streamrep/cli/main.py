"""The ``streamrep`` command line, in maprcli's grammar.

    streamrep stream replica add -path /mapr/sanfrancisco/activity -replica /mapr/newyork/activity -paused true

Every handler is a thin call into the client layer. A user error prints one line on stderr
and exits 1 (2 for a malformed command line); ``STREAMREP_DEBUG=1`` shows tracebacks.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.client import Consumer, Producer, StreamAdmin
from streamrep.cli.grammar import Command, Option, split_words
from streamrep.cli.output import print_messages, print_rows
from streamrep.model.paths import parse_topic_path
from streamrep.model.stream import PERMISSIONS
from streamrep.replication.copy import copy_stream, plan_copy
from streamrep.replication.gateway import Gateway
from streamrep.replication.setup import autosetup
from streamrep.replication.status import replica_status
from streamrep.replication.translate import translate_cursors

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
PRODUCE_FLUSH_LINES = 10_000

PATH = Option("path", required=True, help="stream path, /mapr/<cluster>/<stream>")
REPLICA = Option("replica", required=True, help="replica stream path")
SOURCE_CLUSTER = Option("cluster", help="the source cluster (default: the default cluster)")
STREAM_SETTINGS = (
    Option("defaultpartitions", int), Option("ttl", int), Option("autocreate", bool),
    *(Option(perm) for perm in PERMISSIONS),
)


class Context:
    """What a handler gets: the admin API and the output streams."""

    def __init__(self, out: TextIO, err: TextIO, stdin: TextIO):
        self.out, self.err, self.stdin = out, err, stdin
        self._admin: StreamAdmin | None = None

    @property
    def admin(self) -> StreamAdmin:
        if self._admin is None:
            self._admin = StreamAdmin()
        return self._admin


Rows = list[dict[str, Any]]


# -- cluster -------------------------------------------------------------------------
def cluster_add(ctx: Context, name: str, url: str | None = None, default: bool = False) -> Rows:
    info = ctx.admin.add_cluster(name, url, default)
    return [{"name": info.name, "kind": info.kind, "url": info.url, "default": ctx.admin.clusters.default == name}]


def cluster_list(ctx: Context) -> Rows:
    default = ctx.admin.clusters.default
    return [{"name": c.name, "kind": c.kind, "url": c.url, "default": c.name == default}
            for c in ctx.admin.clusters.list()]


def cluster_remove(ctx: Context, name: str) -> Rows:
    info = ctx.admin.clusters.remove(name)
    return [{"name": info.name, "removed": True, "url": info.url}]


def cluster_ace_get(ctx: Context, cluster: str | None = None) -> Rows:
    return [ctx.admin.get_cluster_ace(cluster)]


def cluster_ace_set(ctx: Context, adminperm: str, cluster: str | None = None) -> Rows:
    return [ctx.admin.set_cluster_ace(adminperm, cluster)]


def gateway_set(ctx: Context, dstcluster: str, gateways: str, cluster: str | None = None) -> Rows:
    names = ctx.admin.set_gateways(dstcluster, gateways, cluster)
    return [{"dstcluster": dstcluster, "gateways": names}]


def gateway_list(ctx: Context, cluster: str | None = None) -> Rows:
    return [{"dstcluster": dst, "gateways": names} for dst, names in ctx.admin.gateways(cluster).items()]


def gateway_get(ctx: Context, dstcluster: str, cluster: str | None = None) -> Rows:
    return [{"dstcluster": dstcluster, "gateways": ctx.admin.get_gateways(dstcluster, cluster)}]


def gateway_delete(ctx: Context, dstcluster: str, cluster: str | None = None) -> Rows:
    ctx.admin.delete_gateways(dstcluster, cluster)
    return []


# -- stream --------------------------------------------------------------------------
def stream_create(ctx: Context, path: str, copymetafrom: str | None = None, **settings: Any) -> Rows:
    ctx.admin.create_stream(path, copymetafrom, **settings)
    return [ctx.admin.stream_info(path)]


def stream_edit(ctx: Context, path: str, **settings: Any) -> Rows:
    if not settings:
        raise InvalidArgument("stream edit needs at least one setting to change")
    ctx.admin.edit_stream(path, **settings)
    return [ctx.admin.stream_info(path)]


def stream_info(ctx: Context, path: str) -> Rows:
    return [ctx.admin.stream_info(path)]


def stream_delete(ctx: Context, path: str) -> Rows:
    ctx.admin.delete_stream(path)
    return []


def stream_list(ctx: Context, cluster: str | None = None) -> Rows:
    cluster = cluster or ctx.admin.clusters.default
    return [{"path": f"/mapr/{cluster}{e.path}", "uuid": e.uuid, "replicas": len(e.replicas),
             "upstreams": len(e.upstreams)} for e in ctx.admin.list_streams(cluster)]


def topic_create(ctx: Context, path: str, topic: str, partitions: int | None = None) -> Rows:
    return [ctx.admin.create_topic(path, topic, partitions)]


def topic_edit(ctx: Context, path: str, topic: str, partitions: int) -> Rows:
    return [ctx.admin.edit_topic(path, topic, partitions)]


def topic_list(ctx: Context, path: str) -> Rows:
    return ctx.admin.list_topics(path)


def topic_info(ctx: Context, path: str, topic: str) -> Rows:
    return ctx.admin.topic_info(path, topic)


def topic_delete(ctx: Context, path: str, topic: str) -> Rows:
    ctx.admin.delete_topic(path, topic)
    return []


def replica_add(ctx: Context, path: str, replica: str, paused: bool = False, synchronous: bool = False) -> Rows:
    ctx.admin.add_replica(path, replica, paused, synchronous)
    return []


def replica_list(ctx: Context, path: str) -> Rows:
    return replica_status(ctx.admin, path)


def replica_autosetup(ctx: Context, path: str, replica: str, multimaster: bool = False,
                      synchronous: bool = False, engine: str = "auto") -> Rows:
    copier = lambda admin, src, dst: run_copy(admin, src, dst, engine)  # noqa: E731
    return [autosetup(ctx.admin, path, replica, multimaster, synchronous, copier)]


def cursor_translate(ctx: Context, path: str, replica: str, group: str, commit: bool = False) -> Rows:
    return translate_cursors(ctx.admin, path, replica, group, commit)


# -- replication jobs ----------------------------------------------------------------
ENGINES = ("auto", "local", "spark")
# Below this many messages a copy runs in this process: starting Spark costs ~20 s.
COPY_IN_PROCESS_MAX = 100_000


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise InvalidArgument(f"option -engine takes {', '.join(ENGINES)}, not {engine!r}")
    return engine


def run_copy(admin: StreamAdmin, src: str, dst: str, engine: str = "auto", numthreads: int | None = None) -> dict:
    """copystream in this process, or as the Spark app through spark-submit."""
    check_engine(engine)
    if engine == "auto":
        engine = "local" if plan_copy(admin, src, dst).total(admin) <= COPY_IN_PROCESS_MAX else "spark"
    if engine == "local":
        return copy_stream(admin, src, dst)
    from streamrep.spark.submit import run_copystream  # Spark is only imported when used

    return run_copystream(src, dst, home=admin.clusters.home, numthreads=numthreads)


def copystream(ctx: Context, src: str, dst: str, numthreads: int | None = None, engine: str = "auto") -> Rows:
    if numthreads is not None and numthreads < 1:
        raise InvalidArgument("option -numthreads must be 1 or more")
    result = run_copy(ctx.admin, src, dst, engine, numthreads)
    return [{"source": result["source"], "destination": result["destination"], "messages": result["messages"]}]


def gateway_run(ctx: Context, cluster: str, id: str | None = None, once: bool = False,
                engine: str = "spark", interval: float = 0.5) -> Rows:
    """Run a gateway of ``cluster`` until stopped, or with ``-once`` until all is replicated."""
    if check_engine(engine) == "spark":
        from streamrep.spark.submit import run_gateway

        run_gateway(cluster, gateway_id=id, once=once, home=ctx.admin.clusters.home, interval=interval)
        return []
    ctx.admin.clusters.get(cluster)
    gateway = Gateway(ctx.admin, cluster, id)
    if once:
        moved = 0
        while True:
            n = gateway.run_once(whole=True)
            moved += n
            if n == 0:
                break
        gateway.stop()
        return [{"cluster": cluster, "gateway": gateway.id, "messages": moved}]
    gateway.run(interval=interval)
    return []


def replica_pause(ctx: Context, path: str, replica: str) -> Rows:
    ctx.admin.pause_replica(path, replica)
    return []


def replica_resume(ctx: Context, path: str, replica: str) -> Rows:
    ctx.admin.resume_replica(path, replica)
    return []


def replica_remove(ctx: Context, path: str, replica: str) -> Rows:
    ctx.admin.remove_replica(path, replica)
    return []


def upstream_add(ctx: Context, path: str, upstream: str) -> Rows:
    ctx.admin.add_upstream(path, upstream)
    return []


def upstream_list(ctx: Context, path: str) -> Rows:
    return ctx.admin.list_upstreams(path)


def upstream_remove(ctx: Context, path: str, upstream: str) -> Rows:
    ctx.admin.remove_upstream(path, upstream)
    return []


# -- data ----------------------------------------------------------------------------
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
        for tp, parts in producer.flush().items():
            for p, (first, nxt) in parts.items():
                lo, hi, n = acked.setdefault(tp, {}).get(p, (first, nxt - 1, 0))
                acked[tp][p] = (min(lo, first), max(hi, nxt - 1), n + nxt - first)

    # Lines are bytes as they came, so input that is not UTF-8 is produced unchanged.
    source = getattr(ctx.stdin, "buffer", None) or ctx.stdin
    sep = None if keysep is None else keysep.encode("utf-8", "surrogateescape")
    count = 0
    for raw in source:
        line = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
        line = line.rstrip(b"\n").rstrip(b"\r")
        key = None
        if sep is not None:
            if sep not in line:
                committed = count - count % PRODUCE_FLUSH_LINES
                done = f"; the {committed} lines before it were produced" if committed else "; nothing was produced"
                shown = line[:60].decode("utf-8", "replace")
                raise InvalidArgument(f"line {count + 1} has no key separator {keysep!r}: {shown!r}{done}")
            key, line = line.split(sep, 1)
        producer.send(topic, line, key=key, partition=partition)
        count += 1
        if count % PRODUCE_FLUSH_LINES == 0:
            flush()
    flush()
    return [{"topic": str(tp), "partition": p, "firstoffset": first, "lastoffset": last, "messages": n}
            for tp, parts in acked.items() for p, (first, last, n) in sorted(parts.items())]


def consume(ctx: Context, path: str, group: str | None = None, fromstart: bool = False,
            max: int | None = None, timeout: float = 1.0, as_json: bool = False) -> None:
    """Print messages until ``-max`` have been read or none arrived for ``-timeout`` seconds."""
    if max is not None and max < 1:
        raise InvalidArgument("option -max must be 1 or more")
    consumer = Consumer(path, group=group, from_start=fromstart, admin=ctx.admin)
    seen = 0
    while max is None or seen < max:
        batch = consumer.poll(1000 if max is None else min(1000, max - seen), timeout=timeout)
        if not batch:
            break
        print_messages(batch, as_json, ctx.out)
        seen += len(batch)
        if group:
            consumer.commit()
    return None


COMMANDS: tuple[Command, ...] = (
    Command(("cluster", "add"), cluster_add, (Option("name", required=True), Option("url"), Option("default", bool)),
            "register a cluster (no -url: an embedded cluster)"),
    Command(("cluster", "list"), cluster_list, (), "list registered clusters"),
    Command(("cluster", "remove"), cluster_remove, (Option("name", required=True),),
            "forget a cluster (its data file is kept)"),
    Command(("cluster", "ace", "get"), cluster_ace_get, (Option("cluster", help="the cluster (default: the default cluster)"),),
            "show who administers a cluster"),
    Command(("cluster", "ace", "set"), cluster_ace_set,
            (Option("adminperm", required=True, help="an ACE, e.g. \"u:alice | g:ops\""),
             Option("cluster", help="the cluster (default: the default cluster)")),
            "change who administers a cluster (needs its adminperm)"),
    Command(("cluster", "gateway", "set"), gateway_set,
            (Option("dstcluster", required=True), Option("gateways", required=True), SOURCE_CLUSTER),
            "list the gateways of a destination cluster"),
    Command(("cluster", "gateway", "list"), gateway_list, (SOURCE_CLUSTER,), "gateways of every destination cluster"),
    Command(("cluster", "gateway", "get"), gateway_get, (Option("dstcluster", required=True), SOURCE_CLUSTER),
            "gateways of one destination cluster"),
    Command(("cluster", "gateway", "delete"), gateway_delete, (Option("dstcluster", required=True), SOURCE_CLUSTER),
            "forget the gateways of a destination cluster"),
    Command(("stream", "create"), stream_create, (PATH, Option("copymetafrom"), *STREAM_SETTINGS), "create a stream"),
    Command(("stream", "edit"), stream_edit, (PATH, *STREAM_SETTINGS), "change a stream's settings"),
    Command(("stream", "info"), stream_info, (PATH,), "show a stream"),
    Command(("stream", "delete"), stream_delete, (PATH,), "delete a stream and its messages"),
    Command(("stream", "list"), stream_list, (Option("cluster"),), "list the streams of a cluster"),
    Command(("stream", "topic", "create"), topic_create, (PATH, Option("topic", required=True), Option("partitions", int)),
            "create a topic"),
    Command(("stream", "topic", "edit"), topic_edit,
            (PATH, Option("topic", required=True), Option("partitions", int, required=True)), "add partitions"),
    Command(("stream", "topic", "list"), topic_list, (PATH,), "list topics"),
    Command(("stream", "topic", "info"), topic_info, (PATH, Option("topic", required=True)), "show a topic's partitions"),
    Command(("stream", "topic", "delete"), topic_delete, (PATH, Option("topic", required=True)), "delete a topic"),
    Command(("stream", "replica", "add"), replica_add,
            (PATH, REPLICA, Option("paused", bool), Option("synchronous", bool)), "register a replica of a stream"),
    Command(("stream", "replica", "list"), replica_list, (PATH,), "list a stream's replicas"),
    Command(("stream", "replica", "pause"), replica_pause, (PATH, REPLICA), "pause replication to a replica"),
    Command(("stream", "replica", "resume"), replica_resume, (PATH, REPLICA), "resume replication to a replica"),
    Command(("stream", "replica", "remove"), replica_remove, (PATH, REPLICA), "stop replicating to a replica"),
    Command(("stream", "replica", "autosetup"), replica_autosetup,
            (PATH, REPLICA, Option("multimaster", bool), Option("synchronous", bool), Option("engine")),
            "create, register, copy and start a replica in one step"),
    Command(("stream", "cursor", "translate"), cursor_translate,
            (PATH, REPLICA, Option("group", required=True), Option("commit", bool)),
            "translate a consumer group's cursors from a stream to its replica"),
    Command(("copystream",), copystream,
            (Option("src", required=True), Option("dst", required=True), Option("numthreads", int), Option("engine")),
            "copy all messages of a stream into another stream"),
    Command(("gateway", "run"), gateway_run,
            (Option("cluster", required=True), Option("id"), Option("once", bool), Option("engine"),
             Option("interval", float)),
            "run a gateway of a destination cluster"),
    Command(("stream", "upstream", "add"), upstream_add, (PATH, Option("upstream", required=True)),
            "accept a stream as an upstream source"),
    Command(("stream", "upstream", "list"), upstream_list, (PATH,), "list a replica's upstreams"),
    Command(("stream", "upstream", "remove"), upstream_remove, (PATH, Option("upstream", required=True)),
            "withdraw an upstream"),
    Command(("produce",), produce, (PATH, Option("keysep"), Option("partition", int)),
            "produce stdin lines to <stream>:<topic>"),
    Command(("consume",), consume,
            (PATH, Option("group"), Option("fromstart", bool), Option("max", int), Option("timeout", float)),
            "print messages of <stream>:<topic>"),
)


def help_text(prefix: tuple[str, ...] = ()) -> str:
    lines = ["usage: streamrep <command> [-option value ...] [-json]", "", "commands:"]
    for cmd in COMMANDS:
        if cmd.words[: len(prefix)] == prefix:
            lines.append(f"  {' '.join(cmd.words):24} {cmd.help}")
    return "\n".join(lines)


def find_command(words: list[str]) -> Command:
    for cmd in COMMANDS:
        if list(cmd.words) == words:
            return cmd
    if any(cmd.words[: len(words)] == tuple(words) for cmd in COMMANDS) and words:
        subs = sorted({cmd.words[len(words)] for cmd in COMMANDS if cmd.words[: len(words)] == tuple(words)
                       and len(cmd.words) > len(words)})
        raise InvalidArgument(f"'{' '.join(words)}' needs a subcommand: {', '.join(subs)}")
    raise InvalidArgument(f"unknown command '{' '.join(words)}'; run 'streamrep help' for the list")


def run(argv: list[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr, stdin: TextIO = sys.stdin) -> int:
    """Run one command; returns the exit status."""
    words, options = split_words(argv)
    if not words or words[0] in ("help", "-help", "--help", "-h"):
        out.write(help_text(tuple(words[1:])) + "\n")
        return 0
    ctx = Context(out, err, stdin)
    try:
        try:
            cmd = find_command(words)
            values, as_json = cmd.parse(options)
        except InvalidArgument as usage_error:
            err.write(f"streamrep: error: {usage_error}\n")
            return EXIT_USAGE
        if cmd.handler is consume:
            values["as_json"] = as_json
        rows = cmd.handler(ctx, **values)
        if rows is not None:
            print_rows(rows, as_json, out)
        return 0
    except StreamrepError as error:
        err.write(f"streamrep: error: {error}\n")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:
        if ctx._admin is not None:
            ctx._admin.clusters.close()


def main() -> None:
    try:
        status = run(sys.argv[1:])
    except Exception as error:  # a bug, not a user error: one line unless debugging
        if os.environ.get("STREAMREP_DEBUG"):
            raise
        sys.stderr.write(f"streamrep: internal error: {type(error).__name__}: {error} (set STREAMREP_DEBUG=1 for details)\n")
        status = 3
    sys.exit(status)
