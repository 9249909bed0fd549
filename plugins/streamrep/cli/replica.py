"""``streamrep stream replica ...``: replicas of a stream, their state, failover and failback."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from streamrep.cli import rows
from streamrep.cli.common import PATH, REPLICA, SPARK_MASTER, Context, Rows, spark_master
from streamrep.cli.copystream import COPY_ENGINE, run_copy
from streamrep.cli.grammar import Command, Option
from streamrep.model import network
from streamrep.replication import failover as failovers
from streamrep.replication.failover import FailbackPhase, FailbackPlan, FailoverPlan
from streamrep.replication.lag import lag_history, set_alert
from streamrep.replication.setup import autosetup
from streamrep.replication.status import acknowledge_loss, replica_status

SYNCHRONOUS = Option("synchronous", bool, help="producers wait for this replica")
# MapR's network options of a replica, and streamrep's byte-rate limit; their values are checked by
# the admin API (model/network.py).
NETWORK_OPTIONS = (
    Option("throttle", bool, help="back off while the replica's cluster is under load"),
    Option("networkencryption", bool, help="replicate over TLS only: Kafka clusters must use SSL or SASL_SSL"),
    Option(
        "networkcompression",
        help=f"{'|'.join(network.NETWORK_COMPRESSIONS)} (lzf refused: Kafka has no "
        f"LZF codec); default {network.DEFAULT_NETWORK_COMPRESSION}",
    ),
    Option(
        "maxbytespersec",
        help="at most this many bytes a second into the replica, over all its gateways "
        "(K, M, G: decimal units, 10M); default 0, no limit",
    ),
)


def replica_add(
    ctx: Context, path: str, replica: str, paused: bool = False, synchronous: bool = False, **network_options: Any
) -> Rows:
    ctx.admin.add_replica(path, replica, paused, synchronous, **network_options)
    return []


def replica_edit(
    ctx: Context,
    path: str,
    replica: str,
    newreplica: str | None = None,
    synchronous: bool | None = None,
    **network_options: Any,
) -> Rows:
    ctx.admin.edit_replica(path, replica, newreplica, synchronous, **network_options)
    return []


def replica_list(ctx: Context, path: str, refreshnow: bool = False) -> Rows:
    del refreshnow  # maprcli's option; every figure is computed when asked, so always fresh
    return [rows.replica_status_row(status) for status in replica_status(ctx.admin, path)]


def replica_acknowledge(ctx: Context, path: str, replica: str) -> Rows:
    return [rows.acknowledged_row(acknowledge_loss(ctx.admin, path, replica))]


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
    return [
        rows.autosetup_row(autosetup(ctx.admin, path, replica, multimaster, synchronous, copier, **network_options))
    ]


def plan_rows(plan: FailoverPlan | FailbackPlan) -> Rows:
    """A failover or failback plan as ``item``/``value`` rows: readable as a table, whole in -json."""
    fields = rows.plan_fields(plan)
    items = [{"item": key, "value": value} for key, value in fields.items() if key not in ("topics", "steps")]
    for topic in plan.topics or []:
        items.append(
            {
                "item": f"topic {topic.topic}",
                "value": f"{topic.pending_messages} messages, {topic.bytes_pending} bytes, lag {topic.lag_millis} ms",
            }
        )
    items += [{"item": f"step {n}", "value": step} for n, step in enumerate(plan.steps, 1)]
    return items


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM as Ctrl-C while the block runs: a failover or failback stopped either way lets
    producers write again where they wrote before it."""

    def interrupt(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread can take signals
        return
    saved = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, saved)


def replica_failover(
    ctx: Context,
    path: str,
    replica: str,
    force: bool = False,
    plan: bool = False,
    timeout: float = failovers.DEFAULT_TIMEOUT,
    abort: bool = False,
) -> Rows:
    if plan:
        return plan_rows(failovers.failover_plan(ctx.admin, path, replica))
    with sigterm_interrupts():
        done = failovers.failover(ctx.admin, path, replica, force=force, timeout=timeout, abort=abort)
    return [rows.failover_row(done)]


def replica_failback(
    ctx: Context,
    path: str,
    replica: str,
    plan: bool = False,
    phase: str = FailbackPhase.ALL.value,
    timeout: float = failovers.DEFAULT_TIMEOUT,
) -> Rows:
    if plan:
        return plan_rows(failovers.failback_plan(ctx.admin, path, replica))
    with sigterm_interrupts():
        done = failovers.failback(ctx.admin, path, replica, phase=phase, timeout=timeout)
    return [rows.failback_row(done)]


def replica_alert(
    ctx: Context, path: str, replica: str, maxlagms: int | None = None, maxlagmsgs: int | None = None
) -> Rows:
    return [rows.alert_row(set_alert(ctx.admin, path, replica, maxlagms, maxlagmsgs))]


def replica_lag(ctx: Context, path: str, replica: str) -> Rows:
    return [rows.lag_row(sample) for sample in lag_history(ctx.admin, path, replica)]


def replica_pause(ctx: Context, path: str, replica: str) -> Rows:
    ctx.admin.pause_replica(path, replica)
    return []


def replica_resume(ctx: Context, path: str, replica: str) -> Rows:
    ctx.admin.resume_replica(path, replica)
    return []


def replica_remove(ctx: Context, path: str, replica: str) -> Rows:
    ctx.admin.remove_replica(path, replica)
    return []


COMMANDS: tuple[Command, ...] = (
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
        ("stream", "replica", "edit"),
        replica_edit,
        (
            PATH,
            REPLICA,
            Option("newreplica", help="the replica's new path after a rename or move (the same stream: its UUID)"),
            SYNCHRONOUS,
            *NETWORK_OPTIONS,
        ),
        "change a replica's options in place (only those given)",
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
            Option("abort", bool, help="undo a failover that stopped before promoting: lift the source's fence"),
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
                "phase",
                help="all (default), reverse (copy back only), return (switch back)",
                choices=tuple(p.value for p in FailbackPhase),
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
)
