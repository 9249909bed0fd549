"""Offsets under concurrent producers in several processes (property-based), on embedded and Kafka
clusters.

Hypothesis picks how many processes, how many messages each, the batch size, the partition
count and how messages are spread; real child processes then append to one topic at once.
Whatever the interleaving, each partition's offsets are 0..n-1 with no gap or duplicate,
every message is stored exactly once, each process's messages keep their send order within
a partition, and the offsets a flush acknowledged are where its messages are.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streamrep.client import Clusters, StreamAdmin
from streamrep.model.ace import Identity

STREAM = "/mapr/sanfrancisco/busy"
TOPIC = f"{STREAM}:events"

# Waits for "go" on stdin so that all children start appending at the same moment, then
# sends its messages, flushing every `batch`, and prints one JSON line per flush: the offsets
# acknowledged per partition and the values of that flush in send order.
CHILD = textwrap.dedent("""
    import json, sys
    from streamrep.client import Producer
    from streamrep.model.paths import parse_topic_path

    topic, proc, count, batch, spread, partitions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \\
        int(sys.argv[4]), sys.argv[5], int(sys.argv[6])
    producer = Producer(batch_size=10**9)
    tp = parse_topic_path(topic, None)
    producer.partitions(tp)  # resolve the stream before the start signal
    print("READY", flush=True)
    sys.stdin.readline()
    pending = []
    for i in range(count):
        value = f"{proc}-{i}"
        if spread == "keyed":
            producer.send(tp, value, key=f"key{(i * 7 + proc) % 11}")
        elif spread == "explicit":
            producer.send(tp, value, partition=(i + proc) % partitions)
        else:
            producer.send(tp, value)
        pending.append(value)
        if len(pending) == batch or i == count - 1:
            acked = producer.flush()[tp]
            print(json.dumps({"acked": {p: list(r) for p, r in acked.items()}, "values": pending}), flush=True)
            pending = []
""")


def run_producers(home: Path, procs: int, count: int, batch: int, spread: str, partitions: int) -> list[list[dict]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMREP_")}
    env.update(STREAMREP_HOME=str(home), STREAMREP_USER="alice", STREAMREP_GROUPS="")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, TOPIC, str(n), str(count), str(batch), spread, str(partitions)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in range(procs)
    ]
    try:
        for child in children:
            assert child.stdout.readline() == "READY\n", child.stderr.read()
        for child in children:  # start them together
            child.stdin.write("go\n")
            child.stdin.flush()
        reports = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            reports.append([json.loads(line) for line in out.splitlines()])
        return reports
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


CASES = dict(
    procs=st.integers(2, 4),
    count=st.integers(1, 200),
    batch=st.integers(1, 40),
    spread=st.sampled_from(["roundrobin", "keyed", "explicit"]),
    partitions=st.integers(1, 3),
)
# add_cluster is function-scoped: each example registers a cluster of its own in its own home.
SETTINGS = dict(
    deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@settings(max_examples=5, **SETTINGS)
@example(procs=4, count=150, batch=1, spread="roundrobin", partitions=3)
@given(**CASES)
def test_offsets_under_concurrent_producers(add_cluster, procs, count, batch, spread, partitions):
    check_concurrent_producers(add_cluster, procs, count, batch, spread, partitions)


@pytest.mark.backends("kafka")
@settings(max_examples=1, **SETTINGS)  # each example costs seconds of Kafka set-up
@example(procs=4, count=150, batch=1, spread="roundrobin", partitions=3)
@given(**CASES)
def test_offsets_under_concurrent_producers_on_kafka(add_cluster, procs, count, batch, spread, partitions):
    check_concurrent_producers(add_cluster, procs, count, batch, spread, partitions)


def check_concurrent_producers(add_cluster, procs: int, count: int, batch: int, spread: str, partitions: int) -> None:
    with tempfile.TemporaryDirectory(prefix="streamrep-concurrent-") as tmp:
        home = Path(tmp)
        admin = StreamAdmin(Clusters(str(home)), Identity("alice"))
        add_cluster(admin.clusters, "sanfrancisco")  # on Kafka, a namespace of its own for each example
        admin.create_stream(STREAM, ttl=0)
        admin.create_topic(STREAM, "events", partitions)
        admin.clusters.close()

        reports = run_producers(home, procs, count, batch, spread, partitions)

        entry = admin.entry(STREAM)
        store = admin.store(admin.path(STREAM))
        held: dict[int, list[str]] = {}
        for p in range(partitions):
            start, end = store.offsets(entry.uuid, "events", p)
            messages = store.read(entry.uuid, "events", p, 0, end + 10)
            assert start == 0
            assert [m.offset for m in messages] == list(range(end)), f"partition {p}: gaps or duplicates"
            held[p] = [m.value.decode() for m in messages]
        admin.clusters.close()

        # Every value exactly once, across all partitions.
        expected = {f"{n}-{i}" for n in range(procs) for i in range(count)}
        counts = Counter(v for values in held.values() for v in values)
        assert set(counts) == expected
        assert all(c == 1 for c in counts.values()), [v for v, c in counts.items() if c > 1][:5]

        # Each process's messages keep their send order within a partition.
        for p, values in held.items():
            for n in range(procs):
                mine = [int(v.split("-")[1]) for v in values if v.startswith(f"{n}-")]
                assert mine == sorted(mine), f"process {n} reordered in partition {p}"

        # Each acknowledgement names exactly where that flush's messages are.
        for n, flushes in enumerate(reports):
            assert sum(len(f["values"]) for f in flushes) == count
            for f in flushes:
                stored = []
                for p, (first, nxt) in f["acked"].items():
                    there = held[int(p)][first:nxt]
                    in_order = [v for v in f["values"] if v in set(there)]
                    assert there == in_order, f"process {n}: partition {p} [{first}, {nxt}) holds {there[:5]}"
                    stored.extend(there)
                assert sorted(stored) == sorted(f["values"]), f"process {n}: acked offsets hold other messages"

        if spread == "explicit":
            for p, values in held.items():
                assert all((int(v.split("-")[1]) + int(v.split("-")[0])) % partitions == p for v in values)
