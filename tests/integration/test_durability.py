"""An acknowledged message survives a kill -9 of its producer, and a batch is all or nothing.

Each test starts a real child Python process that produces to an embedded cluster, kills it
with SIGKILL, then reopens the store from the test process and checks what it holds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from streamrep.client import Clusters, Producer, StreamAdmin
from streamrep.model.ace import Identity

STREAM = "/mapr/sanfrancisco/durable"
TOPIC = f"{STREAM}:events"
PARTITIONS = 3
SEED = int(os.environ.get("STREAMREP_TEST_SEED", random.randrange(1 << 30)))

# Produces one message at a time, acknowledged by flush(), and prints "<partition> <offset> <value>"
# for each one once flush() has returned, i.e. once it is acknowledged.
ACK_CHILD = textwrap.dedent("""
    import sys
    from streamrep.client import Producer
    from streamrep.model.paths import parse_topic_path

    topic, tag = sys.argv[1], sys.argv[2]
    producer = Producer()
    tp = parse_topic_path(topic, None)
    print("READY", flush=True)
    for i in range(1_000_000):
        value = f"{tag}-{i}"
        producer.send(tp, value)
        [(partition, (first, nxt))] = producer.flush()[tp].items()
        assert nxt == first + 1
        sys.stdout.write(f"{partition} {first} {value}\\n")
        sys.stdout.flush()
""")

# Buffers one big batch over every partition, prints FLUSHING, flushes it in one append,
# prints DONE. With "hang" the child stops forever inside the append's transaction, after
# the first partition's rows are written and before COMMIT, and says MIDWAY.
BATCH_CHILD = textwrap.dedent("""
    import sqlite3, sys, time
    from functools import partial
    from streamrep.client import Producer
    from streamrep.model.paths import parse_topic_path

    topic, tag, count, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]

    class Hanging(sqlite3.Connection):
        def executemany(self, sql, rows):
            cursor = super().executemany(sql, rows)
            if sql.lstrip().upper().startswith("INSERT INTO MESSAGES"):
                print("MIDWAY", flush=True)
                time.sleep(3600)
            return cursor

    producer = Producer(batch_size=10**9)
    tp = parse_topic_path(topic, None)
    payload = "x" * 100
    for i in range(count):
        producer.send(tp, f"{tag}-{i}-{payload}")
    if mode == "hang":
        sqlite3.connect = partial(sqlite3.connect, factory=Hanging)
        producer.admin.clusters.close()  # reconnect through the hanging connection class
    print("FLUSHING", flush=True)
    acked = producer.flush()
    print("DONE", sum(n - f for f, n in acked[tp].values()), flush=True)
""")


@pytest.fixture
def durable(api):
    api.clusters.add("sanfrancisco")
    api.create_stream(STREAM, ttl=0)
    api.create_topic(STREAM, "events", PARTITIONS)
    api.clusters.close()
    return api


def reopen(home: Path) -> StreamAdmin:
    """A fresh admin over the store, as if after a restart."""
    return StreamAdmin(Clusters(str(home)), Identity("alice"))


def contents(home: Path) -> dict[int, list[tuple[int, str]]]:
    """Every partition's ``(offset, value)`` pairs, read from a freshly opened store."""
    admin = reopen(home)
    try:
        entry = admin.entry(STREAM)
        store = admin.store(admin.path(STREAM))
        result = {}
        for p in range(PARTITIONS):
            start, end = store.offsets(entry.uuid, "events", p)
            assert start == 0
            held = store.read(entry.uuid, "events", p, 0, end + 10)
            result[p] = [(m.offset, m.value.decode()) for m in held]
            assert [o for o, _ in result[p]] == list(range(end)), f"partition {p}: offsets not 0..{end - 1}"
        return result
    finally:
        admin.clusters.close()


class Child:
    """A child process whose stdout lines are collected by a thread (so the pipe never fills)."""

    def __init__(self, script: str, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.lines: list[str] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self.cond:
                if line.endswith("\n"):  # a line cut by the kill was never fully acknowledged
                    self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, predicate, timeout: float = 60) -> None:
        with self.cond:
            ok = self.cond.wait_for(lambda: predicate(self.lines) or self.proc.poll() is not None, timeout)
        if not ok or not predicate(self.lines):
            self.proc.kill()
            raise AssertionError(f"child did not get there; stderr: {self.proc.stderr.read()[-2000:]}")

    def kill9(self) -> list[str]:
        """SIGKILL the child; every line it printed before dying."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        self.proc.stderr.close()
        assert self.proc.returncode in (-signal.SIGKILL, 0), self.proc.returncode  # 0: it had finished
        return list(self.lines)


def test_acknowledged_messages_survive_kill9(durable, streamrep_home, child_env):
    rng = random.Random(SEED)
    acked_all: dict[str, tuple[int, int]] = {}  # value -> (partition, offset)
    for round_no in range(3):
        tag = f"r{round_no}"
        before = contents(streamrep_home)
        child = Child(ACK_CHILD, [TOPIC, tag], child_env)
        target = rng.randint(20, 400)
        child.wait_for(lambda lines: len(lines) > target)
        lines = child.kill9()  # including what it printed after we decided to kill it

        acked = {}
        for line in lines[1:]:  # after READY
            partition, offset, value = line.split(" ")
            acked[value] = (int(partition), int(offset))
        assert len(acked) >= target, f"seed {SEED}"
        acked_all.update(acked)

        after = contents(streamrep_home)
        where: dict[str, list[tuple[int, int]]] = {}
        for p, held in after.items():
            assert held[: len(before[p])] == before[p], f"seed {SEED}: earlier messages changed"
            for offset, value in held:
                where.setdefault(value, []).append((p, offset))
        # Every acknowledged message, of this round and earlier ones, is there once, where acked.
        for value, place in acked_all.items():
            assert where.get(value) == [place], f"seed {SEED}: {value} acked at {place}, held at {where.get(value)}"
        # Nothing else, but possibly the one message whose commit the kill beat the print to.
        new = {v for v in where if v.startswith(f"{tag}-")}
        extra = new - set(acked)
        assert extra <= {f"{tag}-{len(acked)}"}, f"seed {SEED}: unexpected messages {sorted(extra)[:5]}"
        assert all(len(places) == 1 for places in where.values()), f"seed {SEED}: duplicates"
        held_total = sum(len(h) for h in after.values())
        assert held_total >= len(acked_all)
        assert held_total == sum(len(h) for h in before.values()) + len(new)


def batch_outcome(before, after, count: int) -> str:
    """'none' or 'all' after one killed batch append, failing on anything in between."""
    grown = {p: len(after[p]) - len(before[p]) for p in after}
    for p in after:
        assert after[p][: len(before[p])] == before[p], "earlier messages changed"
    total = sum(grown.values())
    assert total in (0, count), f"a partial batch was committed: {grown} of {count}"
    return "none" if total == 0 else "all"


BATCH = 30_000


def test_kill9_inside_the_append_transaction_commits_nothing(durable, streamrep_home, child_env):
    before = contents(streamrep_home)
    child = Child(BATCH_CHILD, [TOPIC, "hang", str(BATCH), "hang"], child_env)
    child.wait_for(lambda lines: "MIDWAY" in lines)
    lines = child.kill9()
    assert not any(line.startswith("DONE") for line in lines)
    assert batch_outcome(before, contents(streamrep_home), BATCH) == "none"
    # The store is writable afterwards: the dead child's lock and its unfinished WAL frames are gone.
    admin = reopen(streamrep_home)
    try:
        Producer(admin).send(TOPIC, "after", partition=0, flush=True)
    finally:
        admin.clusters.close()
    assert contents(streamrep_home)[0][-1] == (len(before[0]), "after")


def test_kill9_during_a_big_batch_leaves_all_or_nothing(durable, streamrep_home, child_env):
    rng = random.Random(SEED)
    for round_no in range(3):
        before = contents(streamrep_home)
        child = Child(BATCH_CHILD, [TOPIC, f"b{round_no}", str(BATCH), "plain"], child_env)
        child.wait_for(lambda lines: "FLUSHING" in lines)
        time.sleep(rng.uniform(0.0, 0.15))
        lines = child.kill9()
        outcome = batch_outcome(before, contents(streamrep_home), BATCH)
        if any(line.startswith("DONE") for line in lines):
            assert outcome == "all", f"seed {SEED}: acknowledged batch lost"
