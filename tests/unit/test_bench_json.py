"""bench/bench_replication.py's JSON: one entry per goal of issues 11, 18, 20 and 30, its schema and how ``met`` is decided.

Synthetic figures go through the benchmark's own assembly (no timing here: benchmarks time, tests do not).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
KEYS = {"name", "unit", "value", "baseline", "ratio", "goal", "met"}


@pytest.fixture(scope="module")
def bench():
    """``bench/bench_replication.py`` as a module (the bench scripts import their siblings)."""
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("bench_replication")
    finally:
        sys.path.remove(str(BENCH))


def test_every_goal_has_one_entry_in_order_with_the_schema(bench):
    found = {name: bench.measure(name, 1.0, 2.0) for name in bench.GOALS}
    result = bench.assemble(found, {})
    assert [m["name"] for m in result["measures"]] == list(bench.GOALS)
    assert len(result["measures"]) == 33
    for m in result["measures"]:
        assert set(m) >= KEYS, m
        assert m["ratio"] == 0.5
        assert isinstance(m["met"], bool)
    assert json.loads(json.dumps(result)) == result


def test_goal_texts(bench):
    assert bench.goal_text("spark_gateway_5k_p50_embedded") == "<= 1000 ms"
    assert bench.goal_text("spark_gateway_5k_p99_kafka") == "<= 500 ms"
    assert bench.goal_text("spark_gateway_first_batch_kafka") == "<= 15 s"
    assert bench.goal_text("copystream_spark_100B") == ">= 0.8x"
    assert bench.goal_text("spark_gateway_50k_keepup_embedded") == ">= 0.95x"
    assert bench.goal_text("memory_spark_gateway_backlog") == "<= 1.2x"
    assert bench.goal_text("scaling_copystream_spark_2_vs_1_cores") == ">= 1.6x"
    assert bench.goal_text("fanout_64_replicas") == "<= 0.25x"
    assert bench.goal_text("kafka_secure_gateway_backlog_100B") == ">= 0.8x"
    assert bench.goal_text("kafka_secure_gateway_5k_p99") == "<= 1.2x"
    assert bench.goal_text("mm2_gateway_backlog_100B") == ">= 2x"
    assert bench.goal_text("mm2_gateway_5k_p99") == "<= 0.75x"
    assert bench.goal_text("mm2_gateway_50k_p99") == "<= 500 ms"
    assert bench.goal_text("mm2_gateway_50k_keepup") == ">= 0.95x"
    assert bench.goal_text("mm2_gateway_cpu_per_message_growth") == "<= 1.5x"
    assert bench.goal_text("mm2_secure_gateway_backlog_100B") == ">= 2x"
    assert bench.goal_text("mm2_gateway_peak_rss") == "<= 0.25x"


@pytest.mark.parametrize(
    ("name", "value", "baseline", "met"),
    [
        # latency: the value against the limit; the baseline (the plain loop's latency) is shown, not judged
        ("spark_gateway_5k_p50_embedded", 1000.0, 50.0, True),
        ("spark_gateway_5k_p50_embedded", 1000.5, 2000.0, False),
        ("spark_gateway_5k_p99_kafka", 499.0, None, True),
        ("spark_gateway_5k_p99_kafka", 501.0, 100.0, False),
        ("spark_gateway_first_batch_kafka", 16.0, None, False),
        # throughput ratios: at least
        ("copystream_inprocess_1KB", 80_000.0, 100_000.0, True),
        ("copystream_inprocess_1KB", 79_000.0, 100_000.0, False),
        ("spark_gateway_50k_keepup_embedded", 47_000.0, 50_000.0, False),
        ("scaling_copystream_spark_2_vs_1_cores", 160.0, 100.0, True),
        # memory and fan-out: at most
        ("memory_spark_copystream_backlog", 1200.0, 1000.0, True),
        ("memory_spark_gateway_backlog", 1300.0, 1000.0, False),
        ("fanout_64_replicas", 16.0, 64.0, True),
        ("fanout_64_replicas", 39.0, 64.0, False),
        # issue 18: secured / plaintext, throughput at least 0.8x, latency (lower is better) at most 1.2x
        ("kafka_secure_gateway_backlog_100B", 40_000.0, 50_000.0, True),
        ("kafka_secure_gateway_backlog_100B", 39_000.0, 50_000.0, False),
        ("kafka_secure_gateway_5k_p50", 120.0, 100.0, True),
        ("kafka_secure_gateway_5k_p99", 1300.0, 1000.0, False),
        # issues 20 and 30: streamrep / MirrorMaker 2 exactly-once
        ("mm2_gateway_backlog_100B", 25_000.0, 12_500.0, True),
        ("mm2_gateway_backlog_100B", 24_000.0, 12_500.0, False),
        ("mm2_gateway_5k_p50", 75.0, 100.0, True),
        ("mm2_gateway_5k_p99", 76.0, 100.0, False),
        ("mm2_gateway_50k_p50", 50.0, 100.0, True),
        ("mm2_gateway_50k_p99", 500.0, 300.0, True),
        ("mm2_gateway_50k_p99", 501.0, 3000.0, False),
        ("mm2_gateway_50k_keepup", 47_400.0, 50_000.0, False),
        ("mm2_gateway_idle_cpu", 0.2, 0.1, False),
        ("mm2_gateway_cpu_per_message_growth", 3.0, 2.0, True),
        ("mm2_secure_gateway_5k_p99", 74.0, 100.0, True),
        ("mm2_gateway_peak_rss", 400.0, 1600.0, True),
        ("mm2_gateway_peak_rss", 401.0, 1600.0, False),
        ("mm2_gateway_cpu_s", 20.0, 19.0, False),
    ],
)
def test_met(bench, name, value, baseline, met):
    entry = bench.measure(name, value, baseline)
    assert entry["met"] is met
    assert entry["ratio"] == (value / baseline if baseline else None)
    assert "why" not in entry


def test_a_missing_figure_is_met_null_with_the_reason(bench):
    assert bench.measure("copystream_spark_100B", None, 1000.0)["met"] is None
    no_base = bench.measure("memory_spark_gateway_backlog", 900.0, 0.0, why="baseline run failed")
    assert (no_base["ratio"], no_base["met"], no_base["why"]) == (None, None, "baseline run failed")
    result = bench.assemble(
        {"fanout_64_replicas": bench.measure("fanout_64_replicas", 1.0, 64.0)},
        {"kafka": "skipped: --no-kafka", "copy": "error: RuntimeError: boom"},
    )
    by_name = {m["name"]: m for m in result["measures"]}
    assert by_name["fanout_64_replicas"]["met"] is True
    for name in ("spark_gateway_5k_p50_kafka", "spark_gateway_5k_p99_kafka"):
        assert by_name[name]["met"] is None and by_name[name]["why"] == "skipped: --no-kafka"
    assert by_name["scaling_copystream_spark_2_vs_1_cores"]["why"] == "error: RuntimeError: boom"
    assert by_name["memory_spark_gateway_backlog"]["why"] == "not measured"
    assert by_name["kafka_secure_gateway_5k_p50"]["why"] == "not measured"  # its own case, not "kafka"
    assert by_name["mm2_gateway_5k_p50"]["why"] == "not measured"  # nor are the MirrorMaker 2 ones
    secured = bench.assemble({}, {"mm2-secure": "not run (--only)"})["measures"]
    assert {m["why"] for m in secured if m["name"].startswith("mm2_secure_")} == {"not run (--only)"}
    assert all(set(m) >= KEYS for m in result["measures"])


def test_cpu_per_message_growth_is_each_count_over_the_default(bench):
    def cpu(partitions: int, seconds: float | None, topics: int = 1) -> dict:
        entry = bench.measure("mm2_gateway_cpu_s", seconds, 10.0, messages=100_000)
        entry.update(partitions=partitions, topics=topics)
        return entry

    merged = [cpu(bench.PARTITIONS, 2.0), cpu(256, 2.4), cpu(1024, 3.2), cpu(16, 9.0, topics=64), cpu(64, None)]
    grown = {e["name"]: e for e in bench.cpu_growth(merged)}
    assert set(grown) == {f"{bench.GROWTH}_p256", f"{bench.GROWTH}_p1024"}  # the failed and the 64 x 16 runs not
    assert grown[f"{bench.GROWTH}_p256"]["ratio"] == pytest.approx(1.2)
    assert grown[f"{bench.GROWTH}_p256"]["met"] is True
    assert grown[f"{bench.GROWTH}_p1024"]["ratio"] == pytest.approx(1.6)
    assert grown[f"{bench.GROWTH}_p1024"]["met"] is False
    assert bench.cpu_growth([cpu(1024, 3.2)]) == []  # no default count to compare with


def test_fewer_than_three_runs_are_shown_but_not_judged(bench):
    partial = bench.measure("copystream_spark_100B", 90_000.0, 100_000.0, runs_done=2)
    assert (partial["value"], partial["ratio"], partial["met"]) == (90_000.0, 0.9, None)
    assert partial["why"].startswith("only 2 of 3 runs")
    assert bench.measure("copystream_spark_100B", 90_000.0, 100_000.0, runs_done=3)["met"] is True


def test_window_figures(bench):
    # 100 messages produced from t=0 to t=990 ms, each readable 200 ms later, and 10 more 5 s late
    pairs = [(200.0, t + 200.0) for t in range(0, 1000, 10)] + [(5000.0, 6000.0)] * 10
    f = bench.window_figures(pairs, produced=110, seconds=1.0, grace_ms=5000.0)
    assert f["p50_ms"] == 200.0
    assert f["p99_ms"] == 5000.0
    assert "lower_bound" not in f
    # the last produce was at 1000 ms (the late ones), readable by 2000 ms: the 100 prompt ones
    assert f["applied_rate"] == 100.0
    assert f["produced_rate"] == 110.0


def test_unread_messages_rank_as_the_slowest(bench):
    pairs = [(100.0, 100.0 + t) for t in range(10)]
    some = bench.window_figures(pairs, produced=100, seconds=1.0, grace_ms=5000.0)
    assert (some["p50_ms"], some["p99_ms"], some["lower_bound"]) == (5000.0, 5000.0, True)
    none = bench.window_figures([], produced=100, seconds=1.0, grace_ms=5000.0)
    assert none["p50_ms"] == 5000.0 and none["applied_rate"] == 0
    assert bench.measure("spark_gateway_5k_p99_embedded", none["p99_ms"], 150.0)["met"] is False
    # read ones slower than the grace: the bound keeps p99 >= p50
    slow = bench.window_figures([(6000.0, 7000.0)] * 60, produced=100, seconds=1.0, grace_ms=5000.0)
    assert (slow["p50_ms"], slow["p99_ms"], slow["lower_bound"]) == (6000.0, 6000.0, True)
    few_late = bench.window_figures(pairs * 10, produced=101, seconds=1.0, grace_ms=5000.0)
    assert few_late["p50_ms"] == 100.0 and few_late["p99_ms"] == 100.0 and "lower_bound" not in few_late


def test_table_shows_every_measure(bench):
    result = bench.assemble(
        {"fanout_64_replicas": bench.measure("fanout_64_replicas", 20.0, 64.0)}, {"kafka": "skipped: --no-kafka"}
    )
    lines = bench.table(result).splitlines()
    assert len(lines) == 1 + len(bench.GOALS)
    assert any(line.startswith("fanout_64_replicas") and "0.31x" in line and "NO" in line for line in lines)
    assert any("skipped: --no-kafka" in line for line in lines)


def test_tree_rss_counts_the_children(bench):
    import benchlib

    alone = benchlib.tree_rss(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"])
    try:
        deadline = 50
        while benchlib.tree_rss(child.pid) < 64 << 20 and deadline:
            subprocess.run(["sleep", "0.1"])
            deadline -= 1
        assert benchlib.tree_rss(os.getpid()) >= alone + (64 << 20) * 0.9
    finally:
        child.kill()
        child.wait()
    assert benchlib.tree_rss(child.pid) == 0
