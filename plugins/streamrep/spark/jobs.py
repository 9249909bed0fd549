"""The two Spark jobs, as functions over a SparkSession: copystream (one batch job) and the
gateway (passes planned by the driver, one Spark job each). ``spark_apps/*.py`` parse
arguments and call these; tests call them on a shared session. What their tasks run is in
``streamrep.spark.tasks``; every rule stays in ``streamrep.replication``.
"""

from __future__ import annotations

import faulthandler
import functools
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from streamrep.client.admin import StreamAdmin
from streamrep.errors import StreamrepError, Unavailable
from streamrep.model.gateways import StopCause
from streamrep.replication.assignment import HEARTBEAT_INTERVAL_SECONDS
from streamrep.replication.copy import CopySummary, copying, plan_copy, summary
from streamrep.replication.flows import Flow
from streamrep.replication.gateway import Gateway, Outage
from streamrep.replication.gateway_passes import Progress
from streamrep.replication.lag import LagSampler
from streamrep.replication.service import placement
from streamrep.replication.transfer import SourcePartition
from streamrep.spark.command import (
    DEFAULT_INTERVAL,
    LOG_JAVA_OPTIONS,
    USER_ERROR_EXIT,
    master_url,
    python_env,
    spark_conf,
)
from streamrep.spark.offsets import offset_key
from streamrep.spark.runtime import resolve_home
from streamrep.spark.source import register
from streamrep.spark.tasks import (
    GatewayPartition,
    copy_task,
    next_holders,
    plan_share,
    record_pass,
    replicate_slot,
    warm_worker,
)
from streamrep.spark.writer import ApplyCommit, totals

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)
PROGRESS_EVERY_SECONDS = 30.0  # a busy gateway's log grows by one line this often at most
# Spark stops its pooled Python workers once none was used for a minute (PythonWorkerFactory's
# IDLE_WORKER_TIMEOUT_NS), and a new one takes seconds to start (imports, stores): an idle gateway
# runs its warm-up job this often, so the next pass with data finds its workers ready.
WARM_SECONDS = 30.0
RETRY_SECONDS = 5.0  # a pass retries a source partition that did not move (a replica failed) this often at most


def session(app_name: str, master: str | None = None, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession with ``format("streamrep")`` registered. Under spark-submit the master
    and conf given to spark-submit win over ``master``."""
    from pyspark.sql import SparkSession

    for name, value in python_env().items():
        os.environ.setdefault(name, value)
    builder = SparkSession.builder.appName(app_name)
    merged = spark_conf(conf)
    if not _submitted():  # this process starts the JVM: give it the master and the log settings
        builder = builder.master(master_url(master))
        merged.setdefault("spark.driver.extraJavaOptions", LOG_JAVA_OPTIONS)
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    level = os.environ.get("STREAMREP_SPARK_LOG_LEVEL")  # else log4j2.properties: warnings, on stderr
    if level:
        spark.sparkContext.setLogLevel(level)
    register(spark)
    _quiet_accumulator_hangups(spark.sparkContext)
    return spark


def _quiet_accumulator_hangups(context: SparkContext) -> None:
    """PySpark's accumulator server prints a traceback when the JVM hangs up on it (EOFError:
    the JVM stopped on SIGTERM first). That is shutdown, not an error: say nothing of it."""
    server = getattr(context, "_accumulatorServer", None)
    if server is None:
        return
    report = server.handle_error

    def handle_error(request: object, client_address: object) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            report(request, client_address)

    server.handle_error = handle_error


def _submitted() -> bool:
    # spark-submit passes its master to the Python driver through the JVM it starts.
    return "PYSPARK_GATEWAY_PORT" in os.environ


# -- copystream ----------------------------------------------------------------------------
def copystream_job(
    spark: SparkSession, admin: StreamAdmin, source: str, destination: str, home: str | None = None
) -> CopySummary:
    """copystream on Spark: plan the copy once (fixing each source partition's end), show
    COPY_IN_PROGRESS, copy every source partition in its own task (``tasks.copy_task``, which
    reads and applies inside the task), and restore the state."""
    home = resolve_home(home or admin.clusters.home)
    plan = plan_copy(admin, source, destination)
    units = sorted(plan.ends)
    written = 0
    with copying(admin, plan):
        if units:  # one task per source partition: Spark spreads them over its cores
            task = functools.partial(copy_task, home, plan, units)
            rows = spark.range(len(units), numPartitions=len(units)).mapInArrow(task, "written long").collect()
            written = sum(row.written for row in rows)
    return summary(plan, written)


# -- gateway -------------------------------------------------------------------------------
class _Heartbeat(threading.Thread):
    """Keeps the gateway live while a long pass or micro-batch runs (each also heartbeats), and
    sets ``stop`` once the cluster's gateways are asked to stop (``gateway stop``).

    :param stop: set when a stop is requested (None: a drain, ``once``, which ignores it).
    """

    def __init__(
        self, gateway: Gateway, interval: float = HEARTBEAT_INTERVAL_SECONDS, stop: threading.Event | None = None
    ):
        super().__init__(name="streamrep-heartbeat", daemon=True)
        self.gateway = gateway
        self.interval = interval
        self.stop = stop
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.wait(self.interval):
            try:
                self.gateway.heartbeat()
                if self.stop is not None and self.gateway.stop_requested(force=True):
                    self.stop.set()
            except Exception as err:  # noqa: BLE001 - a missed beat only risks a brief handover
                log.warning("gateway %s: heartbeat failed: %s", self.gateway.id, err)


def gateway_job(
    spark: SparkSession,
    admin: StreamAdmin,
    cluster: str,
    gateway_id: str | None = None,
    home: str | None = None,
    once: bool = False,
    interval: float = DEFAULT_INTERVAL,
    max_records: int | None = None,
    stop: threading.Event | None = None,
    metrics_port: int | None = None,
) -> None:
    """Run a gateway of ``cluster`` until everything available now is replicated (``once``),
    or until ``stop`` is set, the cluster's gateways are asked to stop (``gateway stop``: the
    pass in progress ends first), or the process is interrupted. Its heartbeat is withdrawn on
    the way out, so the other gateways take its share at once. A gateway whose cluster's
    gateways are stopped does not start (one line on stderr; it returns normally). The driver
    records the replicas' lag (``replication/lag.py``) and, with ``metrics_port``, serves the
    gateway's Prometheus metrics.

    The work runs as passes planned by the driver (``_Passes``), not as a streaming query: the
    stored positions are the only truth, and each pass starts from them (no Spark checkpoint)."""
    gateway = Gateway(admin, cluster, gateway_id)
    if not once and gateway.stop_requested(force=True):
        print(gateway.service_stop(StopCause.NOT_STARTED), file=sys.stderr, flush=True)
        return
    metrics = gateway.lag.export(gateway.id, metrics_port) if metrics_port else None
    stop = stop if stop is not None else threading.Event()
    context = spark.sparkContext
    gateway.announce(placement("spark", context.master, context.applicationId))
    beat = _Heartbeat(gateway, stop=None if once else stop)
    beat.start()
    sampler = LagSampler(gateway.lag, gateway.id, min(1.0, max(interval, 0.1)))
    sampler.start()
    passes = _Passes(spark, gateway, home or admin.clusters.home, once, max_records)
    progress = ProgressReport(gateway.id)
    try:
        if not once:  # a drain's first pass starts the workers anyway; a running gateway's must be quick
            passes.warm()
        _run_passes(passes, gateway, progress, once, interval, stop)
        progress.report(final=True)
        sampler.halt.set()
        sampler.join(timeout=30)
        gateway.lag.sample(final=True)
        if stop.is_set() and gateway.stop_requested():
            print(gateway.service_stop(StopCause.SERVICE_STOPPED), file=sys.stderr, flush=True)
    finally:
        beat.halt.set()
        sampler.halt.set()
        try:
            context.cancelJobGroup(passes.group)  # a pass interrupted (a signal): its transactions decide
        except Exception:  # noqa: BLE001 - the JVM may already be gone on a signal
            pass
        beat.join(timeout=5)
        gateway.stop()
        if metrics is not None:
            metrics.close()


class _Passes:
    """The gateway's passes, planned in the driver's own Python and run as one Spark job each.

    Why not a Structured Streaming query (the gateway was one, up to commit 51f59f3): a PySpark
    Python data source plans every micro-batch in a separate Python process and commits its
    writes in another, and Spark writes an offset log and a commit log per micro-batch: 475-584 ms
    a micro-batch against about 125 ms a pass here (bench/README.md, "Profile of one Spark gateway
    micro-batch"). A pass reads the assignment and the stored positions once, in this process, and
    runs ``tasks.replicate_slot`` over the source partitions with messages to move (each task takes
    those its Python worker applied last: ``tasks.slot_share``): read and apply in the same task,
    the apply transactional, so a killed pass leaves each batch applied or not, and the next pass
    resumes from the stored positions.

    :param once: drain what is there when the run starts (every partition the source clusters
        let this gateway pull, as ``Trigger.AvailableNow``), then ``run_one`` returns None.
    :param max_records: source messages per pass at most.
    """

    def __init__(self, spark: SparkSession, gateway: Gateway, home: str, once: bool, max_records: int | None):
        self.context = spark.sparkContext
        self.gateway = gateway
        self.home = resolve_home(home)
        self.once = once
        self.max_records = max_records
        self.group = f"streamrep-gateway-{gateway.cluster}-{gateway.id}"
        self.target: dict[str, int] | None = None
        self.started: dict[str, int] = {}  # offset key -> the position the last pass started it from
        self.stuck: dict[str, float] = {}  # offset key -> when it was found not to move (failing replicas)
        self.failed: set[str] = set()  # offset keys whose last pass had a replica fail
        self.last_job = float("-inf")  # monotonic time the last Spark job of this gateway ended
        self.holders: dict[str, str] = {}  # offset key -> the Python worker that applied it last

    def warm(self) -> list[int]:
        """Start a Python worker on every core and open the gateway in each (``tasks.warm_worker``).
        Without it, the first pass that has more source partitions than the last waits seconds
        for a new worker (5.2 s measured on Kafka under load, bench/README.md). Failing here only
        costs that wait, so an error is logged, not raised. Returns the workers' process ids
        (none if it failed)."""
        slices = max(1, self.context.defaultParallelism)
        job = functools.partial(warm_worker, self.home, self.gateway.cluster, self.gateway.id)
        self.context.setJobGroup(self.group, f"gateway {self.gateway.id}: warm-up", True)
        try:
            pids = self.context.parallelize(range(slices), slices).mapPartitions(job).collect()
        except Exception as err:  # noqa: BLE001 - an optimisation; the passes report real failures
            log.warning("gateway %s: warm-up job failed: %s", self.gateway.id, error_line(err))
            pids = []
        self.last_job = time.monotonic()
        return pids

    def run_one(self) -> int | None:
        """One pass; returns the source messages it moved (None: a drain has ended)."""
        gateway = self.gateway
        gateway.heartbeat()
        units = gateway.assignment(whole=self.once).units
        marks = gateway.read_marks(units)
        gateway.picked_up({f for flows in units.values() for f in flows})
        progress = gateway.progress(units, marks)
        if self.once and self.target is None:
            self.target = {offset_key(u): p.source_end for u, p in progress.items()}
        plan = plan_share(units, progress, self.max_records, self.target, self._skipped(progress))
        if not plan:
            if not self.once and time.monotonic() - self.last_job > WARM_SECONDS:
                self.warm()  # keeps Spark's Python workers alive for the next pass with data
            return None if self.once else 0
        for partition in plan:
            self.started[offset_key(partition.unit)] = progress[partition.unit].position
        total = totals(self._replicate(plan))
        record_pass(gateway, total, _flows_by_source(units))
        return total.rows

    def _skipped(self, progress: Mapping[SourcePartition, Progress]) -> set[str]:
        """The source partitions (offset keys) this pass leaves out: those found stuck lately."""
        now = time.monotonic()
        for unit, p in progress.items():
            key = offset_key(unit)
            # The last pass did not move it and a replica failed (or, in a drain, for any reason):
            # retry later (never, in a drain, so that it ends). A partition that merely found
            # nothing readable yet (Kafka: an open transaction) is read again at the next pass.
            if self.started.pop(key, None) == p.position and (self.once or key in self.failed):
                self.stuck[key] = now
        return {k for k, at in self.stuck.items() if self.once or now - at < RETRY_SECONDS}

    def _replicate(self, plan: Sequence[GatewayPartition]) -> list[ApplyCommit]:
        """Run the pass's Spark job over ``plan``; its tasks' commits."""
        gateway = self.gateway
        self.context.setJobGroup(self.group, f"gateway {gateway.id}: {len(plan)} source partitions", True)
        # As many tasks as cores, not one per source partition: each task is a scheduling round
        # trip, and a task applies its partitions one by one, each in its own transaction.
        slices = max(1, min(len(plan), self.context.defaultParallelism))
        keys = [offset_key(p.unit) for p in plan]
        holders = {k: self.holders[k] for k in keys if k in self.holders}
        if len(set(holders.values())) > slices:  # fewer tasks than holders: some holders run none
            holders = {}
        job = functools.partial(
            replicate_slot, self.home, gateway.cluster, gateway.id, plan, holders, slices, parts=gateway.pacer.parts
        )
        try:
            commits = self.context.parallelize(range(slices), slices).mapPartitions(job).collect()
        except Exception as err:
            if isinstance(err, Unavailable) or not is_outage(err):
                raise
            # A task's Unavailable (a broker down or a leader moving: the marks or the catalog could
            # not be read) reaches the driver wrapped by Spark, and would end the gateway as if it
            # were a bug; it is the outage it says, which gateway_job rides out as the in-process
            # gateway does. Nothing is lost or repeated: the next pass starts from the stored marks.
            raise Unavailable(error_line(err)) from None
        self.last_job = time.monotonic()
        # Every commit of replicate_slot names its source partition (``key``).
        self.holders = next_holders(
            self.holders, keys, {c.key: c.worker for c in commits if c.key and c.worker}, slices
        )
        self.failed = {commit.key for commit in commits if commit.key and commit.errors}
        return commits


def _flows_by_source(units: Mapping[SourcePartition, Sequence[Flow]]) -> dict[str, list[Flow]]:
    """The flows of a pass's source partitions, by source stream (UUID), each once."""
    by_source: dict[str, list[Flow]] = {}
    for flows in units.values():
        for flow in flows:
            if flow not in by_source.setdefault(flow.source_uuid, []):
                by_source[flow.source_uuid].append(flow)
    return by_source


def _run_passes(
    passes: _Passes, gateway: Gateway, progress: ProgressReport, once: bool, interval: float, stop: threading.Event
) -> None:
    """Run passes until ``stop`` is set or, ``once``, nothing is left to drain; an idle pass waits
    ``interval`` before the next."""
    outage = Outage(gateway.id, interval, stop.wait)
    while not stop.is_set():
        try:
            moved = passes.run_one()
        except Unavailable as err:
            if once:  # a drain reports the outage; a running gateway rides it out
                raise
            outage.failed(err)
            continue
        outage.ended()
        if moved is None:  # once: nothing left to drain
            break
        gateway.lag.passed(moved)  # the pass counted; the lag itself is sampled by ``sampler``
        progress.passed(moved)
        if not moved:
            stop.wait(interval)


class ProgressReport:
    """The gateway's own progress lines, on stderr (Spark's logging is kept to warnings): at most
    one line every ``every`` seconds, summing the passes that moved messages since the last
    line; an idle gateway prints nothing.

    :param gateway_id: the gateway's name, in every line.
    :param every: seconds between two lines at most.
    """

    def __init__(self, gateway_id: str, every: float = PROGRESS_EVERY_SECONDS):
        self.gateway_id = gateway_id
        self.every = every
        self.seen = -1  # the newest pass counted
        self.batches = self.messages = 0
        self.last = time.monotonic()

    def passed(self, moved: int) -> None:
        """One pass ended, having moved ``moved`` messages."""
        self.seen += 1
        if moved:
            self.batches += 1
            self.messages += moved
        self.report()

    def report(self, final: bool = False) -> None:
        now = time.monotonic()
        if not self.batches:
            self.last = now  # idle: nothing to say, and the next line counts from here
        elif final or now - self.last >= self.every:
            print(
                f"gateway {self.gateway_id}: {self.messages} messages in {self.batches} passes "
                f"in the last {now - self.last:.0f} s (up to pass {self.seen})",
                file=sys.stderr,
                flush=True,
            )
            self.batches = self.messages = 0
            self.last = now


# -- what the Spark apps share ------------------------------------------------
class Stopped(SystemExit):
    """Raised in the main thread by SIGTERM or SIGINT: a requested stop, exit status 0."""


def stop_on_signals() -> None:
    """Turn SIGTERM and SIGINT into ``Stopped``, so ``finally`` blocks run (the gateway
    withdraws its heartbeat) instead of the process dying where it stands."""

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        raise Stopped(0)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where every thread is, to stderr


# What a Spark app runs in its session (``run``): the app's job over the session and the admin.
AppJob = Callable[["SparkSession", StreamAdmin], None]


def run(name: str, home: str | None, job: AppJob) -> int:
    """Start a session, call ``job(spark, admin)`` and stop the session; returns 0."""
    from streamrep.client.config import Clusters

    admin = StreamAdmin(Clusters(resolve_home(home)))
    spark = session(f"streamrep-{name}")
    try:
        job(spark, admin)
    finally:
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - the JVM may already be gone on a signal
            pass
    return 0


_WRAPPED_ERROR = re.compile(r"streamrep\.errors\.(\w+): (.+)")


def error_line(err: BaseException) -> str:
    """One line for an error: a streamrep error's own message, also when Spark wraps it."""
    if isinstance(err, StreamrepError):
        return str(err)
    match = _WRAPPED_ERROR.search(str(err))
    if match:
        return match.group(2).strip()
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {first}" if first else type(err).__name__


def is_user_error(err: BaseException) -> bool:
    """A streamrep error other than ``Unavailable``, also when Spark wraps it."""
    if isinstance(err, StreamrepError):
        return not isinstance(err, Unavailable)
    match = _WRAPPED_ERROR.search(str(err))
    return match is not None and match.group(1) != Unavailable.__name__


def is_outage(err: BaseException) -> bool:
    """An ``Unavailable``, also when Spark wraps it (raised in a task)."""
    if isinstance(err, StreamrepError):
        return isinstance(err, Unavailable)
    match = _WRAPPED_ERROR.search(str(err))
    return match is not None and match.group(1) == Unavailable.__name__


def fail(err: BaseException) -> int:
    """Print ``err`` as one line on stderr; the exit status of a failed app (``USER_ERROR_EXIT``
    for a user error, so that a supervisor such as Airflow does not retry it; else 1)."""
    if isinstance(err, SystemExit):
        return err.code if isinstance(err.code, int) else 1
    print(f"ERROR: {error_line(err)}", file=sys.stderr, flush=True)
    if os.environ.get("STREAMREP_DEBUG"):
        import traceback

        traceback.print_exception(err)
    return USER_ERROR_EXIT if is_user_error(err) else 1
