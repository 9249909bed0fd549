"""The cost of a cursor sync pass (``replication/cursors.py``), on embedded and Kafka clusters.

A source stream (one topic, ``--partitions`` partitions, 2,000 messages) replicated to a replica;
``--groups`` consumer groups have committed cursors on the source. Measured, per pass over every
group and partition (``sync_cursors``, what a gateway runs every CURSOR_SYNC_SECONDS for its share):

* **moved**: every group's cursors moved at the source since the last pass (a catalog record and a
  commit on the replica per group);
* **steady**: nothing moved (the common case): reads only.

Baseline, in the same run: ``translate_cursors`` of every group (the existing read-only
translation, no commit), as a ratio. Kafka uses one broker started here with
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
from pathlib import Path

from streamrep.client import Clusters, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.replication.cursors import sync_cursors
from streamrep.replication.gateway import Gateway
from streamrep.replication.translate import translate_cursors

REPO = Path(__file__).resolve().parents[1]
SF, NY = "/mapr/sf/s", "/mapr/ny/s"
MESSAGES = 2000


def _kafka_local():
    spec = importlib.util.spec_from_file_location("kafka_local", REPO / "scripts" / "kafka_local.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["kafka_local"] = module
    spec.loader.exec_module(module)
    return module


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = measure("embedded", None, args.groups, args.partitions)
    if not args.no_kafka:
        broker = None
        bootstrap = args.bootstrap
        kafka_local = _kafka_local()
        try:
            if bootstrap is None:
                port, controller = kafka_local.free_ports(2)
                broker = kafka_local.Broker("cbench", port, controller, Path(tempfile.mkdtemp(prefix="cbench-")))
                kafka_local.start(broker, die_with_parent=True)
                bootstrap = broker.bootstrap
            results += measure("kafka", bootstrap, args.groups, args.partitions)
        finally:
            if broker is not None:
                kafka_local.stop(broker, timeout=30)
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


if __name__ == "__main__":
    sys.exit(main())
