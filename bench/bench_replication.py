"""Replication benchmarks: one measure per goal of issues 11 and 18, each against a baseline measured in the same run.

Baselines: on embedded clusters a plain single-process Python loop (``benchlib.baseline_copy`` /
``baseline_loop``: read a batch, append it, no positions, origins or transactions); on Kafka a plain
confluent-kafka consume-produce loop with no transactions (``benchlib.kafka_baseline_loop``).
Every figure is the median of ``--repeats`` (>= 3) runs, the runs of the baseline and ours interleaved.

Measures (``--only`` picks cases):

* ``continuous``: the Spark gateway app under a steady produce rate: p50 and p99 produce-to-readable
  latency at 5k msg/s, and at 50k msg/s the rate it applies against the rate produced (keep-up).
* ``kafka``: the same latency at 5k msg/s on Kafka clusters (a broker started here).
* ``kafka-secure`` (issue 18): the in-process gateway Kafka to Kafka on two secured three-broker clusters
  (SASL_SSL SCRAM, ACLs, RF 3 / min ISR 2) against two single-broker plaintext ones, and two three-broker
  plaintext ones to tell replication from security: backlog throughput and p50/p99 at 5k msg/s.
* ``mm2`` (issue 20): MirrorMaker 2 (dedicated mode, exactly-once: the baseline; at-least-once in ``detail``)
  against the in-process gateway on two single-broker clusters: the backlog drained by a new process
  (start-up included), its CPU seconds and peak RSS, and p50/p99 at 5k and 50k msg/s; every replica is checked
  record by record (``mirrormaker.py``). Needs ``scripts/kafka_local.py install mm2`` (``./run bench`` runs it).
* ``copy``: copystream in-process and on Spark (spark-submit, Spark's start included), 1M messages
  at 100 B and 1 KB; scaling: copystream on Spark ``local[2]`` against ``local[1]`` (moving time).
* ``memory``: peak resident memory of the whole process tree of the copystream and gateway apps on
  Spark, with a 5M-message backlog against a 500k one.
* ``fanout``: one in-process gateway pass to 64 replicas against 64 times a pass to one replica.

Run: ``.venv/bin/python bench/bench_replication.py [--quick] [--json] [--no-kafka] [--only CASE ...]``.
``--quick`` runs every measure on a tenth of the data. Always exits 0: it reports, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import mirrormaker
import psutil
from benchlib import (
    IDENTITY,
    PARTITIONS,
    PARTITIONS_ENV,
    TOPIC,
    TOPICS,
    TOPICS_ENV,
    AfterExit,
    Conn,
    PeakRss,
    baseline_copy,
    baseline_loop,
    bulk_topics,
    drain,
    drop,
    fill,
    fresh_home,
    gateway_loop,
    held,
    kafka_baseline_loop,
    kafka_count,
    kafka_fill,
    kafka_home,
    kafka_produce_steadily,
    kafka_replica_latencies,
    kafka_topic,
    link,
    median,
    percentile,
    produce_steadily,
    replica_latencies,
    start_broker,
    start_plain_quorum,
    start_secure_cluster,
    stop_broker,
    stop_secure_cluster,
    warm_coordinators,
)

from streamrep.client import StreamAdmin
from streamrep.model.message import Message
from streamrep.replication.copy import copy_stream
from streamrep.replication.gateway import Gateway
from streamrep.spark.lifetime import Terminated, stop_job
from streamrep.spark.submit import start_app

MIB = 1 << 20
MIN_RUNS = 3  # every figure is the median of at least this many runs


class Skipped(Exception):
    """A part of a case that this shape does not measure."""


class Stopped(Exception):
    """SIGTERM: the long cases keep the runs they completed, the rest is reported as not run."""


GRACE = 5.0  # seconds the replica is still read after the producer of a steady-rate window has ended
WARM_TOPIC = "warm"  # of the window streams: a gateway process's first record, before the clock (``gateway_warmed``)
WARM_UP_S = 15.0  # what a window's gateway process is given to start up, on top of the window
IDLE_S = 10.0  # one span of the idle CPU measure

# name -> (unit, kind, threshold). kind "max": value <= threshold; "ratio>=" / "ratio<=": value / baseline.
GOALS: dict[str, tuple[str, str, float]] = {
    "spark_gateway_5k_p50_embedded": ("ms", "max", 1000),
    "spark_gateway_5k_p99_embedded": ("ms", "max", 2000),
    "spark_gateway_5k_p50_kafka": ("ms", "max", 1000),
    "spark_gateway_5k_p99_kafka": ("ms", "max", 500),  # issue 30 (issue 20's was 1,000 ms, issue 11's 2,000)
    "spark_gateway_first_batch_kafka": ("s", "max", 15),  # issue 20: spark-submit to the first applied batch
    "spark_gateway_50k_keepup_embedded": ("msg/s", "ratio>=", 0.95),
    "copystream_spark_100B": ("msg/s", "ratio>=", 0.8),
    "copystream_spark_1KB": ("msg/s", "ratio>=", 0.8),
    "copystream_inprocess_100B": ("msg/s", "ratio>=", 0.8),
    "copystream_inprocess_1KB": ("msg/s", "ratio>=", 0.8),
    "memory_spark_gateway_backlog": ("MiB", "ratio<=", 1.2),
    "memory_spark_copystream_backlog": ("MiB", "ratio<=", 1.2),
    "scaling_copystream_spark_2_vs_1_cores": ("msg/s", "ratio>=", 1.6),
    "fanout_64_replicas": ("s", "ratio<=", 0.25),
    # issue 18: TLS + SASL (three brokers, RF 3) cost under 20% against single-broker plaintext
    "kafka_secure_gateway_backlog_100B": ("msg/s", "ratio>=", 0.8),
    "kafka_secure_gateway_5k_p50": ("ms", "ratio<=", 1.2),
    "kafka_secure_gateway_5k_p99": ("ms", "ratio<=", 1.2),
    # issues 20 and 30: the in-process gateway against MirrorMaker 2 exactly-once (the baseline), Kafka to Kafka
    "mm2_gateway_backlog_100B": ("msg/s", "ratio>=", 2.0),
    "mm2_gateway_5k_p50": ("ms", "ratio<=", 0.75),
    "mm2_gateway_5k_p99": ("ms", "ratio<=", 0.75),
    "mm2_gateway_50k_p50": ("ms", "ratio<=", 1.0),
    "mm2_gateway_50k_p99": ("ms", "max", 500),
    "mm2_gateway_50k_keepup": ("msg/s", "ratio>=", 0.95),  # applied in the window over produced
    "mm2_gateway_peak_rss": ("MiB", "ratio<=", 0.25),
    "mm2_gateway_cpu_s": ("s", "ratio<=", 1.0),
    "mm2_gateway_idle_cpu": ("ms/s per partition", "ratio<=", 1.0),
    # issue 30: across --partitions runs, CPU per message at the largest count over that at the default (4)
    "mm2_gateway_cpu_per_message_growth": ("s", "ratio<=", 1.5),
    # issue 30: the same on a secured three-broker pair (SASL_SSL, ACLs, RF 3, min ISR 2), its six brokers alone
    "mm2_secure_gateway_backlog_100B": ("msg/s", "ratio>=", 2.0),
    "mm2_secure_gateway_5k_p50": ("ms", "ratio<=", 0.75),
    "mm2_secure_gateway_5k_p99": ("ms", "ratio<=", 0.75),
    "mm2_secure_gateway_peak_rss": ("MiB", "ratio<=", 0.25),
    "mm2_secure_gateway_cpu_s": ("s", "ratio<=", 1.0),
    "mm2_secure_gateway_idle_cpu": ("ms/s per partition", "ratio<=", 1.0),
}
CASES = ("fanout", "continuous", "kafka", "kafka-secure", "mm2", "mm2-secure", "copy", "memory")  # quickest first
KAFKA_CASES = ("kafka", "kafka-secure", "mm2", "mm2-secure")  # skipped by --no-kafka
CASE_OF = {
    name: (
        "mm2-secure"
        if name.startswith("mm2_secure")
        else "mm2"
        if name.startswith("mm2")
        else "kafka-secure"
        if name.startswith("kafka_secure")
        else "kafka"
        if name.endswith("_kafka")
        else "continuous"
        if name.startswith("spark_gateway")
        else "memory"
        if name.startswith("memory")
        else "fanout"
        if name.startswith("fanout")
        else "copy"
    )
    for name in GOALS
}


def goal_text(name: str) -> str:
    unit, kind, threshold = GOALS[name]
    return f"<= {threshold:g} {unit}" if kind == "max" else f"{kind[5:]} {threshold:g}x"


def measure(
    name: str,
    value: float | None,
    baseline: float | None,
    why: str | None = None,
    runs_done: int | None = None,
    **detail,
) -> dict:
    """One entry of the JSON: the figure, its same-run baseline, their ratio, the goal and whether it
    is met (``None`` when a figure is missing; ``why`` then says why).

    :param name: a key of ``GOALS``
    :param value: our median figure, in the goal's unit
    :param baseline: the baseline's median figure, in the same unit
    :param runs_done: rounds completed, when the run was stopped early: fewer than ``MIN_RUNS`` is not judged
    :param detail: further figures (runs, wall times, ...) kept under ``detail``
    """
    unit, kind, threshold = GOALS[name]
    ratio = value / baseline if value is not None and baseline else None
    if kind == "max":
        met = None if value is None else value <= threshold
    elif ratio is None:
        met = None
    else:
        met = ratio >= threshold if kind == "ratio>=" else ratio <= threshold
    entry = {
        "name": name,
        "unit": unit,
        "value": value,
        "baseline": baseline,
        "ratio": ratio,
        "goal": goal_text(name),
        "met": met,
    }
    if runs_done is not None and runs_done < MIN_RUNS:
        met = entry["met"] = None
        why = f"only {runs_done} of {MIN_RUNS} runs before the benchmark was stopped (median of those)"
    if met is None:
        entry["why"] = why or "a figure is missing"
    if detail:
        entry["detail"] = detail
    return entry


def missing(name: str, why: str) -> dict:
    return measure(name, None, None, why=why)


def assemble(found: dict[str, dict], why_missing: dict[str, str]) -> dict:
    """The JSON object: one entry per goal, in ``GOALS`` order; a goal not measured gets ``met: null``
    and the reason (its case's error, ``--no-kafka``, ``--only``)."""
    measures = [
        found[name] if name in found else missing(name, why_missing.get(CASE_OF[name], "not measured"))
        for name in GOALS
    ]
    return {"measures": measures}


def log(text: str) -> None:
    """Progress on stderr as runs end: a long run shows partial figures, and --json stays one object."""
    print(text, file=sys.stderr, flush=True)


# -- copystream: in-process, on Spark, and Spark's scaling ---------------------------------------
def copy_runs(count: int, size: int, repeats: int) -> dict[str, list]:
    """Times of copystream in-process and on Spark (``local[2]``; at 100 B also ``local[1]``) and of the
    plain loop, on the same ``count`` messages of ``size`` bytes; runs interleaved, each copy into a
    fresh stream that is deleted after (1 GB a copy at 1 KB). Spark runs are (wall, moving) seconds."""
    from scale import (
        spark_run,  # the scale benchmark's own Spark run: /mapr/sf/s into /mapr/ny/c<n>
    )

    home, admin = fresh_home()
    fill(admin, "/mapr/sf/s", count, size)
    kinds = ["baseline", "inprocess", "local[2]"] + (["local[1]"] if size == 100 else [])
    runs: dict[str, list] = {kind: [] for kind in kinds}
    n = 0
    try:  # a SIGTERM keeps the runs done so far
        for _ in range(repeats):  # interleaved: a change in load hits every kind alike
            if STOPPED:
                break
            for kind in kinds:
                n += 1
                dst = f"/mapr/{'la' if kind == 'baseline' else 'ny'}/c{n}"
                t = time.perf_counter()
                if kind == "baseline":
                    assert baseline_copy(admin, "/mapr/sf/s", dst) == count
                    runs[kind].append(time.perf_counter() - t)
                elif kind == "inprocess":
                    copy_stream(admin, "/mapr/sf/s", dst)
                    runs[kind].append(time.perf_counter() - t)
                else:
                    runs[kind].append(spark_run(home, admin, "copystream", kind, n, count))
                admin.delete_stream(dst)
                log(f"  copy {size} B {kind}: {runs[kind][-1]}")
    except (Stopped, Terminated):  # spark.submit turns a SIGTERM during a Spark run into Terminated
        STOPPED.append(True)
    finally:
        os.environ.pop("STREAMREP_SPARK_MASTER", None)  # spark_run set it; later cases use the default
        shutil.rmtree(home, ignore_errors=True)
    return runs


def med(values: list[float]) -> float | None:
    return median(values) if values else None


def per_second(count: int, seconds: float | None) -> float | None:
    return count / seconds if seconds else None


def bench_copy(count: int, repeats: int) -> dict[str, dict]:
    """copystream in-process and on Spark against the plain loop at 100 B and 1 KB, and Spark's scaling."""
    out: dict[str, dict] = {}
    for size, label in ((100, "100B"), (1000, "1KB")):
        runs = copy_runs(count, size, repeats)
        base = med(runs["baseline"])
        walls = [w for w, _ in runs["local[2]"]]
        out[f"copystream_inprocess_{label}"] = measure(
            f"copystream_inprocess_{label}",
            per_second(count, med(runs["inprocess"])),
            per_second(count, base),
            runs_done=len(runs["inprocess"]),
            messages=count,
            baseline_runs_s=runs["baseline"],
            runs_s=runs["inprocess"],
        )
        out[f"copystream_spark_{label}"] = measure(
            f"copystream_spark_{label}",
            per_second(count, med(walls)),
            per_second(count, base),
            runs_done=len(walls),
            messages=count,
            master="local[2]",
            measured="wall time of spark-submit, Spark's start included",
            baseline_runs_s=runs["baseline"],
            wall_runs_s=walls,
        )
        if size == 100:
            moving = {kind: [m for _, m in runs[kind] if m is not None] for kind in ("local[1]", "local[2]")}
            one_walls = [w for w, _ in runs["local[1]"]]
            out["scaling_copystream_spark_2_vs_1_cores"] = measure(
                "scaling_copystream_spark_2_vs_1_cores",
                per_second(count, med(moving["local[2]"])),
                per_second(count, med(moving["local[1]"])),
                why="the destination was not seen filling",
                runs_done=min(len(moving["local[1]"]), len(moving["local[2]"])),
                messages=count,
                measured="moving time (first to last message at the destination)",
                wall_ratio=med(one_walls) / med(walls) if one_walls and walls else None,
                moving_runs_s=moving,
                wall_runs_s={"local[1]": one_walls, "local[2]": walls},
            )
    return out


# -- memory with a growing backlog -----------------------------------------------------------------
def peak_of(app: str, args: list[str], timeout: float) -> int:
    """Run a Spark app to its end (spark-submit, tethered); the peak resident bytes of its process tree."""
    proc = start_app(app, args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    watch = PeakRss(proc.pid)
    watch.start()
    try:
        proc.wait(timeout=timeout)
    except BaseException:  # a timeout or a SIGTERM: the job goes too
        stop_job(proc)
        raise
    finally:
        peak = watch.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{app} on Spark exited with status {proc.returncode}")
    return peak


def bench_memory(small: int, repeats: int) -> dict[str, dict]:
    """copystream and the gateway (``--once``) on Spark, each draining a backlog of ``small`` and of
    ten times ``small`` messages (100 B) into a fresh stream; runs interleaved."""
    home, admin = fresh_home(("sf", "ny"))
    sources = {"small": ("/mapr/sf/small", small), "big": ("/mapr/sf/big", small * 10)}
    for path, count in sources.values():
        fill(admin, path, count, 100)
    peaks: dict[tuple[str, str], list[int]] = {(app, b): [] for app in ("copystream", "gateway") for b in sources}
    n = [0]
    timeout = 1200 + small * 10 / 2000  # Spark alone took 5 min to start under a load average of 25
    try:  # a SIGTERM keeps the runs done so far
        for _ in range(repeats):
            if STOPPED:
                break
            for app in ("copystream", "gateway"):
                for backlog, (src, count) in sources.items():
                    n[0] += 1
                    dst = f"/mapr/ny/m{n[0]}"
                    if app == "copystream":
                        args = ["--src", src, "--dst", dst, "--home", home]
                    else:
                        for other, _ in sources.values():  # the gateway serves only this replica
                            for old in list(admin.entry(other).replicas):
                                admin.remove_replica(other, old.path)
                        link(admin, src, dst)
                        args = ["--cluster", "ny", "--id", f"mem{n[0]}", "--home", home, "--once"]
                    peak = peak_of(app, args, timeout)
                    assert held(admin, dst) == count, (app, backlog, held(admin, dst), count)
                    if app == "gateway":
                        admin.remove_replica(src, dst)
                    admin.delete_stream(dst)
                    peaks[(app, backlog)].append(peak)
                    log(f"  memory {app} {backlog} ({count:,}): peak {peak / MIB:.0f} MiB")
    except (Stopped, Terminated):  # spark.submit turns a SIGTERM during a Spark run into Terminated
        STOPPED.append(True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    out = {}
    for app in ("copystream", "gateway"):
        name = f"memory_spark_{app}_backlog"
        big, base = med(peaks[(app, "big")]), med(peaks[(app, "small")])
        out[name] = measure(
            name,
            big and big / MIB,
            base and base / MIB,
            runs_done=min(len(peaks[(app, "big")]), len(peaks[(app, "small")])),
            backlog=small * 10,
            baseline_backlog=small,
            runs_mib={b: [p / MIB for p in peaks[(app, b)]] for b in sources},
        )
    return out


# -- the Spark gateway under a steady produce rate -------------------------------------------------
def start_spark_gateway(
    admin: StreamAdmin, home: str, source: str, replica: str, cluster: str, timeout: float = 300
) -> tuple[subprocess.Popen, float]:
    """The Spark gateway, warmed up (``_start_spark_gateway``), and the seconds from its submit until
    its first applied batch was readable; a second try if the first fails to start (on a loaded
    machine Spark's Python workers can miss their connect-back timeout)."""
    try:
        return _start_spark_gateway(admin, home, source, replica, cluster, timeout)
    except RuntimeError as err:
        log(f"  the Spark gateway failed to start, trying once more: {err}")
        return _start_spark_gateway(admin, home, source, replica, cluster, timeout)


def _start_spark_gateway(
    admin: StreamAdmin, home: str, source: str, replica: str, cluster: str, timeout: float
) -> tuple[subprocess.Popen, float]:
    """The Spark gateway app through spark-submit; returns once it replicates. Warmed up before the
    clock: the first micro-batch with data starts Spark's Python workers (seconds), so a message on
    a separate topic must reach the replica first."""
    output = open(os.path.join(home, "spark-gateway.log"), "w+")  # noqa: SIM115 - read back if it fails
    submitted = time.monotonic()
    proc = start_app(
        "gateway",
        ["--cluster", cluster, "--id", "spark", "--home", home, "--interval", "0.2"],
        stdout=output,
        stderr=subprocess.STDOUT,
    )
    src_entry, src_store = admin.entry(source), admin.store(admin.path(source))
    if "warmup" not in src_store.topics(src_entry.uuid):
        src_store.create_topic(src_entry.uuid, "warmup", 1)
    src_store.append(src_entry.uuid, "warmup", {0: [Message(b"warm", None, (), int(time.time() * 1000), 0)]})
    dst_entry, dst_store = admin.entry(replica), admin.store(admin.path(replica))
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            output.seek(0)
            errors = [line.strip() for line in output if line.startswith("ERROR") or "Error" in line]
            raise RuntimeError(
                f"the Spark gateway exited with status {proc.returncode} while warming up: "
                f"{errors[-1] if errors else 'no error line'}"
            )
        if "warmup" in dst_store.topics(dst_entry.uuid) and dst_store.offsets(dst_entry.uuid, "warmup", 0)[1]:
            return proc, time.monotonic() - submitted
        time.sleep(0.1)
    stop_job(proc)
    raise RuntimeError(f"the Spark gateway did not replicate a first message in {timeout:.0f} s")


def window_figures(lat_arrivals: list[tuple[float, float]], produced: int, seconds: float, grace_ms: float) -> dict:
    """Figures of one steady-rate window from (latency ms, arrival ms) per message read at the replica:
    p50, p99, and the rate applied: messages readable by 1 s after the last produce (the p50 goal).

    Messages produced but not read by the end of the reading count as the slowest: if a percentile
    falls among them it is given as ``grace_ms`` (the reading went on that long after the last
    produce, so the true figure is at least that), or as the largest latency read if that is larger,
    and ``lower_bound`` says so."""
    lat = sorted(latency for latency, _ in lat_arrivals)
    unseen = max(0, produced - len(lat))
    ranked = lat + [float("inf")] * unseen
    bound = max([grace_ms, *lat[-1:]])  # an unread message ranks after every read one
    figures = {}
    for q, key in ((0.5, "p50_ms"), (0.99, "p99_ms")):
        value = percentile(ranked, q)
        figures[key] = bound if value == float("inf") else value
        if value == float("inf"):
            figures["lower_bound"] = True
    last_produce = max((arrival - latency for latency, arrival in lat_arrivals), default=0)
    in_time = sum(1 for latency, arrival in lat_arrivals if arrival <= last_produce + 1000)
    return {
        **figures,
        "applied_rate": in_time / seconds,
        "produced_rate": produced / seconds,
        "read": len(lat),
        "produced": produced,
    }


def caught_up(count: Callable[[], int], target: int, timeout: float = 90) -> float:
    """Wait until ``count()`` reaches ``target`` (the Spark gateway has applied a window's backlog), so the
    next window starts with an idle gateway; returns the seconds waited (at most ``timeout``)."""
    t = time.perf_counter()
    while count() < target and time.perf_counter() - t < timeout:
        time.sleep(0.5)
    return time.perf_counter() - t


def _embedded_window(
    admin: StreamAdmin, home: str, src: str, dst: str, topic: str, rate: int, seconds: float, loop: bool
) -> dict:
    ctx = mp.get_context("spawn")
    worker = None
    if loop:
        worker = ctx.Process(target=baseline_loop, args=(home, src, dst, seconds + 6, 0.05, topic))
        worker.start()
        time.sleep(1.5)  # let the loop start before the clock
    producer = ctx.Process(target=produce_steadily, args=(home, src, rate, seconds, 100, topic))
    producer.start()
    pairs: list[tuple[float, float]] = []
    replica_latencies(admin, dst, AfterExit(producer, GRACE, seconds + 60), topic=topic, pairs=pairs)
    producer.join()
    if worker is not None:
        worker.join()
    produced = topic_count(admin, src, topic)
    figures = window_figures(pairs, produced, seconds, GRACE * 1000)
    figures["catch_up_s"] = caught_up(lambda: topic_count(admin, dst, topic), produced)
    return figures


def topic_count(admin: StreamAdmin, path: str, topic: str) -> int:
    entry, store = admin.entry(path), admin.store(admin.path(path))
    return sum(store.offsets(entry.uuid, topic, p)[1] for p in range(PARTITIONS))


def window_streams(admin, baseline_peer: str | None, windows: int) -> None:
    """/mapr/sf/s replicated to /mapr/ny/s (the gateway's), and unless ``baseline_peer`` is None /mapr/sf/b
    with ``baseline_peer`` (the loop's, not linked), each with one topic per window, created before the clock."""
    for path, peer in (("/mapr/sf/s", "/mapr/ny/s"), ("/mapr/sf/b", baseline_peer))[: 2 if baseline_peer else 1]:
        admin.create_stream(path, defaultpartitions=PARTITIONS, ttl=0)
        admin.create_stream(peer, copymetafrom=path)
        for name in [WARM_TOPIC, *(f"w{i}" for i in range(windows))]:
            admin.create_topic(path, name)
            admin.create_topic(peer, name)
    admin.add_replica("/mapr/sf/s", "/mapr/ny/s")
    admin.add_upstream("/mapr/ny/s", "/mapr/sf/s")


def bench_continuous(rates: list[int], seconds: float, repeats: int) -> dict[str, dict]:
    """The Spark gateway (started once, warmed up) and the plain loop, each in turn under the same steady
    produce rate, on topics created before the clock (one per window)."""
    home, admin = fresh_home(("sf", "ny", "la"))
    windows = [(r, rate, kind) for r in range(repeats) for rate in rates for kind in ("baseline", "spark")]
    window_streams(admin, "/mapr/la/b", len(windows))
    figures: dict[tuple[int, str], list[dict]] = {(rate, kind): [] for rate in rates for kind in ("baseline", "spark")}
    proc, _ = start_spark_gateway(admin, home, "/mapr/sf/s", "/mapr/ny/s", "ny")
    try:
        for i, (_, rate, kind) in enumerate(windows):
            src, dst = ("/mapr/sf/b", "/mapr/la/b") if kind == "baseline" else ("/mapr/sf/s", "/mapr/ny/s")
            f = _embedded_window(admin, home, src, dst, f"w{i}", rate, seconds, loop=kind == "baseline")
            figures[(rate, kind)].append(f)
            log(f"  continuous embedded {kind} @ {rate}/s: {f}")
    finally:
        stop_job(proc)
        shutil.rmtree(home, ignore_errors=True)
    out = {}

    def med(rate: int, kind: str, key: str) -> float | None:
        values = [f[key] for f in figures[(rate, kind)] if f[key] is not None]
        return median(values) if values else None

    for rate in rates:
        if rate == 5000:
            for q in ("p50", "p99"):
                name = f"spark_gateway_5k_{q}_embedded"
                out[name] = measure(
                    name,
                    med(rate, "spark", f"{q}_ms"),
                    med(rate, "baseline", f"{q}_ms"),
                    why="no message reached the replica",
                    runs=figures[(rate, "spark")],
                    baseline_runs=figures[(rate, "baseline")],
                    seconds=seconds,
                )
        if rate == 50000:
            produced = med(rate, "spark", "produced_rate")
            entry = measure(
                "spark_gateway_50k_keepup_embedded",
                med(rate, "spark", "applied_rate"),
                produced,
                why="nothing was produced",
                target_rate=rate,
                baseline_loop_applied_rate=med(rate, "baseline", "applied_rate"),
                runs=figures[(rate, "spark")],
                seconds=seconds,
            )
            if produced is not None and produced < 0.9 * rate:  # the goal's load was not reached: not judged
                entry["met"] = None
                entry["why"] = f"the producer reached only {produced:,.0f} of {rate:,} msg/s (machine load)"
            out["spark_gateway_50k_keepup_embedded"] = entry
    return out


def gateway_warmed(admin: StreamAdmin, ends: tuple[Conn, Conn], timeout: float = 300) -> Callable[[], None]:
    """Waits until a gateway process just started has replicated one record of /mapr/sf/s's ``WARM_TOPIC``:
    its first pass (its share taken, a reader and the lanes' producers made ready) before the clock, as
    MM2 is warmed up before its windows (``mm2_warm``)."""
    src, dst = kafka_topic(admin, "/mapr/sf/s", WARM_TOPIC), kafka_topic(admin, "/mapr/ny/s", WARM_TOPIC)

    def wait() -> None:
        target = kafka_count(ends[1], dst, None, timeout=60) + 1
        kafka_fill(ends[0], src, 1, 100)
        deadline = time.monotonic() + timeout
        while kafka_count(ends[1], dst, target, timeout=2) < target:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway replicated nothing of {src} in {timeout:.0f} s")

    return wait


def kafka_window(
    src_conn: Conn,
    dst_conn: Conn,
    src: str,
    dst: str,
    rate: int,
    seconds: float,
    worker: mp.Process | None = None,
    warmed: Callable[[], None] | None = None,
) -> tuple[dict, int]:
    """One steady-rate window on Kafka: ``worker`` (a process that replicates ``src`` to ``dst``, started here,
    or None when a gateway already runs), a producer at ``rate`` msg/s for ``seconds``, and a read_committed
    consumer of ``dst`` until ``GRACE`` s after the producer ends. ``warmed`` waits until the worker has
    started up (``gateway_warmed``); without it the clock starts 3 s after the worker. Returns
    ``window_figures`` and the count produced."""
    ctx = mp.get_context("spawn")
    if worker is not None:
        worker.start()
        if warmed is None:
            time.sleep(3.0)  # the worker's consumer assigned before the clock
        else:
            warmed()
    producer = ctx.Process(target=kafka_produce_steadily, args=(src_conn, src, rate, seconds, 100))
    producer.start()
    pairs: list[tuple[float, float]] = []
    kafka_replica_latencies(dst_conn, dst, AfterExit(producer, GRACE, seconds + 60), pairs=pairs)
    producer.join()
    if worker is not None:
        worker.join()
    produced = kafka_count(src_conn, src, int(rate * seconds), timeout=30)
    return window_figures(pairs, produced, seconds, GRACE * 1000), produced


def gateway_window(
    admin: StreamAdmin, home: str, ends: tuple[Conn, Conn], i: int, rate: int, seconds: float
) -> tuple[dict, str, str]:
    """Window ``i`` of a gateway process on /mapr/sf/s -> /mapr/ny/s (``window_streams``), warmed up before
    the clock; what it left is drained after (``left_after_window``). Returns the figures and the window's
    source and replica topics, for the caller's check."""
    src, dst = kafka_topic(admin, "/mapr/sf/s", f"w{i}"), kafka_topic(admin, "/mapr/ny/s", f"w{i}")
    worker = mp.get_context("spawn").Process(target=gateway_loop, args=(home, WARM_UP_S + seconds + GRACE + 5, 0.05))
    f, _ = kafka_window(ends[0], ends[1], src, dst, rate, seconds, worker, gateway_warmed(admin, ends))
    f["left_after_window"] = drain(Gateway(admin, "ny", "bench"))
    return f, src, dst


def bench_kafka(bootstrap: str, seconds: float, repeats: int, rate: int = 5000) -> dict[str, dict]:
    """The Spark gateway between two namespaces of one Kafka broker, against the plain confluent-kafka
    loop, each in turn under a steady 5k msg/s; replicas read with read_committed consumers."""
    home, admin = kafka_home(bootstrap)
    windows = [(r, kind) for r in range(repeats) for kind in ("baseline", "spark")]
    window_streams(admin, "/mapr/ny/b", len(windows))
    ctx = mp.get_context("spawn")
    figures: dict[str, list[dict]] = {"baseline": [], "spark": []}
    proc, first_batch_s = start_spark_gateway(admin, home, "/mapr/sf/s", "/mapr/ny/s", "ny")
    try:
        for i, (_, kind) in enumerate(windows):
            src_path, dst_path = ("/mapr/sf/b", "/mapr/ny/b") if kind == "baseline" else ("/mapr/sf/s", "/mapr/ny/s")
            src, dst = kafka_topic(admin, src_path, f"w{i}"), kafka_topic(admin, dst_path, f"w{i}")
            worker = (
                ctx.Process(target=kafka_baseline_loop, args=(bootstrap, src, dst, seconds + 8))
                if kind == "baseline"
                else None
            )
            f, produced = kafka_window(bootstrap, bootstrap, src, dst, rate, seconds, worker)
            f["catch_up_s"] = caught_up(lambda d=dst, n=produced: kafka_count(bootstrap, d, n, timeout=10), produced)
            figures[kind].append(f)
            log(f"  continuous kafka {kind} @ {rate}/s: {f}")
    finally:
        stop_job(proc)
        drop(admin, home)
    out = {
        "spark_gateway_first_batch_kafka": measure(
            "spark_gateway_first_batch_kafka",
            first_batch_s,
            None,
            measured="from spark-submit until the first message applied is readable in the replica "
            "(Spark's start, the session, the first pass and its Python workers)",
        )
    }
    for q in ("p50", "p99"):
        name = f"spark_gateway_5k_{q}_kafka"
        ours = [f[f"{q}_ms"] for f in figures["spark"] if f[f"{q}_ms"] is not None]
        base = [f[f"{q}_ms"] for f in figures["baseline"] if f[f"{q}_ms"] is not None]
        out[name] = measure(
            name,
            median(ours) if ours else None,
            median(base) if base else None,
            why="no message reached the replica",
            runs=figures["spark"],
            baseline_runs=figures["baseline"],
            seconds=seconds,
        )
    return out


# -- Kafka to Kafka: secured three-broker clusters against single-broker plaintext ones (issue 18) ---------
# label -> what the pair is; the first is the baseline of every kafka_secure_ measure.
SECURE_PAIRS = {
    "plain1": "two single-broker PLAINTEXT clusters (RF 1)",
    "secure3": "two three-broker SASL_SSL SCRAM-SHA-512 clusters with ACLs (RF 3, min ISR 2), as principal admin",
    "plain3": "two three-broker PLAINTEXT clusters (RF 3, min ISR 2, no TLS, SASL or ACLs)",
}
BULK = "/mapr/sf/bulk"  # the throughput case's backlog


def exactly(what: str, source: int, replica: int) -> None:
    """Exactly-once or a loud failure: the replica holds exactly as many records as the source."""
    if replica != source:
        raise RuntimeError(
            f"{what}: the replica holds {replica:,} records, the source {source:,} "
            f"({max(0, source - replica):,} lost, {max(0, replica - source):,} duplicated at least)"
        )


def start_pair(label: str, stack: list) -> tuple[Conn, Conn]:
    """The two clusters (``sf``, ``ny``) of pair ``label`` of ``SECURE_PAIRS``; ``stack`` gets each with its
    stop, for the caller's finally. Each cluster's coordinators are made ready before any run (``warm_coordinators``).
    Returns their conns as ``benchlib.kafka_conf`` takes them (the secured
    clusters' as principal admin)."""
    ends = []
    for side in ("sf", "ny"):
        t = time.perf_counter()
        if label == "plain1":
            broker = start_broker()
            stack.append((stop_broker, broker))
            ends.append(broker.bootstrap)
        else:
            start = start_secure_cluster if label == "secure3" else start_plain_quorum
            cluster = start(f"bench-{side}")
            stack.append((stop_secure_cluster, cluster))
            ends.append(cluster.settings("admin") if label == "secure3" else cluster.bootstrap)
        warm_coordinators(ends[-1])
        log(f"  {label} {side} started (its coordinators ready) in {time.perf_counter() - t:.0f} s")
    return ends[0], ends[1]


def stop_all(stack: list) -> None:
    """Stop what ``start_pair`` started, last first, and forget it."""
    while stack:
        stop, cluster = stack.pop()
        stop(cluster)


def secure_drain(admin: StreamAdmin, dst_conn: Conn, n: int, count: int) -> dict:
    """One backlog run: the in-process gateway drains ``BULK`` into a fresh replica ``/mapr/ny/r<n>``; the
    replica is then read to its end and must hold exactly ``count``."""
    replica = f"/mapr/ny/r{n}"
    link(admin, BULK, replica, alone=True)  # the gateway serves only this replica
    t0 = time.perf_counter()
    gateway = Gateway(admin, "ny", "bench")
    gateway.heartbeat()  # the gateway's start: its catalog records (the clusters are connected already)
    t1 = time.perf_counter()
    moved = drain(gateway)
    t2 = time.perf_counter()
    held = kafka_count(dst_conn, kafka_topic(admin, replica), None, timeout=600)
    exactly(f"backlog run {n}", count, held)
    return {"s": t2 - t1, "with_start_s": t2 - t0, "moved": moved, "replica": held}


def bench_kafka_secure(count: int, seconds: float, repeats: int, rate: int = 5000) -> dict[str, dict]:
    """The in-process gateway on each pair of ``SECURE_PAIRS``, one pair running at a time (two clusters of
    three brokers each are all that run, not 14 JVMs on two cores; the price is that a pair's runs are not
    interleaved with the others'): a backlog of ``count`` x 100 B drained into a fresh replica, then p50/p99
    at ``rate`` msg/s for ``seconds`` (a gateway process per window). The replica must hold exactly what the
    source holds after every run."""
    stack: list = []
    drains: dict[str, list[dict]] = {label: [] for label in SECURE_PAIRS}
    windows: dict[str, list[dict]] = {label: [] for label in SECURE_PAIRS}
    try:
        for label in SECURE_PAIRS:
            if STOPPED:
                break
            conns = start_pair(label, stack)
            home, admin = kafka_home(*conns)
            try:
                src_conn, dst_conn = conns
                admin.create_stream(BULK, defaultpartitions=PARTITIONS, ttl=0)
                admin.create_topic(BULK, TOPIC)
                kafka_fill(src_conn, kafka_topic(admin, BULK), count, 100)
                exactly(f"{label} backlog", count, kafka_count(src_conn, kafka_topic(admin, BULK), None, timeout=600))
                for n in range(repeats):
                    drains[label].append(secure_drain(admin, dst_conn, n, count))
                    log(f"  kafka-secure {label} backlog: {drains[label][-1]}")
                for old in list(admin.entry(BULK).replicas):  # the latency gateway serves only /mapr/ny/s
                    admin.remove_replica(BULK, old.path)
                window_streams(admin, None, repeats)
                for i in range(repeats):
                    f, src, dst = gateway_window(admin, home, conns, i, rate, seconds)
                    exactly(
                        f"{label} window {i}",
                        kafka_count(src_conn, src, None, timeout=120),
                        kafka_count(dst_conn, dst, None, timeout=120),
                    )
                    windows[label].append(f)
                    log(f"  kafka-secure {label} @ {rate}/s: {f}")
            finally:
                try:
                    drop(admin, home)
                except Exception as err:  # noqa: BLE001 - the clusters go next anyway
                    log(f"  dropping the run's topics failed: {err}")
                stop_all(stack)
    finally:
        stop_all(stack)

    def figure(label: str, key: str) -> float | None:
        if key == "rate":
            return per_second(count, med([d["s"] for d in drains[label]]))
        return med([f[key] for f in windows[label]])

    out = {}
    for key, name in (
        ("rate", "kafka_secure_gateway_backlog_100B"),
        ("p50_ms", "kafka_secure_gateway_5k_p50"),
        ("p99_ms", "kafka_secure_gateway_5k_p99"),
    ):
        pair_figures = {label: figure(label, key) for label in SECURE_PAIRS}
        plain1, secure3, plain3 = (pair_figures[label] for label in SECURE_PAIRS)
        out[name] = measure(
            name,
            secure3,
            plain1,
            why="a pair did not complete its runs",
            runs_done=len(windows["secure3"]),
            pairs=SECURE_PAIRS,
            figures=pair_figures,
            # the two differences apart: RF 3 on three brokers, then TLS + SASL + ACLs on top
            replication_ratio=plain3 / plain1 if plain3 and plain1 else None,
            security_ratio=secure3 / plain3 if secure3 and plain3 else None,
            runs={label: drains[label] if key == "rate" else windows[label] for label in SECURE_PAIRS},
            **(
                {
                    "messages": count,
                    "size": 100,
                    "measured": "drain after the gateway's heartbeat; with_start_s "
                    "includes creating the Gateway and its first heartbeat",
                }
                if key == "rate"
                else {"rate": rate, "seconds": seconds}
            ),
        )
    return out


# -- MirrorMaker 2 against the in-process gateway, Kafka to Kafka (issue 20) ---------------------------------
MM2_MODES = {"mm2_eos": True, "mm2_alo": False}  # kind -> exactly-once; mm2_eos is every mm2_ measure's baseline
QUICK_MM2_MODES = {"mm2_eos": True}  # --quick: the baseline only (issue 30: every measure in 20 minutes)
MM2_RATES = (5000, 50000)
WINDOWS_UP_TO = 256  # partitions: issue 30's latency goals are at 4 and 256; beyond, the backlog and idle CPU
MM2_SECURE_RATES = (5000,)  # the secured pair's goals are the backlog's, RSS and 5k latency
MM2_SOURCE = "/mapr/sf/m"  # MM2's windows: a stream no streamrep gateway replicates
CATCH_UP_S = 900  # a bound, not an expectation: under a load average of 50-60 a 100k backlog took MM2 200-280 s


def streamrep_drain(admin: StreamAdmin, home: str, ends: tuple[str, str], run: int, count: int) -> dict:
    """The gateway as a process of its own (``mirrormaker.py drain``) drains ``BULK`` into a fresh replica."""
    replica = f"/mapr/ny/r{run}"
    link(admin, BULK, replica, alone=True)
    usage = mirrormaker.drain_streamrep(home, Path(home) / f"drain-{run}.log", timeout=600 + count / 500)
    pairs = [(kafka_topic(admin, BULK, t), kafka_topic(admin, replica, t)) for t in bulk_topics()]
    check = mirrormaker.replicas_check(f"streamrep backlog run {run}", ends[0], ends[1], pairs, transactional=True)
    return {"with_start_s": usage.wall_s, "cpu_s": usage.cpu_s, "peak_rss_mib": usage.peak_rss_mib, **check}


def mm2_warm(mm: mirrormaker.MirrorMaker, source: str, topic: str, timeout: float = 600) -> float:
    """Start ``mm`` and wait until a record produced to ``topic`` is readable in its replica; seconds taken."""
    proc = mm.start()
    kafka_fill(source, topic, 1, 100)
    while kafka_count(mm.target, mm.replica(topic), 1, timeout=2) < 1:
        if not proc.alive():
            raise mm.failure(f"exited with status {proc.proc.returncode} while starting")
        if time.perf_counter() - proc.t0 > timeout:
            raise mm.failure(f"replicated nothing in {timeout:.0f} s")
    return time.perf_counter() - proc.t0


def idle_cpu(pid: int, partitions: int, samples: int) -> list[float]:
    """CPU milliseconds per second and per partition that process ``pid`` (every thread) spends while nothing
    arrives: ``samples`` back-to-back spans of ``IDLE_S`` seconds, from the kernel's counters."""
    proc = psutil.Process(pid)
    figures = []
    for _ in range(samples):
        before, t0 = sum(proc.cpu_times()[:2]), time.perf_counter()
        time.sleep(IDLE_S)
        used, span = sum(proc.cpu_times()[:2]) - before, time.perf_counter() - t0
        figures.append(used * 1000 / span / partitions)
    return figures


def gateway_idle(admin: StreamAdmin, home: str, ends: tuple[Conn, Conn], samples: int) -> list[float]:
    """``idle_cpu`` of a gateway process serving the window streams, once it has made its first pass."""
    partitions = len(admin.list_topics("/mapr/sf/s")) * PARTITIONS
    worker = mp.get_context("spawn").Process(target=gateway_loop, args=(home, WARM_UP_S + samples * IDLE_S + 5, 0.05))
    worker.start()
    try:
        gateway_warmed(admin, ends)()
        assert worker.pid is not None
        return idle_cpu(worker.pid, partitions, samples)
    finally:
        worker.terminate()
        worker.join()


def mm2_windows(
    admin: StreamAdmin,
    home: str,
    ends: tuple[Conn, Conn],
    seconds: float,
    repeats: int,
    rates: tuple[int, ...],
    windows: dict[tuple[str, int], list[dict]],
    idles: dict[str, list[float]],
    replication: int,
    modes: dict[str, bool],
) -> None:
    """The idle spans and latency windows of ``bench_mm2``, appended to ``idles`` and ``windows`` as they end."""
    src_conn, dst_conn = ends
    run = 1000  # aliases apart from the backlog runs'
    for old in list(admin.entry(BULK).replicas):  # the window gateways serve only /mapr/ny/s
        admin.remove_replica(BULK, old.path)
    n = repeats * len(rates)
    window_streams(admin, None, n)
    admin.create_stream(MM2_SOURCE, defaultpartitions=PARTITIONS, ttl=0)
    idles["streamrep"] = gateway_idle(admin, home, ends, repeats)
    log(f"  mm2 streamrep idle CPU ms/s per partition: {idles['streamrep']}")
    for kind, exactly_once in modes.items():
        if not rates and not exactly_once:  # only the idle span: MM2 exactly-once's
            continue
        for i in ["warmup", *range(n)]:
            admin.create_topic(MM2_SOURCE, f"{kind}-{i}")
        topics = [kafka_topic(admin, MM2_SOURCE, f"{kind}-{i}") for i in range(n)]
        warm = kafka_topic(admin, MM2_SOURCE, f"{kind}-warmup")
        run += 1
        mm = mirrormaker.MirrorMaker(src_conn, dst_conn, [warm, *topics], exactly_once, Path(home), run, replication)
        try:
            log(f"  mm2 {kind} started and replicating in {mm2_warm(mm, src_conn, warm):.0f} s")
            if kind == "mm2_eos":  # as many partitions as the gateway's: one topic a window and the warm one
                assert mm.proc is not None
                idles[kind] = idle_cpu(mm.proc.proc.pid, len(mm.topics) * PARTITIONS, repeats)
                log(f"  mm2 {kind} idle CPU ms/s per partition: {idles[kind]}")
            for i, rate in enumerate(rate for _ in range(repeats) for rate in rates):
                if STOPPED:
                    break
                src, dst = topics[i], mm.replica(topics[i])
                f, produced = kafka_window(src_conn, dst_conn, src, dst, rate, seconds)
                # MM2 is still copying when it falls behind: the check must not count that as loss
                f["catch_up_s"] = caught_up(
                    lambda d=dst, k=produced: kafka_count(dst_conn, d, k, timeout=10), produced, timeout=CATCH_UP_S
                )
                f.update(
                    mirrormaker.replica_check(f"{kind} window {i}", (src_conn, src), (dst_conn, dst), exactly_once)
                )
                windows[(kind, rate)].append(f)
                log(f"  mm2 {kind} @ {rate}/s: {f}")
                if kind == "mm2_eos":  # the gateway's window next, on its own topic, while MM2 idles
                    f, src, dst = gateway_window(admin, home, ends, i, rate, seconds)
                    f.update(mirrormaker.replica_check(f"streamrep window {i}", (src_conn, src), (dst_conn, dst), True))
                    windows[("streamrep", rate)].append(f)
                    log(f"  mm2 streamrep @ {rate}/s: {f}")
        finally:
            if mm.proc is not None:
                mm.proc.stop()


def bench_mm2(
    count: int,
    seconds: float,
    repeats: int,
    rates: tuple[int, ...] = MM2_RATES,
    pair: str = "plain1",
    modes: dict[str, bool] = MM2_MODES,
) -> dict[str, dict]:
    """MirrorMaker 2 (exactly-once, at-least-once) and the in-process gateway on the same two clusters of
    ``pair`` (``SECURE_PAIRS``: single-broker plaintext, or secured three-broker with MM2 given the same
    principal, SASL_SSL settings and replication) and the same data: a backlog of ``count`` x 100 B drained
    by a new process each (start-up included; CPU seconds and peak RSS from the kernel), runs interleaved;
    then the idle CPU per partition of a warmed-up gateway and of MM2 exactly-once, and p50/p99 at each of
    ``rates`` for ``seconds``: each MM2 mode started once and warmed up, a gateway process per window (as
    kafka-secure's), a streamrep window after each MM2 exactly-once one. Every run's replica is read to its
    end and checked record by record against its source (``mirrormaker.replica_check``): loss or duplicates
    fail the case. ``modes``: the MM2 kinds run (``QUICK_MM2_MODES`` leaves at-least-once out). The measures are named ``mm2_gateway_*`` on plain1, ``mm2_secure_gateway_*`` on secure3."""
    reason = mirrormaker.missing_reason()
    if reason:
        raise RuntimeError(reason)
    prefix = "mm2_gateway" if pair == "plain1" else "mm2_secure_gateway"
    replication = 1 if pair == "plain1" else 3
    kinds = ("streamrep", *modes)
    drains: dict[str, list[dict]] = {kind: [] for kind in kinds}
    windows: dict[tuple[str, int], list[dict]] = {(kind, rate): [] for kind in kinds for rate in rates}
    idles: dict[str, list[float]] = {}
    stack: list = []
    home = admin = None
    window_error = None
    try:
        ends = src_conn, dst_conn = start_pair(pair, stack)
        home, admin = kafka_home(*ends)
        admin.create_stream(BULK, defaultpartitions=PARTITIONS, ttl=0)
        bulk = []
        for topic in bulk_topics():  # the backlog spread evenly over them
            admin.create_topic(BULK, topic)
            bulk.append(kafka_topic(admin, BULK, topic))
            kafka_fill(src_conn, bulk[-1], count // TOPICS, 100)
        count = count // TOPICS * TOPICS
        run = 0
        for _ in range(repeats):  # interleaved: a change in load hits every kind alike
            for kind in kinds:
                if STOPPED:
                    break
                run += 1
                if kind == "streamrep":
                    drains[kind].append(streamrep_drain(admin, home, ends, run, count))
                else:
                    mm = mirrormaker.MirrorMaker(src_conn, dst_conn, bulk, modes[kind], Path(home), run, replication)
                    drains[kind].append(mirrormaker.drain_mm2(mm, bulk, count, timeout=600 + count / 500))
                log(f"  mm2 backlog {kind}: {drains[kind][-1]}")
        try:  # the backlog figures stand if a window fails; the window entries then say why
            if TOPICS > 1:
                raise Skipped(f"the latency windows run on one topic, not {TOPICS}")
            timed = rates if PARTITIONS <= WINDOWS_UP_TO else ()
            mm2_windows(admin, home, ends, seconds, repeats, timed, windows, idles, replication, modes)
            if not timed:
                window_error = f"not measured: the latency windows run at {WINDOWS_UP_TO} partitions and fewer"
        except Skipped as err:
            window_error = f"not measured: {err}"
        except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not gate
            window_error = f"error: {type(err).__name__}: {err}"
            log(f"  mm2 windows: {window_error}\n{traceback.format_exc()}")
    finally:
        if admin is not None and home is not None:
            try:
                drop(admin, home)
            except Exception as err:  # noqa: BLE001 - the brokers go next anyway
                log(f"  dropping the run's topics failed: {err}")
        stop_all(stack)

    def drained(kind: str, key: str) -> float | None:
        values = [d[key] for d in drains.get(kind, [])]
        if key == "with_start_s":
            return per_second(count, med(values))
        return med(values)

    def windowed(kind: str, rate: int, key: str) -> float | None:
        return med([f[key] for f in windows.get((kind, rate), []) if f[key] is not None])

    rounds = min(len(drains[kind]) for kind in kinds)
    out = {}
    for measure_name, key in (("backlog_100B", "with_start_s"), ("peak_rss", "peak_rss_mib"), ("cpu_s", "cpu_s")):
        name = f"{prefix}_{measure_name}"
        out[name] = measure(
            name,
            drained("streamrep", key),
            drained("mm2_eos", key),
            why="a kind did not complete its runs",
            runs_done=rounds,
            at_least_once=drained("mm2_alo", key),
            messages=count,
            size=100,
            partitions=PARTITIONS * TOPICS,
            measured="a new process each run (MM2's JVM, the gateway's Python) from its start until the replica "
            "holds the backlog; CPU seconds and peak RSS of that process, from the kernel",
            runs=drains,
        )
    name = f"{prefix}_idle_cpu"
    out[name] = measure(
        name,
        med(idles.get("streamrep", [])),
        med(idles.get("mm2_eos", [])),
        why=window_error if window_error and window_error.startswith("error") else "an idle span did not complete",
        runs_done=min(len(idles.get(kind, [])) for kind in ("streamrep", "mm2_eos")),
        measured=f"CPU ms per second and per partition served, {IDLE_S:.0f} s spans with nothing produced, "
        "of a warmed-up process (the gateway's 0.05 s idle sleep; MM2's consumers' long polls)",
        runs=idles,
    )
    for rate in rates:
        for q in ("p50", "p99", "keepup"):
            name = f"{prefix}_{rate // 1000}k_{q}"
            if name not in GOALS:
                continue
            key = "applied_rate" if q == "keepup" else f"{q}_ms"
            out[name] = entry = measure(
                name,
                windowed("streamrep", rate, key),
                windowed("streamrep", rate, "produced_rate") if q == "keepup" else windowed("mm2_eos", rate, key),
                why="no record reached a replica",
                runs_done=min(len(windows[(kind, rate)]) for kind in kinds),
                at_least_once=windowed("mm2_alo", rate, key),
                applied_rate={kind: windowed(kind, rate, "applied_rate") for kind in kinds},
                rate=rate,
                seconds=seconds,
                runs={kind: windows[(kind, rate)] for kind in kinds},
            )
            produced = min((windowed(kind, rate, "produced_rate") or 0 for kind in kinds), default=0)
            if window_error:
                entry["met"], entry["why"] = None, window_error
            elif produced < 0.9 * rate:  # the goal's load was not applied to every kind: not judged
                entry["met"] = None
                entry["why"] = f"a producer reached only {produced:,.0f} of {rate:,} msg/s (machine load)"
    return out


# -- fan-out ---------------------------------------------------------------------------------------
def bench_fanout(messages: int, repeats: int, replicas: int = 64) -> dict[str, dict]:
    """One in-process gateway pass to 64 replicas against 64 x a pass to one; steady: every replica and
    its topics exist before the clock (scale.bench_fanout warms up)."""
    from scale import bench_fanout as scale_fanout

    rows = {r["replicas"]: r for r in scale_fanout([1, replicas], messages, PARTITIONS, repeats)}
    fan, one = rows[replicas]["seconds"], rows[1]["seconds"]
    return {
        "fanout_64_replicas": measure(
            "fanout_64_replicas", fan, one * replicas, messages=messages, one_replica_s=one, runs=rows[replicas]["runs"]
        )
    }


# -- the report ------------------------------------------------------------------------------------
def table(result: dict) -> str:
    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:,.2f}" if abs(x) < 100 else f"{x:,.0f}"

    lines = [f"{'measure':40} {'value':>10} {'baseline':>10} {'unit':6} {'ratio':>7}  {'goal':12} met"]
    for m in result["measures"]:
        ratio = "-" if m["ratio"] is None else f"{m['ratio']:.2f}x"
        met = {True: "yes", False: "NO", None: f"n/a ({m.get('why', '')})"}[m["met"]]
        lines.append(
            f"{m['name']:40} {fmt(m['value']):>10} {fmt(m['baseline']):>10} {m['unit']:6} {ratio:>7}  "
            f"{m['goal']:12} {met}"
        )
    return "\n".join(lines)


STOPPED: list[bool] = []  # non-empty once a SIGTERM came


def _stop(*_) -> None:
    """SIGTERM: interrupt the current run (its Spark job is stopped on the way out) and report what is done."""
    STOPPED.append(True)
    raise Stopped()


GROWTH = "mm2_gateway_cpu_per_message_growth"


def cpu_growth(merged: list[dict]) -> list[dict]:
    """``GROWTH`` at each count measured beside the default one (``PARTITIONS``): the gateway's CPU per message
    there over its CPU per message at the default count, one topic each, from the runs' ``mm2_gateway_cpu_s``."""
    cpu = {
        e["partitions"]: e
        for e in merged
        if e["name"].startswith("mm2_gateway_cpu_s") and e["topics"] == 1 and e["value"] is not None
    }
    base = cpu.get(PARTITIONS)
    out = []
    for count, entry in sorted(cpu.items()):
        if base is None or count == PARTITIONS:
            continue
        per_message, base_per_message = (e["value"] / e["detail"]["messages"] for e in (entry, base))
        grown = measure(GROWTH, per_message, base_per_message, partitions=count, baseline_partitions=PARTITIONS)
        grown.update(name=f"{GROWTH}_p{count}", partitions=count, topics=1)
        out.append(grown)
    return out


def per_partition_count(counts: list[int], topics: int, as_json: bool) -> int:
    """This benchmark's arguments (without --partitions and --topics) once per partition count, each in a
    process of its own with ``PARTITIONS_ENV`` and ``TOPICS_ENV`` set; their measures merged, named
    ``<name>_p<count>`` beside the default count (``<name>_<topics>x<count>`` with several topics)."""
    bad = [c for c in [*counts, topics] if c < 1]
    if bad:
        print(f"--partitions, --topics: {bad[0]} is not a count (1 or more)", file=sys.stderr)
        return 2
    argv, skip = [], False
    for arg in sys.argv[1:]:  # the arguments of each count's run: all but --partitions, --topics and their values
        if arg in ("--partitions", "--topics"):
            skip = True
        elif skip and arg.lstrip("-").isdigit():
            continue
        else:
            skip = False
            argv.append(arg)
    merged: list[dict] = []
    loads: list[list[float]] = []
    running: list[subprocess.Popen] = []
    # A SIGTERM stops the count's run, which still reports (its own SIGTERM handling), and no count after it.
    signal.signal(signal.SIGTERM, lambda *_: (STOPPED.append(True), [p.terminate() for p in running]))
    for count in counts:
        if STOPPED:
            break
        log(f"--- {count} partitions")
        child = subprocess.Popen(
            [sys.executable, __file__, *[a for a in argv if a != "--json"], "--json"],
            env={**os.environ, PARTITIONS_ENV: str(count), TOPICS_ENV: str(topics)},
            stdout=subprocess.PIPE,
            text=True,
        )
        running[:] = [child]
        out, _ = child.communicate()
        if child.returncode != 0:
            print(f"the run at {count} partitions failed with exit status {child.returncode}", file=sys.stderr)
            return child.returncode
        result = json.loads(out)
        loads += [result["load_average_start"], result["load_average_end"]]
        for entry in result["measures"]:
            if entry["name"] == GROWTH or entry.get("why") == "not run (--only)":  # GROWTH: across counts, below
                continue
            if topics > 1:
                entry["name"] = f"{entry['name']}_{topics}x{count}"
            elif count != PARTITIONS:
                entry["name"] = f"{entry['name']}_p{count}"
            entry["partitions"], entry["topics"] = count, topics
            merged.append(entry)
    merged += cpu_growth(merged)
    result = {"measures": merged, "partitions": counts, "topics": topics, "load_averages": loads}
    print(json.dumps(result, indent=2) if as_json else table(result))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every measure on a tenth of the data (minutes)")
    parser.add_argument("--json", action="store_true", help='print one JSON object {"measures": [...]}')
    parser.add_argument("--no-kafka", action="store_true", help="skip the Kafka measures (no broker started)")
    parser.add_argument(
        "--bootstrap",
        help="use this Kafka cluster instead of starting a broker (the kafka case; "
        "kafka-secure always starts its own clusters)",
    )
    parser.add_argument("--only", nargs="+", choices=CASES, help="run only these cases")
    parser.add_argument("--repeats", type=int, default=3, help="runs per figure (the median is kept; >= 3)")
    parser.add_argument(
        "--partitions",
        type=int,
        nargs="+",
        help=f"partitions of every measure's streams (default {PARTITIONS}): each count runs in a process of "
        "its own, and a count other than the default suffixes its measures' names with _p<count>",
    )
    parser.add_argument(
        "--topics",
        type=int,
        default=1,
        help="topics of the mm2 case's backlog stream, each of every --partitions count (default 1): 64 with "
        "--partitions 16 is the 64 x 16 shape; its measures are named <name>_<topics>x<partitions>, and the "
        "latency windows, which run on one topic, are not measured",
    )
    args = parser.parse_args()
    if (args.partitions or args.topics != 1) and PARTITIONS_ENV not in os.environ:
        return per_partition_count(args.partitions or [PARTITIONS], args.topics, args.json)
    # A SIGTERM ends the run through the finally blocks: Spark jobs and the broker are stopped.
    signal.signal(signal.SIGTERM, _stop)
    scale = 10 if args.quick else 1
    messages, backlog, fanout = 1_000_000 // scale, 500_000 // scale, 20_000 // scale
    seconds = 5.0 if args.quick else 20.0  # a steady-rate window; the rates themselves are the goals'
    repeats = max(3, args.repeats)
    mm2_modes = QUICK_MM2_MODES if args.quick else MM2_MODES
    # The Spark apps (driver and executors) act as the identity that owns the streams.
    os.environ["STREAMREP_USER"] = IDENTITY.user
    load = os.getloadavg()
    found: dict[str, dict] = {}
    why: dict[str, str] = {}
    cases = args.only or CASES
    for case in CASES:
        if case not in cases:
            why[case] = "not run (--only)"
            continue
        if STOPPED:
            why[case] = "not run: the benchmark was stopped (SIGTERM)"
            continue
        if case in KAFKA_CASES and args.no_kafka:
            why[case] = "skipped: --no-kafka"
            continue
        log(f"{case} (load average {os.getloadavg()[0]:.2f})")
        broker = None
        try:
            if case == "continuous":
                found.update(bench_continuous([5000, 50000], seconds, repeats))
            elif case == "kafka":
                bootstrap = args.bootstrap
                if bootstrap is None:
                    broker = start_broker()
                    bootstrap = broker.bootstrap
                found.update(bench_kafka(bootstrap, seconds, repeats))
            elif case == "kafka-secure":
                found.update(bench_kafka_secure(messages, seconds, repeats))
            elif case == "mm2":
                found.update(bench_mm2(messages, seconds, repeats, modes=mm2_modes))
            elif case == "mm2-secure":
                found.update(bench_mm2(messages, seconds, repeats, MM2_SECURE_RATES, "secure3", mm2_modes))
            elif case == "copy":
                found.update(bench_copy(messages, repeats))
            elif case == "memory":
                found.update(bench_memory(backlog, repeats))
            else:
                found.update(bench_fanout(fanout, repeats))
        except (Stopped, Terminated):
            STOPPED.append(True)
            why[case] = "stopped (SIGTERM) during this case"
        except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not gate
            why[case] = f"error: {type(err).__name__}: {err}"
            log(f"benchmark error in {case}: {type(err).__name__}: {err}\n{traceback.format_exc()}")
        finally:
            if broker is not None:
                stop_broker(broker)
    result = assemble(found, why)
    result.update(
        load_average_start=list(load), load_average_end=list(os.getloadavg()), quick=args.quick, repeats=repeats
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"load average {load[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end; medians of {repeats} "
            f"interleaved runs; ratios against a baseline measured in the same run"
        )
        print(table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
