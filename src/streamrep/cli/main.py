"""The ``streamrep`` command line, in maprcli's grammar.

    streamrep stream replica add -path /mapr/sanfrancisco/activity -replica /mapr/newyork/activity -paused true

Every handler is a thin call into the client layer. Exit status: 0 success, 1 a user error
(one line on stderr), 2 a malformed command line, 3 a bug (``STREAMREP_DEBUG=1`` shows its
traceback). With ``-json`` an error is also maprcli's error envelope on stdout.
"""

from __future__ import annotations

import errno
import os
import sys
import time
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any, TextIO

from streamrep.cli.grammar import Command, Option, split_words, wants_help, wants_json
from streamrep.cli.output import print_error_json, print_messages, print_rows
from streamrep.client import Consumer, Producer, StreamAdmin
from streamrep.client.config import read_client_settings
from streamrep.errors import InvalidArgument, StreamrepError
from streamrep.model import network
from streamrep.model.naming import NAMING_HELP
from streamrep.model.paths import parse_topic_path
from streamrep.model.stream import PERMISSIONS
from streamrep.replication import failover as failovers
from streamrep.replication import service
from streamrep.replication.copy import copy_stream, plan_copy
from streamrep.replication.cursors import list_cursors, sync_cursors
from streamrep.replication.gateway import Gateway
from streamrep.replication.lag import lag_history, set_alert
from streamrep.replication.setup import autosetup
from streamrep.replication.status import acknowledge_loss, replica_status
from streamrep.replication.translate import translate_cursors

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
PRODUCE_FLUSH_LINES = 10_000
# Bounds of the waiting options: beyond them a typo would look like a hang.
MAX_CONSUME_TIMEOUT = 86_400.0
MAX_GATEWAY_INTERVAL = 3_600.0
MAX_STOP_TIMEOUT = 3_600.0
DEFAULT_STOP_TIMEOUT = 60.0

PATH = Option("path", required=True, help="stream path, /mapr/<cluster>/<stream>")
REPLICA = Option("replica", required=True, help="replica stream path")
SOURCE_CLUSTER = Option("cluster", help="the source cluster (default: the default cluster)")
CLUSTER_NAME = Option("name", required=True, help="the cluster's name")
DSTCLUSTER = Option("dstcluster", required=True, help="the destination cluster")
TOPIC = Option("topic", required=True, help="topic name")
UPSTREAM = Option("upstream", required=True, help="upstream (source) stream path")
SYNCHRONOUS = Option("synchronous", bool, help="producers wait for this replica")
# MapR's network options of a replica; their values are checked by the admin API (model/network.py).
NETWORK_OPTIONS = (
    Option("throttle", bool, help="throttle replication under load (recorded; no limit applied yet)"),
    Option("networkencryption", bool, help="replicate over TLS only: Kafka clusters must use SSL or SASL_SSL"),
    Option(
        "networkcompression",
        help=f"{'|'.join(network.NETWORK_COMPRESSIONS)} (lzf refused: Kafka has no "
        f"LZF codec); default {network.DEFAULT_NETWORK_COMPRESSION}",
    ),
)
STREAM_SETTINGS = (
    Option("defaultpartitions", int, help="partitions of a new topic"),
    Option("ttl", int, help="seconds a message is kept; 0 forever"),
    Option("autocreate", bool, help="create topics on first produce"),
    *(Option(perm, help="access control expression, e.g. 'u:alice | g:eng'") for perm in PERMISSIONS),
)


class OutputFailed(StreamrepError):
    """stdout could not be written (closed, a closed pipe, a full disk)."""


def reason(error: OSError) -> str:
    return error.strerror or str(error) or type(error).__name__


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
def cluster_add(
    ctx: Context, name: str, url: str | None = None, default: bool = False, configfile: str | None = None
) -> Rows:
    settings = read_client_settings(configfile) if configfile is not None else None
    info = ctx.admin.add_cluster(name, url, default, settings)
    return [{"name": info.name, "kind": info.kind, "url": info.url, "default": ctx.admin.clusters.default == name}]


def cluster_list(ctx: Context) -> Rows:
    default = ctx.admin.clusters.default
    return [
        {"name": c.name, "kind": c.kind, "url": c.url, "default": c.name == default} for c in ctx.admin.clusters.list()
    ]


def cluster_remove(ctx: Context, name: str) -> Rows:
    info = ctx.admin.clusters.remove(name)
    return [{"name": info.name, "removed": True, "url": info.url}]


def cluster_default(ctx: Context, name: str) -> Rows:
    ctx.admin.clusters.set_default(name)
    return [{"name": name, "default": True}]


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
def stream_create(
    ctx: Context, path: str, copymetafrom: str | None = None, topicnaming: str | None = None, **settings: Any
) -> Rows:
    ctx.admin.create_stream(path, copymetafrom, topicnaming=topicnaming, **settings)
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
    return [
        {"path": f"/mapr/{cluster}{e.path}", "uuid": e.uuid, "replicas": len(e.replicas), "upstreams": len(e.upstreams)}
        for e in ctx.admin.list_streams(cluster)
    ]


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


def replica_add(
    ctx: Context, path: str, replica: str, paused: bool = False, synchronous: bool = False, **network_options: Any
) -> Rows:
    ctx.admin.add_replica(path, replica, paused, synchronous, **network_options)
    return []


def replica_list(ctx: Context, path: str, refreshnow: bool = False) -> Rows:
    del refreshnow  # maprcli's option; every figure is computed when asked, so always fresh
    return replica_status(ctx.admin, path)


def replica_acknowledge(ctx: Context, path: str, replica: str) -> Rows:
    return [acknowledge_loss(ctx.admin, path, replica)]


def replica_autosetup(
    ctx: Context,
    path: str,
    replica: str,
    multimaster: bool = False,
    synchronous: bool = False,
    engine: str = "auto",
    master: str | None = None,
    **network_options: Any,
) -> Rows:
    spark_master(master)
    copier = lambda admin, src, dst: run_copy(admin, src, dst, engine, master=master)  # noqa: E731
    return [autosetup(ctx.admin, path, replica, multimaster, synchronous, copier, **network_options)]


def plan_rows(plan: dict[str, Any]) -> Rows:
    """A failover or failback plan as ``item``/``value`` rows: readable as a table, whole in -json."""
    rows = [{"item": key, "value": value} for key, value in plan.items() if key not in ("topics", "steps")]
    for topic in plan.get("topics") or []:
        rows.append(
            {
                "item": f"topic {topic['topic']}",
                "value": (
                    f"{topic['pendingMessages']} messages, {topic['bytesPending']} bytes, "
                    f"lag {topic['replicationLagMillis']} ms"
                ),
            }
        )
    rows += [{"item": f"step {n}", "value": step} for n, step in enumerate(plan["steps"], 1)]
    return rows


def synced(rows: list[dict[str, Any]]) -> int:
    return sum(1 for row in rows if row.get("action") == "synced")


def replica_failover(
    ctx: Context,
    path: str,
    replica: str,
    force: bool = False,
    plan: bool = False,
    timeout: float = failovers.DEFAULT_TIMEOUT,
) -> Rows:
    if plan:
        return plan_rows(failovers.failover_plan(ctx.admin, path, replica))
    done = failovers.failover(ctx.admin, path, replica, force=force, timeout=timeout)
    cursors = done.pop("cursors")
    return [{**done, "cursorsSynced": synced(cursors)}]


def replica_failback(
    ctx: Context,
    path: str,
    replica: str,
    plan: bool = False,
    phase: str = "all",
    timeout: float = failovers.DEFAULT_TIMEOUT,
) -> Rows:
    if plan:
        return plan_rows(failovers.failback_plan(ctx.admin, path, replica))
    done = failovers.failback(ctx.admin, path, replica, phase=phase, timeout=timeout)
    cursors = done.pop("cursors")
    return [{**done, "cursorsSynced": synced(cursors)}]


def replica_alert(
    ctx: Context, path: str, replica: str, maxlagms: int | None = None, maxlagmsgs: int | None = None
) -> Rows:
    return [set_alert(ctx.admin, path, replica, maxlagms, maxlagmsgs)]


def replica_lag(ctx: Context, path: str, replica: str) -> Rows:
    return [
        {
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s["t"] / 1000)),
            "lagMessages": s["messages"],
            "lagBytes": s["bytes"],
            "lagMillis": s["ms"],
        }
        for s in lag_history(ctx.admin, path, replica)
    ]


def cursor_translate(ctx: Context, path: str, replica: str, group: str, commit: bool = False) -> Rows:
    return translate_cursors(ctx.admin, path, replica, group, commit)


def cursor_list(ctx: Context, path: str, group: str | None = None) -> Rows:
    return list_cursors(ctx.admin, path, group)


def cursor_sync(ctx: Context, path: str, replica: str, takeover: bool = False) -> Rows:
    return sync_cursors(ctx.admin, path, replica, takeover)


# -- replication jobs ----------------------------------------------------------------
ENGINES = ("auto", "local", "spark")
# Up to this many messages a copy runs in this process. Measured on 2 cores with embedded stores
# (docs/performance.md, "Benchmarks against the goals"): in-process copies 145k msg/s in flat memory; Spark takes ~15 s to
# start and then moves ~55k msg/s, as its tasks share one SQLite writer. Above this, or with
# -engine spark, the copy is spread over a Spark cluster's executors.
COPY_IN_PROCESS_MAX = 5_000_000
COPY_ENGINE = Option(
    "engine", help=f"auto: in this process up to {COPY_IN_PROCESS_MAX} messages, else Spark", choices=ENGINES
)
SPARK_MASTER = Option(
    "master",
    help="where Spark runs, as spark-submit's --master: local[N], spark://HOST:PORT, "
    "yarn, k8s://... (default: $STREAMREP_SPARK_MASTER, else local[2])",
)


def spark_master(master: str | None) -> None:
    """A bad -master fails before any work, even when the engine turns out not to be Spark."""
    if master is not None:
        from streamrep.spark.submit import check_master  # Spark is only imported when used

        check_master(master)


def run_copy(
    admin: StreamAdmin,
    src: str,
    dst: str,
    engine: str = "auto",
    numthreads: int | None = None,
    master: str | None = None,
) -> dict:
    """copystream in this process, or as the Spark app through spark-submit (on ``master``)."""
    if engine == "auto":
        engine = "local" if plan_copy(admin, src, dst).total(admin) <= COPY_IN_PROCESS_MAX else "spark"
    if engine == "local":
        return copy_stream(admin, src, dst)
    from streamrep.spark.submit import run_copystream  # Spark is only imported when used

    return run_copystream(src, dst, home=admin.clusters.home, numthreads=numthreads, master=master)


def copystream(
    ctx: Context, src: str, dst: str, numthreads: int | None = None, engine: str = "auto", master: str | None = None
) -> Rows:
    if numthreads is not None and numthreads < 1:
        raise InvalidArgument("option -numthreads must be 1 or more")
    spark_master(master)
    result = run_copy(ctx.admin, src, dst, engine, numthreads, master)
    return [{"source": result["source"], "destination": result["destination"], "messages": result["messages"]}]


def gateway_run(
    ctx: Context,
    cluster: str,
    id: str | None = None,
    once: bool = False,
    engine: str = "spark",
    interval: float = 0.5,
    master: str | None = None,
    metricsport: int | None = None,
) -> Rows:
    """Run a gateway of ``cluster`` until stopped, or with ``-once`` until all is replicated."""
    spark_master(master)
    if engine == "spark":
        from streamrep.spark.submit import run_gateway

        run_gateway(
            cluster,
            gateway_id=id,
            once=once,
            home=ctx.admin.clusters.home,
            interval=interval,
            master=master,
            metrics_port=metricsport,
        )
        return []
    ctx.admin.clusters.get(cluster)
    gateway = Gateway(ctx.admin, cluster, id)
    if metricsport is not None:
        gateway.lag.export(gateway.id, metricsport)
    if once:
        moved = 0
        while True:
            n = gateway.run_once(whole=True)
            moved += n
            if n == 0:
                break
        gateway.stop()
        for source_cluster in sorted(gateway.unlisted_by):  # not an error, but nothing came from there
            ctx.err.write(
                f"streamrep: cluster {source_cluster} sends to {cluster} only through its listed gateways "
                f"(cluster gateway list -cluster {source_cluster}), not {gateway.id}: nothing from it "
                "was replicated\n"
            )
        return [{"cluster": cluster, "gateway": gateway.id, "messages": moved}]
    line = gateway.run(interval=interval)
    if line:  # stopped by 'gateway stop', or not started: a requested state, so exit status 0
        ctx.err.write(f"streamrep: {line}\n")
    return []


# -- gateways as a service ---------------------------------------------------------------
def _when(at: float | None) -> str | None:
    return None if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def gateway_start(ctx: Context, cluster: str) -> Rows:
    """Record that ``cluster``'s gateways should run, and say who starts them."""
    row = service.request(ctx.admin, cluster, service.RUNNING)
    if row["live"]:
        then = f"already running: {', '.join(row['live'])}"
    else:
        then = (
            f"the stream_gateway_service DAG starts them within a minute (if it is unpaused), "
            f"or run 'streamrep gateway run -cluster {cluster}'"
        )
    return [{"cluster": cluster, "desired": row["desired"], "by": row["by"], "at": _when(row["at"]), "next": then}]


def gateway_stop(ctx: Context, cluster: str, wait: bool = False, timeout: float = DEFAULT_STOP_TIMEOUT) -> Rows:
    """Ask ``cluster``'s gateways to stop after their current batch; with ``-wait``, until none is live."""
    row = service.request(ctx.admin, cluster, service.STOPPED)
    live = service.wait_stopped(ctx.admin, cluster, timeout) if wait else row["live"]
    if wait and live:
        raise StreamrepError(
            f"gateways of cluster {cluster} still live after {timeout:g} s: {', '.join(live)}; "
            "they stop after their current batch (the stop stays requested)"
        )
    then = "stopped" if not live else f"{', '.join(live)} stop after their current batch (-wait true waits for them)"
    return [{"cluster": cluster, "desired": row["desired"], "by": row["by"], "at": _when(row["at"]), "next": then}]


def gateway_service_list(ctx: Context, cluster: str) -> Rows:
    return service.gateways(ctx.admin, cluster)


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
        ("cluster", "add"),
        cluster_add,
        (
            CLUSTER_NAME,
            Option(
                "url",
                help="embedded:<file> (a relative file is taken from the current directory) "
                "or kafka://host:port[,host:port...]",
            ),
            Option("default", bool, help="make it the default cluster"),
            Option(
                "configfile",
                help="a Kafka cluster's client settings (key=value lines: security.protocol, "
                "sasl.*, ssl.*, ...), passed to the Kafka client unchanged",
            ),
        ),
        "register a cluster (no -url: an embedded cluster)",
    ),
    Command(("cluster", "list"), cluster_list, (), "list registered clusters"),
    Command(("cluster", "remove"), cluster_remove, (CLUSTER_NAME,), "forget a cluster (its data file is kept)"),
    Command(
        ("cluster", "default"),
        cluster_default,
        (CLUSTER_NAME,),
        "make a registered cluster the default (for paths without /mapr/<cluster>)",
    ),
    Command(
        ("cluster", "ace", "get"),
        cluster_ace_get,
        (Option("cluster", help="the cluster (default: the default cluster)"),),
        "show who administers a cluster",
    ),
    Command(
        ("cluster", "ace", "set"),
        cluster_ace_set,
        (
            Option("adminperm", required=True, help='an ACE, e.g. "u:alice | g:ops"'),
            Option("cluster", help="the cluster (default: the default cluster)"),
        ),
        "change who administers a cluster (needs its adminperm)",
    ),
    Command(
        ("cluster", "gateway", "set"),
        gateway_set,
        (DSTCLUSTER, Option("gateways", required=True, help="gateway ids, separated by spaces"), SOURCE_CLUSTER),
        "list the gateways of a destination cluster",
    ),
    Command(("cluster", "gateway", "list"), gateway_list, (SOURCE_CLUSTER,), "gateways of every destination cluster"),
    Command(
        ("cluster", "gateway", "get"), gateway_get, (DSTCLUSTER, SOURCE_CLUSTER), "gateways of one destination cluster"
    ),
    Command(
        ("cluster", "gateway", "delete"),
        gateway_delete,
        (DSTCLUSTER, SOURCE_CLUSTER),
        "forget the gateways of a destination cluster",
    ),
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
    Command(
        ("stream", "replica", "add"),
        replica_add,
        (
            PATH,
            REPLICA,
            Option("paused", bool, help="register without starting replication"),
            SYNCHRONOUS,
            *NETWORK_OPTIONS,
        ),
        "register a replica of a stream",
    ),
    Command(
        ("stream", "replica", "list"),
        replica_list,
        (PATH, Option("refreshnow", bool, help="accepted for maprcli compatibility: figures are always live")),
        "list a stream's replicas",
    ),
    Command(
        ("stream", "replica", "acknowledge"),
        replica_acknowledge,
        (PATH, REPLICA),
        "accept that messages lost to the source's retention are gone",
    ),
    Command(("stream", "replica", "pause"), replica_pause, (PATH, REPLICA), "pause replication to a replica"),
    Command(("stream", "replica", "resume"), replica_resume, (PATH, REPLICA), "resume replication to a replica"),
    Command(("stream", "replica", "remove"), replica_remove, (PATH, REPLICA), "stop replicating to a replica"),
    Command(
        ("stream", "replica", "failover"),
        replica_failover,
        (
            PATH,
            REPLICA,
            Option("force", bool, help="promote even if the source is unreachable or has not drained"),
            Option("plan", bool, help="print what would happen (lag, pending, groups) and change nothing"),
            Option(
                "timeout",
                float,
                help=f"seconds to wait for the replica to catch up ({failovers.DEFAULT_TIMEOUT:g})",
                maximum=86_400,
            ),
        ),
        "promote a replica: stop replication into it, place the cursors, move producers to it",
    ),
    Command(
        ("stream", "replica", "failback"),
        replica_failback,
        (
            PATH,
            REPLICA,
            Option("plan", bool, help="print what would happen and change nothing"),
            Option(
                "phase", help="all (default), reverse (copy back only), return (switch back)", choices=failovers.PHASES
            ),
            Option(
                "timeout",
                float,
                help=f"seconds each wait lasts at most ({failovers.DEFAULT_TIMEOUT:g})",
                maximum=86_400,
            ),
        ),
        "give a failed-over source its role back, copying back only what it lacks",
    ),
    Command(
        ("stream", "replica", "autosetup"),
        replica_autosetup,
        (
            PATH,
            REPLICA,
            Option("multimaster", bool, help="also replicate back from the replica"),
            SYNCHRONOUS,
            *NETWORK_OPTIONS,
            COPY_ENGINE,
            SPARK_MASTER,
        ),
        "create, register, copy and start a replica in one step",
    ),
    Command(
        ("stream", "replica", "alert"),
        replica_alert,
        (
            PATH,
            REPLICA,
            Option(
                "maxlagms",
                int,
                help="alert when the oldest unreplicated message waited longer (ms; 0 removes the threshold)",
            ),
            Option("maxlagmsgs", int, help="alert when the replica lacks more messages (0 removes the threshold)"),
        ),
        "set a replica's lag alert thresholds (checked by the stream_replica_monitor DAG)",
    ),
    Command(
        ("stream", "replica", "lag"),
        replica_lag,
        (PATH, REPLICA),
        "a replica's recorded lag over time (sampled by the gateways)",
    ),
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
    Command(
        ("gateway", "run"),
        gateway_run,
        (
            Option("cluster", required=True, help="the destination cluster"),
            Option("id", help="gateway id"),
            Option("once", bool, help="stop once everything is replicated"),
            Option("engine", help="spark (default) or local (in this process)", choices=("spark", "local")),
            Option("interval", float, help="seconds between polls (local engine)", maximum=MAX_GATEWAY_INTERVAL),
            SPARK_MASTER,
            Option("metricsport", int, help="serve Prometheus metrics on this port (/metrics)", maximum=65535),
        ),
        "run a gateway of a destination cluster",
    ),
    Command(
        ("gateway", "start"),
        gateway_start,
        (Option("cluster", required=True, help="the destination cluster"),),
        "let a cluster's gateways run (the supervisor DAG starts and restarts them)",
    ),
    Command(
        ("gateway", "stop"),
        gateway_stop,
        (
            Option("cluster", required=True, help="the destination cluster"),
            Option("wait", bool, help="wait until no gateway of the cluster is live"),
            Option(
                "timeout",
                float,
                help=f"seconds -wait waits at most ({DEFAULT_STOP_TIMEOUT:g})",
                maximum=MAX_STOP_TIMEOUT,
            ),
        ),
        "stop a cluster's gateways cleanly, after their current batch",
    ),
    Command(
        ("gateway", "list"),
        gateway_service_list,
        (Option("cluster", required=True, help="the destination cluster"),),
        "a cluster's gateways: status, where they run, the partitions each holds",
    ),
    Command(("stream", "upstream", "add"), upstream_add, (PATH, UPSTREAM), "accept a stream as an upstream source"),
    Command(("stream", "upstream", "list"), upstream_list, (PATH,), "list a replica's upstreams"),
    Command(("stream", "upstream", "remove"), upstream_remove, (PATH, UPSTREAM), "withdraw an upstream"),
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


def help_text(prefix: tuple[str, ...] = ()) -> str:
    """One command's full usage, or the list of commands under ``prefix``."""
    for cmd in COMMANDS:
        if cmd.words == prefix:
            return cmd.help_text()
    listed = [cmd for cmd in COMMANDS if cmd.words[: len(prefix)] == prefix]
    if not listed:
        raise InvalidArgument(f"unknown command '{' '.join(prefix)}'; run 'streamrep help' for the list")
    lines = [
        "usage: streamrep <command> [-option value ...] [-json]",
        "       streamrep help <command>, or <command> -help: a command's options",
        "",
        "commands:",
    ]
    lines += [f"  {' '.join(cmd.words):24} {cmd.help}" for cmd in listed]
    return "\n".join(lines)


def find_command(words: list[str]) -> Command:
    for cmd in COMMANDS:
        if list(cmd.words) == words:
            return cmd
    if any(cmd.words[: len(words)] == tuple(words) for cmd in COMMANDS) and words:
        subs = sorted(
            {
                cmd.words[len(words)]
                for cmd in COMMANDS
                if cmd.words[: len(words)] == tuple(words) and len(cmd.words) > len(words)
            }
        )
        raise InvalidArgument(f"'{' '.join(words)}' needs a subcommand: {', '.join(subs)}")
    raise InvalidArgument(f"unknown command '{' '.join(words)}'; run 'streamrep help' for the list")


def streamrep_version() -> str:
    try:
        return package_version("streamrep")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def succeeded(rows: Rows) -> str:
    """What a command whose result could not be printed did anyway."""
    messages = sum(row.get("messages") or 0 for row in rows)
    return (
        f"the command succeeded: {messages} messages are committed, do not repeat it"
        if messages
        else "the command itself succeeded"
    )


def one_line(message: str) -> str:
    """``message`` with control characters escaped: a value holding a newline stays on the line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)


def write_out(out: TextIO, text: str) -> int:
    """Print ``text`` (help, version); OutputFailed if stdout cannot take it."""
    try:
        out.write(text + "\n")
        out.flush()
    except OSError as error:
        raise OutputFailed(f"cannot write to stdout ({reason(error)})") from None
    return 0


def run(argv: list[str], out: TextIO | None = None, err: TextIO | None = None, stdin: TextIO | None = None) -> int:
    """Run one command; returns the exit status. Every error a user can cause is one line on
    ``err`` (and with ``-json`` an error envelope on ``out``)."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    stdin = stdin if stdin is not None else sys.stdin
    words, options = split_words(argv)
    as_json = wants_json(options)

    def fail(message: str, status: int) -> int:
        message = one_line(message)
        if as_json:
            try:
                print_error_json(message, out)
                out.flush()
            except (OSError, ValueError):
                pass  # stdout is gone: the line on stderr still says it
        try:
            err.write(f"streamrep: error: {message}\n")
            err.flush()
        except (OSError, ValueError):
            pass
        return status

    ctx = Context(out, err, stdin)
    try:
        try:
            if argv[:1] and argv[0].lower() in ("--version", "-version", "version"):
                return write_out(out, f"streamrep {streamrep_version()}")
            if not words or words[0].lower() in ("help", "-help", "--help", "-h"):
                return write_out(out, help_text(tuple(words[1:])))
            if wants_help(options):
                return write_out(out, help_text(tuple(words)))
            cmd = find_command(words)
            values, as_json = cmd.parse(options)
        except InvalidArgument as usage_error:
            return fail(str(usage_error), EXIT_USAGE)
        if cmd.handler is consume:
            values["as_json"] = as_json
        rows = cmd.handler(ctx, **values)
        if rows is not None:
            try:
                print_rows(rows, as_json, out)
                out.flush()
            except (OSError, ValueError) as error:
                why = reason(error) if isinstance(error, OSError) else "stdout is closed"
                raise OutputFailed(f"cannot write the result to stdout ({why}); {succeeded(rows)}") from None
        return 0
    except StreamrepError as error:
        return fail(str(error), EXIT_USER_ERROR)
    except OSError as error:  # the environment (a file, a pipe, a disk), not the input
        where = f": {error.filename}" if error.filename else ""
        return fail(f"{reason(error)}{where}", EXIT_USER_ERROR)
    except KeyboardInterrupt:
        return 130
    finally:
        if ctx._admin is not None:
            ctx._admin.clusters.close()


class ClosedStream:
    """Stands in for a standard stream the process was started without (``>&-``, ``<&-``)."""

    def __init__(self, name: str):
        self.name = name

    def _closed(self, *_args: Any) -> Any:
        raise OSError(errno.EBADF, f"{self.name} is closed")

    write = flush = read = readline = __next__ = _closed

    def __iter__(self) -> ClosedStream:
        return self


def main() -> None:
    out = sys.stdout or ClosedStream("stdout")
    err = sys.stderr or open(os.devnull, "w")
    stdin = sys.stdin or ClosedStream("stdin")
    try:
        status = run(sys.argv[1:], out, err, stdin)
    except Exception as error:  # a bug, not a user error: one line unless debugging
        if os.environ.get("STREAMREP_DEBUG"):
            raise
        err.write(f"streamrep: internal error: {type(error).__name__}: {error} (set STREAMREP_DEBUG=1 for details)\n")
        status = EXIT_INTERNAL
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            # What could not be written was reported; the interpreter's own flush at exit
            # would only add a traceback.
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
    sys.exit(status)
