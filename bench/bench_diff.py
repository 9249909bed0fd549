"""diffstreams and diffstreamswithcrc at 1M messages: time, messages/s, bytes read and peak memory.

```
.venv/bin/python bench/bench_diff.py                       # 1M messages, embedded, in-process and Spark
.venv/bin/python bench/bench_diff.py --messages 100000     # a quick look
.venv/bin/python bench/bench_diff.py --kafka --no-embedded --json
```

A source stream of ``--messages`` messages (keys ``k0000001``..., values of ``--size`` bytes, over
``--partitions`` partitions) and its replica, made by copystream (so it holds the same messages,
each with its origin header, at offsets of its own). Every measured run is a child process of its
own, so its peak resident memory (the child and everything below it, sampled every 0.1 s) is its
own; the child times only the work, not its start.

- ``read``: the baseline, read the source once (``Store.read_span`` batches, as the compare reads);
- ``full``, ``crc``: ``diff_streams`` and ``diff_streams_crc`` in-process;
- ``full_spark``, ``crc_spark``: ``spark.submit.submit_diff`` (when it exists), local master.

Each figure is the median of ``--repeats`` runs, the cases interleaved so that machine load hits
all alike; ``ratio`` is a case's time over the baseline's in the same run. ``read_bytes`` are the
keys and values read (both streams, the CRC variant's second pass included) against the source's.
Memory: ``--memory-points`` runs each in-process variant once at smaller sizes too, so the report
gives the growth per message (the compare keeps a record per message). Always exits 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import benchlib  # noqa: E402

from streamrep.client import Clusters, StreamAdmin  # noqa: E402
from streamrep.model.message import Message  # noqa: E402
from streamrep.replication.copy import copy_stream  # noqa: E402
from streamrep.replication.diff import diff_streams, diff_streams_crc  # noqa: E402
from streamrep.replication.diff.scan import READ_BATCH  # noqa: E402

SRC, DST = "/mapr/sf/src", "/mapr/ny/dst"
TOPIC = "t"
FILL_BATCH = 10_000
IN_PROCESS = ("read", "full", "crc")
ON_SPARK = ("full_spark", "crc_spark")


# -- the data ----------------------------------------------------------------------------------
def make_pair(admin: StreamAdmin, messages: int, size: int, partitions: int) -> int:
    """The source (``messages`` of ``size`` bytes, keyed, round-robin over ``partitions``) and its
    replica by copystream; returns the source's key and value bytes."""
    entry = admin.create_stream(SRC, defaultpartitions=partitions, ttl=0)
    admin.create_topic(SRC, TOPIC)
    store = admin.store(admin.path(SRC))
    filler = os.urandom(size)
    total = 0
    stamp = int(time.time() * 1000)
    for first in range(0, messages, FILL_BATCH):
        by_partition: dict[int, list[Message]] = {p: [] for p in range(partitions)}
        for i in range(first, min(first + FILL_BATCH, messages)):
            key = b"k%07d" % i
            value = (b"%010d" % i + filler)[:size]
            by_partition[i % partitions].append(Message(value, key, (), stamp + i, i % partitions))
            total += len(key) + len(value)
        store.append(entry.uuid, TOPIC, {p: batch for p, batch in by_partition.items() if batch})
    benchlib.link(admin, SRC, DST)
    copy_stream(admin, SRC, DST)
    return total


def read_once(admin: StreamAdmin) -> tuple[int, int]:
    """The baseline: every message of the source, read once, as the compare reads a side."""
    entry = admin.entry(SRC)
    store = admin.store(admin.path(SRC))
    messages = size = 0
    for topic, count in store.topics(entry.uuid).items():
        for partition in range(count):
            at, end = store.offsets(entry.uuid, topic, partition)
            while at < end:
                batch, after = store.read_span(entry.uuid, topic, partition, at, min(READ_BATCH, end - at), end)
                for m in batch:
                    messages += 1
                    size += len(m.value or b"") + len(m.key or b"")
                if after <= at:
                    break
                at = after
    return messages, size


# -- one run, in a child process ---------------------------------------------------------------
def child(case: str, home: str) -> dict:
    admin = StreamAdmin(Clusters(home), benchlib.acting(Clusters(home)))
    start = time.perf_counter()
    if case == "read":
        messages, size, same, compared = *read_once(admin), None, None
    elif case in ("full", "crc"):
        result = (diff_streams_crc if case == "crc" else diff_streams)(admin, SRC, DST)
        messages, size, same, compared = result.read_messages, result.read_bytes, result.same, result.compared
    else:
        from streamrep.spark.submit import submit_diff

        outdir = Path(home) / f"ops-{case}-{time.monotonic_ns()}"
        found = submit_diff(SRC, DST, str(outdir), crc=case == "crc_spark", home=home, master="local[2]")
        shutil.rmtree(outdir, ignore_errors=True)
        messages, size, same, compared = found["readMessages"], found["readBytes"], found["same"], found["compared"]
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "read_messages": messages,
        "read_bytes": size,
        "same": same,
        "compared": compared,
        "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def run_child(case: str, home: str) -> dict:
    """One measured run: a child process, its tree's peak RSS sampled from here."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", case, "--home", home],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "STREAMREP_HOME": home, "STREAMREP_USER": benchlib.IDENTITY.user},
    )
    sampler = benchlib.PeakRss(proc.pid, every=0.1)
    sampler.start()
    out, _ = proc.communicate()
    peak = sampler.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"{case} run failed with exit {proc.returncode}")
    found = json.loads(out.strip().splitlines()[-1])
    found["peak_rss"] = max(peak, found["maxrss"])
    print(f"  {case}: {found['seconds']:.1f} s, peak {found['peak_rss'] / 1e6:.0f} MB", file=sys.stderr, flush=True)
    return found


def spark_available() -> str | None:
    """Why the Spark rows cannot run (None when they can)."""
    try:
        from streamrep.spark import submit
    except ImportError as err:
        return f"streamrep.spark.submit cannot be imported: {err}"
    return None if hasattr(submit, "submit_diff") else "streamrep.spark.submit.submit_diff does not exist yet"


# -- a backend ---------------------------------------------------------------------------------
def measure(
    label: str, home: str, admin: StreamAdmin, args: argparse.Namespace, source_bytes: int, cases: tuple[str, ...]
) -> list[dict]:
    print(f"{label}: {args.messages} messages in {home}", file=sys.stderr, flush=True)
    runs: dict[str, list[dict]] = {case: [] for case in cases}
    for _ in range(args.repeats):
        for case in cases:
            runs[case].append(run_child(case, home))
    base = benchlib.median([r["seconds"] for r in runs["read"]])
    entries = []
    for case in cases:
        done = runs[case]
        seconds = benchlib.median([r["seconds"] for r in done])
        read_bytes = done[0]["read_bytes"]
        entries.append(
            {
                "name": f"diff_{case}_{label}",
                "backend": label,
                "messages": args.messages,
                "seconds": round(seconds, 2),
                "messages_per_s": round(args.messages / seconds),
                "baseline_seconds": round(base, 2),
                "ratio": round(seconds / base, 2),
                "read_messages": done[0]["read_messages"],
                "read_bytes": read_bytes,
                "source_bytes": source_bytes,
                "read_over_source": round(read_bytes / source_bytes, 2),
                "peak_rss_mb": round(benchlib.median([r["peak_rss"] for r in done]) / 1e6),
                "same": done[0]["same"],
                "runs": [round(r["seconds"], 2) for r in done],
            }
        )
    return entries


def memory_growth(args: argparse.Namespace, at_full: list[dict]) -> list[dict]:
    """Peak RSS of each in-process variant at the smaller sizes (one run each), and the growth per
    message between the smallest size and ``--messages``."""
    points: dict[str, dict[int, int]] = {c: {} for c in IN_PROCESS}
    for entry in at_full:
        case = entry["name"].split("_")[1]
        if case in points and entry.get("peak_rss_mb"):
            points[case][args.messages] = entry["peak_rss_mb"] * 1_000_000
    for count in args.memory_points:
        home, admin = benchlib.fresh_home(("sf", "ny"))
        try:
            make_pair(admin, count, args.size, args.partitions)
            admin.clusters.close()
            for case in IN_PROCESS:
                points[case][count] = run_child(case, home)["peak_rss"]
        finally:
            shutil.rmtree(home, ignore_errors=True)
    growth = []
    for case, by_count in points.items():
        low, high = min(by_count), max(by_count)
        per = (by_count[high] - by_count[low]) / (high - low) if high > low else None
        growth.append(
            {
                "name": f"diff_{case}_memory",
                "peak_rss_mb": {n: round(b / 1e6) for n, b in sorted(by_count.items())},
                "bytes_per_message": None if per is None else round(per),
            }
        )
    return growth


def embedded(args: argparse.Namespace) -> list[dict]:
    home, admin = benchlib.fresh_home(("sf", "ny"))
    try:
        source_bytes = make_pair(admin, args.messages, args.size, args.partitions)
        admin.clusters.close()
        why = spark_available() if args.spark else "--no-spark"
        cases = IN_PROCESS + (ON_SPARK if why is None else ())
        entries = measure("embedded", home, admin, args, source_bytes, cases)
        entries += [{"name": f"diff_{c}_embedded", "seconds": None, "why": why} for c in ON_SPARK if why]
        if args.memory_points:
            entries += memory_growth(args, entries)
        return entries
    finally:
        shutil.rmtree(home, ignore_errors=True)


def kafka(args: argparse.Namespace) -> list[dict]:
    """The in-process variants between two namespaces of one local broker (one set of brokers at a time)."""
    broker = benchlib.start_broker("kbench-diff-")
    try:
        home, admin = benchlib.kafka_home(broker.bootstrap)
        try:
            source_bytes = make_pair(admin, args.messages, args.size, args.partitions)
            return measure("kafka", home, admin, args, source_bytes, IN_PROCESS)
        finally:
            benchlib.drop(admin, home)
    finally:
        benchlib.stop_broker(broker)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=150, help="value bytes (keys are 8)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-points", type=int, nargs="*", default=[250_000])
    parser.add_argument("--kafka", action="store_true", help="also on a local Kafka broker")
    parser.add_argument("--no-embedded", action="store_true")
    parser.add_argument("--no-spark", dest="spark", action="store_false")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--home", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.home)))
        return
    load = os.getloadavg()
    entries = [] if args.no_embedded else embedded(args)
    if args.kafka:
        entries += kafka(args)
    report = {"measures": entries, "load_start": load, "load_end": os.getloadavg()}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for e in entries:
        if "seconds" in e and e["seconds"] is not None:
            print(
                f"{e['name']:<28} {e['seconds']:>7.1f} s {e['messages_per_s']:>9} msg/s  x{e['ratio']:<5} "
                f"read {e['read_bytes'] / 1e6:.0f} MB ({e['read_over_source']}x source)  peak {e['peak_rss_mb']} MB"
            )
        elif "bytes_per_message" in e:
            print(f"{e['name']:<28} peak MB by messages {e['peak_rss_mb']}, {e['bytes_per_message']} B/message")
        else:
            print(f"{e['name']:<28} not run: {e['why']}")


if __name__ == "__main__":
    main()
