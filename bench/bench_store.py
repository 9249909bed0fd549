"""Embedded store benchmark: produce and consume rates against a raw sqlite3 baseline.

For each value size (100 B and 1 KB) it measures, in a fresh temp dir:

* ``raw``: plain ``sqlite3`` with the store's pragmas (WAL, same ``synchronous``), the
  store's table layout, one ``executemany`` per batch in its own ``BEGIN IMMEDIATE``
  transaction, and ``SELECT ... WHERE id >= ? AND id < ? ORDER BY id LIMIT ?`` reads
  of one batch each. Rows are built before the clock starts: this is SQLite's ceiling.
* ``store``: ``EmbeddedStore.append`` / ``EmbeddedStore.read``, one batch per call.
* ``client``: ``Producer.send`` (``batch_size`` = batch) + ``flush``, and
  ``Consumer.poll(max_messages=batch)``.

Every measurement runs ``--repeats`` times (3 by default), each on an empty database,
and the best run is reported. MB/s counts value bytes, with 1 MB = 10**6 bytes.
The goal is a ratio to ``raw`` of 0.70x or better. Always exits 0: this is a benchmark.

Run: ``.venv/bin/python bench/bench_store.py [--json]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable

from streamrep.client import Clusters, Consumer, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.model.message import Message
from streamrep.store.embedded import EmbeddedStore
from streamrep.store.embedded.schema import OFFSET_BITS

GOAL = 0.70
CLUSTER = "bench"
STREAM = f"/mapr/{CLUSTER}/bench"
TOPIC = "t"
LEVELS = ("raw", "store", "client")
OPS = ("produce", "consume")


def make_values(count: int, size: int) -> list[bytes]:
    # A pool of distinct random values, cycled: realistic bytes without count * size of RAM.
    pool = [os.urandom(size) for _ in range(1024)]
    return [pool[i & 1023] for i in range(count)]


def batches(count: int, batch: int) -> list[range]:
    return [range(i, min(i + batch, count)) for i in range(0, count, batch)]


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    """Run ``fn`` with the garbage collector off; return (seconds, what it returned)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result
    finally:
        gc.enable()


def check_count(what: str, got: int, want: int) -> None:
    if got != want:
        raise RuntimeError(f"{what}: read {got} messages, expected {want}")


# -- raw sqlite3 baseline ------------------------------------------------------------
def bench_raw(folder: str, values: list[bytes], batch: int, ts: int) -> dict[str, float]:
    con = sqlite3.connect(os.path.join(folder, "raw.db"), isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(f"PRAGMA synchronous={sync_mode()}")
    con.execute(
        "CREATE TABLE messages(id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, key BLOB, value BLOB, headers TEXT)"
    )
    base = 1 << OFFSET_BITS  # ids like the store's first partition
    chunks = [[(base + i, ts, None, values[i], None) for i in r] for r in batches(len(values), batch)]
    insert = "INSERT INTO messages(id, ts, key, value, headers) VALUES (?, ?, ?, ?, ?)"
    select = "SELECT id, ts, key, value, headers FROM messages WHERE id >= ? AND id < ? ORDER BY id LIMIT ?"

    def produce() -> int:
        for rows in chunks:
            con.execute("BEGIN IMMEDIATE")
            con.executemany(insert, rows)
            con.execute("COMMIT")
        return len(values)

    def consume() -> int:
        n, pos, end = 0, base, base + (1 << OFFSET_BITS)
        while True:
            rows = con.execute(select, (pos, end, batch)).fetchall()
            if not rows:
                return n
            n += len(rows)
            pos = rows[-1][0] + 1

    t_produce, _ = timed(produce)
    t_consume, got = timed(consume)
    check_count("raw consume", got, len(values))
    con.close()
    return {"produce": t_produce, "consume": t_consume}


def sync_mode() -> str:
    # The store's rule, so the baseline always runs with the store's durability.
    return "FULL" if os.environ.get("STREAMREP_SYNC", "").lower() == "full" else "NORMAL"


# -- EmbeddedStore -------------------------------------------------------------------
def bench_store(folder: str, values: list[bytes], batch: int, ts: int) -> dict[str, float]:
    store = EmbeddedStore(CLUSTER, os.path.join(folder, "store.db"))
    stream = "00000000-0000-0000-0000-000000000000"
    store.create_topic(stream, TOPIC, 1)
    chunks = [{0: [Message(values[i], None, (), ts) for i in r]} for r in batches(len(values), batch)]

    def produce() -> int:
        for chunk in chunks:
            store.append(stream, TOPIC, chunk)
        return len(values)

    def consume() -> int:
        n = 0
        while True:
            got = store.read(stream, TOPIC, 0, n, batch)
            if not got:
                return n
            n = got[-1].offset + 1

    t_produce, _ = timed(produce)
    t_consume, got = timed(consume)
    check_count("store consume", got, len(values))
    store.close()
    return {"produce": t_produce, "consume": t_consume}


# -- Producer / Consumer -------------------------------------------------------------
def bench_client(folder: str, values: list[bytes], batch: int, ts: int) -> dict[str, float]:
    clusters = Clusters(os.path.join(folder, "home"))
    clusters.add(CLUSTER)
    admin = StreamAdmin(clusters, Identity("bench"))
    admin.create_stream(STREAM)
    admin.create_topic(STREAM, TOPIC, 1)
    topic = f"{STREAM}:{TOPIC}"

    def produce() -> int:
        producer = Producer(admin, batch_size=batch)
        for value in values:
            producer.send(topic, value)
        producer.flush()
        return len(values)

    def consume() -> int:
        consumer = Consumer(topic, from_start=True, admin=admin)
        n = 0
        while True:
            got = consumer.poll(max_messages=batch)
            if not got:
                return n
            n += len(got)

    t_produce, _ = timed(produce)
    t_consume, got = timed(consume)
    check_count("client consume", got, len(values))
    clusters.close()
    return {"produce": t_produce, "consume": t_consume}


BENCHES = {"raw": bench_raw, "store": bench_store, "client": bench_client}


def run_case(name: str, size: int, count: int, batch: int, repeats: int) -> dict:
    """Best-of-``repeats`` seconds per level and op, each repeat in a fresh temp dir."""
    values = make_values(count, size)
    ts = int(time.time() * 1000)  # now, so the default ttl keeps every message
    best = {level: {op: float("inf") for op in OPS} for level in LEVELS}
    for rep in range(repeats):
        folder = tempfile.mkdtemp(prefix=f"bench-store-{name}-")
        # Levels interleaved, in a rotating order, so drift in the machine hits each alike.
        order = LEVELS[rep % len(LEVELS) :] + LEVELS[: rep % len(LEVELS)]
        try:
            for level in order:
                sub = os.path.join(folder, level)
                os.makedirs(sub)
                for op, seconds in BENCHES[level](sub, values, batch, ts).items():
                    best[level][op] = min(best[level][op], seconds)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    value_bytes = count * size
    result = {"case": name, "value_size": size, "messages": count, "batch": batch, "repeats": repeats, "levels": {}}
    for level in LEVELS:
        result["levels"][level] = {}
        for op in OPS:
            seconds = best[level][op]
            raw_seconds = best["raw"][op]
            result["levels"][level][op] = {
                "seconds": seconds,
                "msgs_per_s": count / seconds,
                "mb_per_s": value_bytes / seconds / 1e6,
                "ratio": raw_seconds / seconds,
            }
    return result


def print_table(results: list[dict], repeats: int) -> None:
    print(f"best of {repeats} runs; MB/s counts value bytes (1 MB = 10^6 B); ratio = rate / raw rate")
    header = f"{'case':<6} {'op':<8} {'level':<7} {'msg/s':>12} {'MB/s':>9} {'ratio':>7}"
    print(header)
    print("-" * len(header))
    for res in results:
        for op in OPS:
            for level in LEVELS:
                r = res["levels"][level][op]
                print(
                    f"{res['case']:<6} {op:<8} {level:<7} {r['msgs_per_s']:>12,.0f} {r['mb_per_s']:>9.1f} "
                    f"{r['ratio']:>6.2f}x"
                )
        print()
    for res in results:
        for op in OPS:
            for level in ("store", "client"):
                r = res["levels"][level][op]
                verdict = "ok" if r["ratio"] >= GOAL else "BELOW GOAL"
                print(
                    f"{op} {res['case']} {level}: {r['msgs_per_s']:,.0f} msg/s {r['mb_per_s']:.1f} MB/s "
                    f"ratio {r['ratio']:.2f}x (goal >= {GOAL:.2f}x) {verdict}"
                )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages-100b", type=int, default=200_000, help="messages in the 100 B case (0 skips it)")
    parser.add_argument("--messages-1k", type=int, default=100_000, help="messages in the 1 KB case (0 skips it)")
    parser.add_argument("--batch", type=int, default=1000, help="messages per append / read / flush / poll")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement; the best is reported")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeats < 1:
        parser.error("--batch and --repeats must be at least 1")

    load = os.getloadavg()[0]
    results = []
    for name, size, count in (("100B", 100, args.messages_100b), ("1KB", 1024, args.messages_1k)):
        if count > 0:
            results.append(run_case(name, size, count, args.batch, args.repeats))
    if args.json:
        json.dump(
            {
                "goal_ratio": GOAL,
                "sqlite": sqlite3.sqlite_version,
                "synchronous": sync_mode(),
                "load_average": load,
                "results": results,
            },
            sys.stdout,
            indent=2,
        )
        print()
    else:
        print(
            f"sqlite {sqlite3.sqlite_version}, journal_mode=WAL, synchronous={sync_mode()}, batch={args.batch}, "
            f"load average at start {load:.2f} (other load makes the numbers noisy)"
        )
        print_table(results, args.repeats)
    return 0


if __name__ == "__main__":
    try:
        main()
    except Exception as err:  # a benchmark reports, it does not fail a build
        print(f"bench_store: error: {type(err).__name__}: {err}", file=sys.stderr)
    sys.exit(0)
