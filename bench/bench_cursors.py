"""The cost of a cursor sync pass (``replication/cursors.py``), on embedded and Kafka clusters.

A source stream (one topic, ``--partitions`` partitions, 2,000 messages) replicated to a replica;
``--groups`` consumer groups have committed cursors on the source. Measured, per pass over every
group and partition (``sync_cursors``, what a gateway runs every CURSOR_SYNC_SECONDS for its share):

* **moved**: every group's cursors moved at the source since the last pass (a catalog record and a
  commit on the replica per group);
* **steady**: nothing moved (the common case): reads only.

Baseline, in the same run: ``translate_cursors`` of every group (the existing read-only
translation, no commit), as a ratio.

**Translation against applied batches** (``--syncs``): one replica partition gets runs applied one
after another (``RUNS_PER_APPLY`` per apply, a skipped source offset between runs, so no two
merge), and at each checkpoint the median time of one partition's translation (``offset_syncs``
and ``translate_offset``, what a cursor sync does per group and partition) is measured against the
same at the first checkpoint (the ratio), beside the rows kept and the in-memory translation over
the same runs of another source kept unpruned (what the store did before syncs were bounded, up to
``--unpruned-max`` runs). Kafka goes to fewer runs: each
apply is a transaction. Kafka uses one broker started here with
``scripts/kafka_local.py`` unless ``--bootstrap`` names one, or none with ``--no-kafka``.
Always exits 0: it reports, it does not gate.

    .venv/bin/python bench/bench_cursors.py [--groups 1 10] [--partitions 4] [--no-kafka] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from streamrep.client import Clusters, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.model.message import Message
from streamrep.replication.cursors import sync_cursors
from streamrep.replication.gateway import Gateway
from streamrep.replication.translate import translate_cursors, translate_partition

REPO = Path(__file__).resolve().parents[1]
SF, NY = "/mapr/sf/s", "/mapr/ny/s"
MESSAGES = 2000


def _kafka_local():
    spec = importlib.util.spec_from_file_location("kafka_local", REPO / "scripts" / "kafka_local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_local"] = module
    spec.loader.exec_module(module)
    return module


@contextmanager
def kafka(bootstrap: str | None) -> Iterator[str]:
    """``bootstrap``, or a broker started here for the ``with`` (stopped after it)."""
    if bootstrap is not None:
        yield bootstrap
        return
    kafka_local = _kafka_local()
    port, controller = kafka_local.free_ports(2)
    broker = kafka_local.Broker("cbench", port, controller, Path(tempfile.mkdtemp(prefix="cbench-")))
    kafka_local.start(broker, die_with_parent=True)
    try:
        yield broker.bootstrap
    finally:
        kafka_local.stop(broker, timeout=30)


def world(backend: str, bootstrap: str | None, partitions: int) -> tuple[str, StreamAdmin]:
    home = tempfile.mkdtemp(prefix="streamrep-cbench-")
    os.environ["STREAMREP_HOME"] = home
    clusters = Clusters(home)
    run = uuid.uuid4().hex[:8]
    for name in ("sf", "ny"):
        if backend == "kafka":
            clusters.add(name, url=f"kafka://{bootstrap}", settings={"streamrep.namespace": f"cb{run}-{name}"})
        else:
            clusters.add(name)
    admin = StreamAdmin(clusters, Identity(user="bench"))
    admin.create_stream(SF, ttl=0)
    admin.create_topic(SF, "t", partitions)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    with Producer(admin, batch_size=5000) as producer:
        for i in range(MESSAGES):
            producer.send(f"{SF}:t", f"m{i}", key=f"k{i}")
    gateway = Gateway(admin, "ny", "gw")
    gateway.cursor_sync.interval = None
    while gateway.run_once(whole=True):
        pass
    return home, admin


def commit_all(admin: StreamAdmin, groups: list[str], partitions: int, rng: random.Random) -> None:
    sp = admin.path(SF)
    store, uuid_ = admin.store(sp), admin.entry(sp).uuid
    for group in groups:
        store.commit_cursors(
            group, uuid_, "t", {p: rng.randrange(1, MESSAGES // partitions) for p in range(partitions)}
        )


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(backend: str, bootstrap: str | None, group_counts: list[int], partitions: int) -> list[dict]:
    home, admin = world(backend, bootstrap, partitions)
    rng = random.Random(1)
    results = []
    try:
        for count in group_counts:
            groups = [f"g{count}-{i}" for i in range(count)]
            commit_all(admin, groups, partitions, rng)
            sync_cursors(admin, SF, NY)  # warm: clients and catalog folds open, groups of earlier rounds synced
            commit_all(admin, groups, partitions, rng)
            baseline = timed(lambda: [translate_cursors(admin, SF, NY, g) for g in groups])
            moved = timed(lambda: sync_cursors(admin, SF, NY))
            steady = timed(lambda: sync_cursors(admin, SF, NY))
            pairs = len(admin.store(admin.path(SF)).groups(admin.entry(SF).uuid)) * partitions
            for kind, seconds in (("moved", moved), ("steady", steady)):
                results.append(
                    {
                        "backend": backend,
                        "groups": count,
                        "partitions": partitions,
                        "groupPartitions": pairs,
                        "pass": kind,
                        "ms": round(seconds * 1000, 1),
                        "msPerGroupPartition": round(seconds * 1000 / pairs, 2),
                        "baselineMs": round(baseline * 1000, 1),
                        "ratio": round(seconds / baseline, 2) if baseline else None,
                    }
                )
    finally:
        admin.clusters.close()
        shutil.rmtree(home, ignore_errors=True)
    return results


RUNS_PER_APPLY = 10
SOURCE = "p|bench-source|t|0"
UNPRUNED = "p|bench-unpruned|t|0"  # the same runs, never pruned: the cost before syncs were bounded


def median_ms(fn, repeat: int = 31) -> float:
    times = sorted(timed(fn) for _ in range(repeat))
    return times[len(times) // 2] * 1000


def _apply_runs(store, stream: str, source: str, done: int, runs: int) -> list[tuple[int, int, int, int]]:
    """Apply ``runs`` one-message runs of ``source`` after the ``done`` ones; returns their syncs."""
    first_source = 2 * done
    first = store.apply(
        stream,
        "t",
        0,
        [Message(b"x", timestamp=1) for _ in range(runs)],
        {source: first_source + 2 * runs},
        {source: first_source if done else None},
        source,
        syncs=[(i, first_source + 2 * i + 1) for i in range(runs)],
    )
    return [(first_source + 2 * i + 1, 0, first + i, 1) for i in range(runs)]


def measure_syncs(backend: str, bootstrap: str | None, checkpoints: list[int], unpruned_max: int) -> list[dict]:
    """Translation time of one partition at each checkpoint of applied runs (the module's docstring)."""
    home, admin = world(backend, bootstrap, 1)
    store, stream = admin.store(admin.path(NY)), admin.entry(NY).uuid
    full: list[tuple[int, int, int, int]] = []
    unpruned = 0
    results: list[dict] = []
    try:
        for checkpoint in sorted(checkpoints):
            while len(full) < checkpoint:
                runs = min(RUNS_PER_APPLY, checkpoint - len(full))
                if len(full) < min(checkpoint, unpruned_max):  # the same, as the store kept them before: all
                    store.prune_due = lambda *_: False
                    _apply_runs(store, stream, UNPRUNED, len(full), runs)
                    del store.prune_due
                    unpruned = len(full) + runs
                full += _apply_runs(store, stream, SOURCE, len(full), runs)
            cursor = full[len(full) // 3][0]  # an old cursor: the whole row set is read either way
            row = {
                "backend": backend,
                "appliedRuns": checkpoint,
                "rowsKept": len(store.offset_syncs(stream, SOURCE)),
                "translateMs": round(median_ms(lambda: translate_partition(store, stream, SOURCE, "t", 0, cursor)), 3),
                "unprunedMs": None,
            }
            if unpruned == checkpoint:
                ms = median_ms(lambda: translate_partition(store, stream, UNPRUNED, "t", 0, cursor), repeat=5)
                row["unprunedMs"] = round(ms, 3)
            results.append(row)
            print(f"# {row}", file=sys.stderr, flush=True)
    finally:
        admin.clusters.close()
        shutil.rmtree(home, ignore_errors=True)
    baseline = results[0]["translateMs"] if results else 0
    for row in results:
        row["baselineMs"] = baseline
        row["ratio"] = round(row["translateMs"] / baseline, 2) if baseline else None
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--syncs", type=int, nargs="*", help="applied-run checkpoints on embedded (none: skip)")
    parser.add_argument("--unpruned-max", type=int, default=100_000, help="measure unpruned syncs up to this")
    parser.add_argument("--kafka-syncs", type=int, nargs="*", default=[100, 1000], help="the same on Kafka")
    args = parser.parse_args()
    if args.syncs is not None:
        return report_syncs(args)
    results = measure("embedded", None, args.groups, args.partitions)
    if not args.no_kafka:
        with kafka(args.bootstrap) as bootstrap:
            results += measure("kafka", bootstrap, args.groups, args.partitions)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(
        f"{'backend':9} {'groups':>6} {'grp x part':>10} {'pass':7} {'ms':>8} {'ms/grp-part':>11} "
        f"{'translate ms':>12} {'ratio':>6}"
    )
    for r in results:
        print(
            f"{r['backend']:9} {r['groups']:>6} {r['groupPartitions']:>10} {r['pass']:7} {r['ms']:>8} "
            f"{r['msPerGroupPartition']:>11} {r['baselineMs']:>12} {r['ratio']:>6}"
        )
    return 0


def report_syncs(args: argparse.Namespace) -> int:
    checkpoints = args.syncs or [100, 1000, 10_000, 100_000, 1_000_000]
    results = measure_syncs("embedded", None, checkpoints, args.unpruned_max)
    if not args.no_kafka and args.kafka_syncs:
        with kafka(args.bootstrap) as bootstrap:
            results += measure_syncs("kafka", bootstrap, args.kafka_syncs, args.unpruned_max)
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    print(f"{'backend':9} {'runs':>9} {'rows kept':>9} {'translate ms':>12} {'ratio':>6} {'unpruned ms':>11}")
    for r in results:
        print(
            f"{r['backend']:9} {r['appliedRuns']:>9} {r['rowsKept']:>9} {r['translateMs']:>12} {r['ratio']:>6} "
            f"{r['unprunedMs'] if r['unprunedMs'] is not None else '-':>11}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
