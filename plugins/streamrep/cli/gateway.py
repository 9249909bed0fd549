"""``streamrep gateway ...``: run a destination cluster's gateway, and start, stop and list them as a service."""

from __future__ import annotations

import dataclasses
import faulthandler
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from streamrep.cli import rows
from streamrep.cli.common import SPARK_MASTER, Context, Rows, spark_master
from streamrep.cli.grammar import Command, Option
from streamrep.errors import StreamrepError
from streamrep.model.gateways import DesiredState
from streamrep.model.replication import MAX_GATEWAY_INTERVAL
from streamrep.replication import service
from streamrep.replication.gateway import Gateway

MAX_STOP_TIMEOUT = 3_600.0
DEFAULT_STOP_TIMEOUT = 60.0


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
        from streamrep.spark.submit import submit_gateway

        submit_gateway(
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
        try:
            moved = gateway.drain()
            gateway.lag.sample(final=True)  # the history ends with what the drain left
        finally:
            gateway.stop()
        for source_cluster in sorted(gateway.unlisted_by):  # not an error, but nothing came from there
            ctx.err.write(
                f"streamrep: cluster {source_cluster} sends to {cluster} only through its listed gateways "
                f"(cluster gateway list -cluster {source_cluster}), not {gateway.id}: nothing from it "
                "was replicated\n"
            )
        return [{"cluster": cluster, "gateway": gateway.id, "messages": moved}]
    with stop_on_signals(gateway):
        ended = gateway.run(interval=interval)
    if ended:  # stopped by a signal or 'gateway stop', or not started: a requested state, so exit status 0
        ctx.err.write(f"streamrep: {ended}\n")
    return []


@contextmanager
def stop_on_signals(gateway: Gateway) -> Iterator[None]:
    """SIGTERM and SIGINT (Ctrl-C) end the gateway after its batch in progress: it withdraws its
    heartbeat at once and the command exits 0, saying so. SIGUSR1 prints every thread's stack, and
    so does a crash of native code (SIGSEGV and the like), before the process dies of it."""

    def stop(signum: int, _frame: Any) -> None:
        gateway.request_stop(f"stopped by {signal.Signals(signum).name}; its heartbeat is withdrawn")

    saved = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where every thread is, to stderr
    crashes_reported = faulthandler.is_enabled()
    faulthandler.enable(all_threads=True)
    try:
        yield
    finally:
        if not crashes_reported:
            faulthandler.disable()
        faulthandler.unregister(signal.SIGUSR1)
        for sig, handler in saved.items():
            signal.signal(sig, handler)


# -- gateways as a service ---------------------------------------------------------------
def _when(at: float | None) -> str | None:
    return None if at is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def gateway_start(ctx: Context, cluster: str) -> Rows:
    """Record that ``cluster``'s gateways should run, and say who starts them."""
    req = service.request(ctx.admin, cluster, DesiredState.RUNNING)
    then = service.next_step(req, "the stream_gateway_service DAG starts them within a minute (if it is unpaused)")
    return [rows.service_row(req, _when(req.at), then)]


def gateway_stop(ctx: Context, cluster: str, wait: bool = False, timeout: float = DEFAULT_STOP_TIMEOUT) -> Rows:
    """Ask ``cluster``'s gateways to stop after their current batch; with ``-wait``, until none is live."""
    req = service.request(ctx.admin, cluster, DesiredState.STOPPED)
    live = service.wait_stopped(ctx.admin, cluster, timeout) if wait else list(req.live)
    if wait and live:
        raise StreamrepError(
            f"gateways of cluster {cluster} still live after {timeout:g} s: {', '.join(live)}; "
            "they stop after their current batch (the stop stays requested)"
        )
    then = service.next_step(dataclasses.replace(req, live=tuple(live)), "")
    if live:
        then += " (-wait true waits for them)"
    return [rows.service_row(req, _when(req.at), then)]


def gateway_service_list(ctx: Context, cluster: str) -> Rows:
    return [rows.gateway_row(row) for row in service.gateways(ctx.admin, cluster)]


COMMANDS: tuple[Command, ...] = (
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
)
