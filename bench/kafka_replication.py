"""Kafka-to-Kafka replication benchmarks, each printed as a ratio to a baseline measured in the same run.

The baseline is a plain confluent-kafka consume-and-produce loop with no transactions: a consumer
reads the source topic's partitions, a producer writes each record to the same partition of a
destination topic, then flushes. No positions, no origins, no exactly-once.

Cases:

* ``throughput``: N messages (``--messages``, 1M by default) of 100 B and of 1 KB, already in the
  source topic, replicated by the in-process gateway (``Gateway.run_once`` until idle) into a fresh
  replica, against the baseline copying them into a fresh topic. Median of ``--repeats`` interleaved
  runs. Goal: 0.80x or better.
* ``latency``: a producer process writes at ``--rate`` messages/s (5k by default) for ``--seconds``;
  a running gateway process (or the baseline loop) replicates; the replica is read as it fills by a
  read_committed consumer, and produce-to-readable latency is the time a record is read minus its
  produce timestamp. Goal at 5k msg/s: p50 under 1 s, p99 under 2 s.

Both sides use one broker (two streamrep namespaces), started here with ``scripts/kafka_local.py``
unless ``--bootstrap`` names one. Run: ``.venv/bin/python bench/kafka_replication.py [--messages N]
[--only throughput|latency] [--json]``. Always exits 0: it reports, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import uuid

from benchlib import PARTITIONS, drop, gateway_loop, kafka_topic, start_broker, stop_broker
from benchlib import kafka_baseline_copy as baseline_copy
from benchlib import kafka_baseline_loop as _baseline_loop
from benchlib import kafka_fill as fill
from benchlib import kafka_home as fresh_home
from benchlib import kafka_produce_steadily as _produce_steadily
from benchlib import kafka_replica_latencies as replica_latencies
from confluent_kafka.admin import AdminClient, NewTopic
from latency_profile import profiled_gateway_loop
from latency_profile import summary as profile_summary

from streamrep.client import StreamAdmin
from streamrep.replication.gateway import Gateway

SOURCE = "/mapr/sf/s"


def new_replica(admin: StreamAdmin, path: str) -> None:
    admin.create_stream(path, copymetafrom=SOURCE)
    admin.add_replica(SOURCE, path)
    admin.add_upstream(path, SOURCE)


def bench_throughput(bootstrap: str, count: int, size: int, repeats: int) -> dict:
    home, admin = fresh_home(bootstrap)
    admin.create_stream(SOURCE, defaultpartitions=PARTITIONS, ttl=0)
    admin.create_topic(SOURCE, "t")
    src = kafka_topic(admin, SOURCE)
    fill(bootstrap, src, count, size)
    kafka_admin = AdminClient({"bootstrap.servers": bootstrap})
    baselines: list[str] = []
    n = [0]

    def base() -> float:
        dst = f"baseline-{uuid.uuid4().hex}"  # outside the stream's topic names
        n[0] += 1
        kafka_admin.create_topics([NewTopic(dst, PARTITIONS)])[dst].result()
        baselines.append(dst)
        time.sleep(0.5)  # leaders elected
        t = time.perf_counter()
        copied = baseline_copy(bootstrap, src, dst, count)
        elapsed = time.perf_counter() - t
        assert copied == count, (copied, count)
        return elapsed

    def ours() -> float:
        path = f"/mapr/ny/r{n[0]}"
        n[0] += 1
        for link in list(admin.entry(SOURCE).replicas):  # the gateway serves only the new replica
            admin.remove_replica(SOURCE, link.path)
        new_replica(admin, path)
        gateway = Gateway(admin, "ny", "bench")
        gateway.heartbeat()
        t = time.perf_counter()
        moved = 0
        while step := gateway.run_once(max_messages=10_000):
            moved += step
        elapsed = time.perf_counter() - t
        assert moved == count, (moved, count)
        return elapsed

    # Interleaved, so a change in machine load hits both sides alike; the median of each is kept.
    times = [(base(), ours()) for _ in range(repeats)]
    b, o = statistics.median(t[0] for t in times), statistics.median(t[1] for t in times)
    drop(admin, home, baselines)
    return {
        "case": f"throughput {size}B",
        "messages": count,
        "baseline_rate": count / b,
        "gateway_rate": count / o,
        "ratio": b / o,
        "runs_s": times,
    }


def bench_latency(
    bootstrap: str, rate: int, seconds: float, size: int = 100, profile: bool = False, by_time: bool = False
) -> dict:
    """The gateway process and the baseline loop, each under the same steady produce rate.

    :param profile: run the gateway with ``latency_profile``'s timers, and read the source too;
        the breakdown is in the result's ``profile`` (text).
    :param by_time: also ``<name>_by_time``: p50 and p99 of the messages produced in each half second
        of the window (where in the window the slow ones are: start-up, or a periodic stall).
    """
    ctx = mp.get_context("spawn")
    result = {"case": f"latency @ {rate}/s", "rate": rate, "seconds": seconds}
    for name in ("baseline", "gateway"):
        home, admin = fresh_home(bootstrap)
        admin.create_stream(SOURCE, defaultpartitions=PARTITIONS, ttl=0)
        admin.create_topic(SOURCE, "t")
        new_replica(admin, "/mapr/ny/s")
        src, dst = kafka_topic(admin, SOURCE), kafka_topic(admin, "/mapr/ny/s")
        trace = os.path.join(home, "profile.json")
        if name == "baseline":
            worker = ctx.Process(target=_baseline_loop, args=(bootstrap, src, dst, seconds + 5))
        elif profile:
            worker = ctx.Process(target=profiled_gateway_loop, args=(home, seconds + 5, 0.05, trace))
        else:
            worker = ctx.Process(target=gateway_loop, args=(home, seconds + 5, 0.05))
        worker.start()
        time.sleep(3.0)  # let the worker start (and the gateway take its share) before the clock
        producer = ctx.Process(target=_produce_steadily, args=(bootstrap, src, rate, seconds, size))
        producer.start()
        window = (time.time(), time.time() + seconds)
        source_ages: list[float] = []
        if profile and name == "gateway":  # how old a message is when the source first serves it
            source_reader = threading.Thread(
                target=lambda: source_ages.extend(replica_latencies(bootstrap, src, time.time() + seconds + 1))
            )
            source_reader.start()
        pairs: list[tuple[float, float]] = []
        lat = replica_latencies(bootstrap, dst, time.time() + seconds + 3, pairs=pairs)
        if by_time:
            result[f"{name}_by_time"] = by_half_second(pairs, window[0] * 1000)
        producer.join()
        worker.join()
        lat.sort()
        result[f"{name}_applied_rate"] = len(lat) / seconds
        result[f"{name}_p50_ms"] = statistics.median(lat) if lat else None
        result[f"{name}_p99_ms"] = lat[max(0, int(len(lat) * 0.99) - 1)] if lat else None
        if profile and name == "gateway":
            source_reader.join()
            result["profile"] = profile_summary(trace, window, lat, source_ages)
        drop(admin, home)
    result["ratio"] = result["gateway_applied_rate"] / max(result["baseline_applied_rate"], 1e-9)
    return result


def by_half_second(pairs: list[tuple[float, float]], start_ms: float) -> list[dict]:
    """``(latency, read time)`` pairs grouped by the half second of the window in which each message
    was produced: its count, p50 and p99 (ms)."""
    slots: dict[int, list[float]] = {}
    for latency, read_at in pairs:
        slots.setdefault(int((read_at - latency - start_ms) // 500), []).append(latency)
    rows = []
    for slot, values in sorted(slots.items()):
        values.sort()
        p99 = values[max(0, int(len(values) * 0.99) - 1)]
        rows.append({"from_s": slot / 2, "n": len(values), "p50_ms": statistics.median(values), "p99_ms": p99})
    return rows


def bench_latency_repeated(
    bootstrap: str, rate: int, seconds: float, repeats: int, profile: bool, by_time: bool = False
) -> dict:
    """``bench_latency`` ``repeats`` times (the baseline and the gateway take turns in each); medians of the runs."""
    runs = []
    for _ in range(repeats):
        runs.append(bench_latency(bootstrap, rate, seconds, profile=profile, by_time=by_time))
        print(
            f"latency run @ {rate}/s: {json.dumps({k: v for k, v in runs[-1].items() if k != 'profile'})}",
            file=sys.stderr,
        )
        if profile:
            print(runs[-1]["profile"], file=sys.stderr)
    result = dict(runs[-1])
    for key in runs[0]:
        if key.endswith(("_ms", "_rate")) and key != "rate" and all(r[key] is not None for r in runs):
            result[key] = statistics.median(r[key] for r in runs)
    result["ratio"] = result["gateway_applied_rate"] / max(result["baseline_applied_rate"], 1e-9)
    result["runs"] = [{k: v for k, v in r.items() if k != "profile"} for r in runs]
    result["load_average"] = os.getloadavg()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per throughput case")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000, help="steady produce rate of the latency case, msg/s")
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the latency case")
    parser.add_argument("--bootstrap", help="use this Kafka cluster instead of starting one")
    parser.add_argument("--rates", type=int, nargs="+", help="latency case at each of these rates (default: --rate)")
    parser.add_argument("--latency-repeats", type=int, default=1, help="latency runs per rate; medians reported")
    parser.add_argument("--profile", action="store_true", help="time the gateway's parts (latency_profile.py)")
    parser.add_argument("--by-time", action="store_true", help="latency per half second of each window")
    parser.add_argument("--only", choices=("throughput", "latency"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    broker = None
    results = []
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            broker = start_broker()
            bootstrap = broker.bootstrap
        if args.only in (None, "throughput"):
            for size in (100, 1000):
                results.append(bench_throughput(bootstrap, args.messages, size, args.repeats))
        if args.only in (None, "latency"):
            for rate in args.rates or [args.rate]:
                results.append(
                    bench_latency_repeated(
                        bootstrap, rate, args.seconds, args.latency_repeats, args.profile, args.by_time
                    )
                )
    except Exception as err:  # noqa: BLE001 - a benchmark reports, it does not gate
        print(f"benchmark error: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        if broker is not None:
            stop_broker(broker)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"load average {os.getloadavg()}; ratios are against the same-run baseline "
        "(a plain consume-and-produce loop, no transactions)"
    )
    for r in results:
        if r["case"].startswith("throughput"):
            print(
                f"{r['case']:16} {r['messages']:>9,} msgs  baseline {r['baseline_rate']:>9,.0f}/s  "
                f"gateway {r['gateway_rate']:>9,.0f}/s  ratio {r['ratio']:.2f}x (goal >= 0.80x)"
            )
        else:
            ms = {k: ("-" if v is None else f"{v:.0f}") for k, v in r.items() if k.endswith("_ms")}
            print(
                f"{r['case']:16} baseline loop: read {r['baseline_applied_rate']:,.0f}/s, "
                f"p50 {ms['baseline_p50_ms']} ms, p99 {ms['baseline_p99_ms']} ms"
            )
            print(
                f"{'':16} gateway: read {r['gateway_applied_rate']:,.0f}/s ratio {r['ratio']:.2f}x, "
                f"p50 {ms['gateway_p50_ms']} ms, p99 {ms['gateway_p99_ms']} ms "
                "(goal at 5k/s: p50 < 1000, p99 < 2000)"
            )
            if "profile" in r:
                print(r["profile"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
