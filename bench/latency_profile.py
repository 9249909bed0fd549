"""Where a replicated message's milliseconds go: a bench-side profiler of the in-process gateway on Kafka.

``profiled_gateway_loop`` runs ``benchlib.gateway_loop``'s gateway with timers wrapped around the
parts of a pass (nothing in ``plugins/`` changes): the heartbeat, the assignment, each partition's
progress, read and apply, and inside the apply the transactional producer's init, the flushes, the
commit and the wait until the commit is readable; then the lag sampler and the idle sleep. It also
records each replicated message's age (now - its produce timestamp) when its read returned, when its
commit returned, and when its apply returned (readable). ``summary`` turns the records into a table.
Used by ``kafka_replication.py --only latency --profile``.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections import defaultdict

PARTS = [
    # (label, module, owner, attribute): timed on every call, nested calls counted in each
    ("pass (run_once)", "streamrep.replication.gateway", "Gateway", "run_once"),
    ("  heartbeat (catalog write)", "streamrep.replication.gateway", "Gateway", "heartbeat"),
    ("  assignment", "streamrep.replication.gateway", "Gateway", "assignment"),
    ("    active flows (catalogs)", "streamrep.replication.gateway", "Gateway", "active_flows"),
    ("    heartbeats read", "streamrep.replication.gateway", "Gateway", "heartbeats"),
    ("    topics (metadata), per source", "streamrep.store.kafka.store", "KafkaStore", "topics"),
    ("    cursor sync", "streamrep.replication.cursors", "CursorSync", "maybe_sync"),
    ("  per round: read (read_spans + offsets)", "streamrep.replication.gateway", "Gateway", "_read_due"),
    ("    read_span", "streamrep.store.kafka.store", "KafkaStore", "read_span"),
    ("  per round: apply_reads", "streamrep.replication.gateway", "Gateway", "_apply_reads"),
    ("    store.apply (one transaction)", "streamrep.store.kafka.store", "KafkaStore", "apply"),
    ("      marks (fold catch-up)", "streamrep.store.kafka.store", "KafkaStore", "marks"),
    (
        "      producer (cached; init_transactions when new)",
        "streamrep.store.kafka.transactions",
        "Transactions",
        "producer",
    ),
    ("      flush (messages, then internal records)", "streamrep.store.kafka.store", "KafkaStore", "_flush"),
    ("      commit_transaction", "streamrep.store.kafka.transactions", "Transactions", "_commit"),
    (
        "      await readable (LSO past the marks)",
        "streamrep.store.kafka.transactions",
        "Transactions",
        "_await_visible",
    ),
    ("    retain", "streamrep.store.base", "Store", "retain"),
    ("  record_states", "streamrep.replication.gateway", "Gateway", "record_states"),
    ("  lag sampler (after_pass)", "streamrep.replication.lag", "LagRecorder", "after_pass"),
    ("  offsets (watermarks, every caller)", "streamrep.store.kafka.store", "KafkaStore", "offsets"),
    ("  catalog_update (any)", "streamrep.store.kafka.store", "KafkaStore", "catalog_update"),
]


def install(calls: dict, ages: dict) -> None:
    import importlib

    for label, module, owner, attr in PARTS:
        cls = getattr(importlib.import_module(module), owner)
        original = getattr(cls, attr)
        setattr(cls, attr, _timed(original, calls[label]))
    store_mod = importlib.import_module("streamrep.store.kafka.store")
    txn_mod = importlib.import_module("streamrep.store.kafka.transactions")
    last_commit = [0.0]
    read_span = store_mod.KafkaStore.read_span
    apply = store_mod.KafkaStore.apply
    commit = txn_mod.Transactions._commit

    @functools.wraps(read_span)
    def read_span_aged(self, *args, **kwargs):
        out = read_span(self, *args, **kwargs)
        now = time.time() * 1000
        ages["read"].extend(now - m.timestamp for m in out[0])
        return out

    @functools.wraps(commit)
    def commit_timed(self, producer):
        commit(self, producer)
        last_commit[0] = time.time() * 1000

    @functools.wraps(apply)
    def apply_aged(self, stream, topic, partition, messages, *args, **kwargs):
        out = apply(self, stream, topic, partition, messages, *args, **kwargs)
        now = time.time() * 1000
        ages["committed"].extend(last_commit[0] - m.timestamp for m in messages)
        ages["readable (apply returned)"].extend(now - m.timestamp for m in messages)
        return out

    store_mod.KafkaStore.read_span = read_span_aged
    store_mod.KafkaStore.apply = apply_aged
    txn_mod.Transactions._commit = commit_timed


def _timed(fn, sink: list):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t, wall = time.perf_counter(), time.time()
        try:
            return fn(*args, **kwargs)
        finally:
            sink.append((wall, (time.perf_counter() - t) * 1000))

    return wrapper


def profiled_gateway_loop(home: str, seconds: float, interval: float, out: str) -> None:
    """``benchlib.gateway_loop`` with the timers installed; the records go to ``out`` (JSON) at the end."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    calls: dict = defaultdict(list)
    ages: dict = defaultdict(list)
    install(calls, ages)
    import streamrep.replication.gateway_passes as gw

    idle: list[float] = []
    sleep = time.sleep

    class _Time:  # the gateway module's idle sleep, timed (every other use of time passes through)
        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(s):
            idle.append((time.time(), s * 1000))
            sleep(s)

    gw.time = _Time()
    from benchlib import gateway_loop

    started = time.perf_counter()
    gateway_loop(home, seconds, interval)
    wall = (time.perf_counter() - started) * 1000
    calls["idle sleep"] = idle
    with open(out, "w") as f:
        json.dump({"wall_ms": wall, "calls": calls, "ages": ages}, f)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else float("nan")


def summary(
    path: str, window: tuple[float, float], reader_ages: list[float], source_ages: list[float] | None = None
) -> str:
    """The calls that started within ``window`` (``time.time()`` bounds: while the producer ran)."""
    with open(path) as f:
        data = json.load(f)
    wall = (window[1] - window[0]) * 1000
    calls = {k: [d for t, d in v if window[0] <= t < window[1]] for k, v in data["calls"].items()}
    lines = [
        f"while the producer ran: {wall / 1000:.1f} s",
        "",
        "| part | calls | median ms | p99 ms | total s | share of wall |",
    ]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for label in [p[0] for p in PARTS] + ["idle sleep"]:
        values = calls.get(label, [])
        if not values:
            continue
        lines.append(
            f"| {label} | {len(values)} | {statistics.median(values):.1f} | {_pct(values, 0.99):.1f} | "
            f"{sum(values) / 1000:.2f} | {sum(values) / wall:.0%} |"
        )
    lines += ["", "| message age at | p50 ms | p99 ms | messages |", "| --- | --- | --- | --- |"]
    stages = []
    if source_ages is not None:
        stages.append(("readable at the source (plain consumer)", source_ages))
    stages += [(k, data["ages"].get(k, [])) for k in ("read", "committed", "readable (apply returned)")]
    stages.append(("read at the replica (read_committed reader)", reader_ages))
    for name, values in stages:
        if values:
            lines.append(f"| {name} | {_pct(values, 0.5):.0f} | {_pct(values, 0.99):.0f} | {len(values)} |")
    return "\n".join(lines)
