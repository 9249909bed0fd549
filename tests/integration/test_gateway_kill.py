"""Gateways and copystream in real child processes, killed with SIGKILL at random moments
while producers keep writing: nothing is lost and nothing is duplicated.

The random seed is printed (shown by pytest on failure); ``STREAMREP_TEST_SEED=<seed>``
replays the same kill moments and batch sizes.
"""

from __future__ import annotations

import os
import random
import subprocess
import textwrap
import threading
import time

import pytest
from replication_helpers import (
    COPY_CHILD,
    GATEWAY_CHILD,
    STREAMREP_EXE,
    Child,
    assert_exactly_once,
    contents,
    count,
    json_rows,
    kill_all,
    user_view,
    wait_progressing,
    wait_until,
)

from streamrep.client import Producer
from streamrep.model.replication import ReplicaState, position_key
from streamrep.replication.assignment import deal
from streamrep.replication.status import replica_status

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("STREAMREP_TEST_SEED", random.randrange(1 << 30)))
SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
BACKLOG = 100_000
PARTITIONS = 4


# Either job, stopped for good inside its first apply transaction: after the batch's messages
# are written and before the replication marks that go with them. Says MIDWAY there.
HANG_CHILD = textwrap.dedent("""
    import sqlite3, sys, time
    from functools import partial
    from streamrep.client import StreamAdmin

    class Hanging(sqlite3.Connection):
        def executemany(self, sql, rows):
            if "INTO marks" in sql:
                print("MIDWAY", flush=True)
                time.sleep(3600)
            return super().executemany(sql, rows)

    sqlite3.connect = partial(sqlite3.connect, factory=Hanging)
    job, batch = sys.argv[1], int(sys.argv[2])
    admin = StreamAdmin()
    print("READY", flush=True)
    if job == "gateway":
        from streamrep.replication.gateway import Gateway
        Gateway(admin, "newyork", "g1").run_once(max_messages=batch)
    else:
        from streamrep.replication.copy import copy_stream
        copy_stream(admin, sys.argv[3], sys.argv[4], batch_size=batch)
    print("FINISHED", flush=True)
""")


class Writer(threading.Thread):
    """A producer that keeps writing acknowledged batches until stopped."""

    def __init__(self, admin, topics: list[str], tag: str, batch: int = 100, pause: float = 0.003):
        super().__init__(daemon=True)
        self.admin, self.topics, self.tag, self.batch, self.pause = admin, topics, tag, batch, pause
        self.values: list[str] = []
        self.halt = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer(self.admin, batch_size=1 << 30)
            i = 0
            while not self.halt.is_set():
                batch = []
                for _ in range(self.batch):
                    value = f"{self.tag}-{i}"
                    producer.send(self.topics[i % len(self.topics)], value)
                    batch.append(value)
                    i += 1
                producer.flush()
                self.values.extend(batch)  # acknowledged
                time.sleep(self.pause)
        except BaseException as err:  # noqa: BLE001 - re-raised by stop()
            self.error = err

    def stop(self) -> list[str]:
        self.halt.set()
        self.join(timeout=60)
        assert self.error is None, self.error
        return self.values


def backlog(admin, topic: str, n: int, tag: str = "backlog") -> list[str]:
    values = [f"{tag}-{i}" for i in range(n)]
    with Producer(admin, batch_size=1 << 30) as producer:
        for value in values:
            producer.send(topic, value)
    return values


def assert_same_partitions(admin, source: str, replica: str) -> None:
    src, dst = contents(admin, source), contents(admin, replica)
    for key, held in src.items():
        assert [user_view(m) for m in dst[key]] == [user_view(m) for m in held], f"{key} (STREAMREP_TEST_SEED={SEED})"


@pytest.fixture
def replicated(api):
    """SF (4 partitions) replicating to NY, agreed on both sides."""
    api.clusters.add("sanfrancisco")
    api.clusters.add("newyork")
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", PARTITIONS)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    return api


def test_gateway_killed_repeatedly_while_producers_write(replicated, child_env):
    api = replicated
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED)
    old = backlog(api, f"{SF}:t", BACKLOG)
    writer = Writer(api, [f"{SF}:t"], "live")
    writer.start()
    progress = []
    for kill in range(rng.randint(3, 5)):
        child = Child(GATEWAY_CHILD, ["newyork", "g1", rng.choice([100, 500, 2000]), 10], child_env)
        child.wait_ready()
        before = count(api, NY)
        if kill == 0:  # the first kill lands in the middle of the backlog
            wait_until(lambda: count(api, NY) > before, 30, "the gateway to apply something")
        time.sleep(rng.uniform(0.01, 0.3))
        produced = len(old) + len(writer.values)
        child.kill9()
        progress.append((count(api, NY), produced))
    assert 0 < progress[0][0] < BACKLOG, f"first kill did not interrupt the backlog: {progress} (seed {SEED})"
    live = writer.stop()

    # the real CLI finishes the job
    already = count(api, NY)
    result = subprocess.run(
        [
            STREAMREP_EXE,
            "gateway",
            "run",
            "-cluster",
            "newyork",
            "-id",
            "g1",
            "-once",
            "true",
            "-engine",
            "local",
            "-json",
        ],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=120,
    )
    [ran] = json_rows((result.returncode, result.stdout, result.stderr))
    assert ran["messages"] == len(old) + len(live) - already
    assert_exactly_once(api, NY, old + live)
    assert_same_partitions(api, SF, NY)
    [row] = replica_status(api, SF)
    assert row.pending_messages == 0 and row.is_uptodate is True, row


def test_copystream_killed_mid_copy_then_rerun(replicated, child_env):
    api = replicated
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 1)
    api.pause_replica(SF, NY)  # the manual steps: registered paused, copied, then resumed
    old = backlog(api, f"{SF}:t", BACKLOG)
    held = []
    for _ in range(rng.randint(2, 3)):
        before = count(api, NY)
        child = Child(COPY_CHILD, [SF, NY, rng.choice([500, 2000, 5000])], child_env)
        child.wait_ready()
        wait_until(lambda: count(api, NY) > before or child.proc.poll() is not None, 30, "the copy to progress")
        time.sleep(rng.uniform(0, 0.08))
        if child.kill9() == 0:
            break  # it finished first: nothing left to interrupt
        held.append(count(api, NY))
        assert replica_status(api, SF)[0].state == ReplicaState.COPY_IN_PROGRESS.value
    assert held and 0 < held[0] < BACKLOG, f"no kill interrupted the copy: {held} (seed {SEED})"

    already = count(api, NY)
    result = subprocess.run(
        [STREAMREP_EXE, "copystream", "-src", SF, "-dst", NY, "-engine", "local", "-json"],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=120,
    )
    [copied] = json_rows((result.returncode, result.stdout, result.stderr))
    assert copied["messages"] == BACKLOG - already
    assert_exactly_once(api, NY, old)
    assert_same_partitions(api, SF, NY)
    assert replica_status(api, SF)[0].state == ReplicaState.PAUSED.value  # copied; not resumed yet

    # the gateways take over from the copy's positions
    api.resume_replica(SF, NY)
    more = backlog(api, f"{SF}:t", 1000, tag="more")
    result = subprocess.run(
        [STREAMREP_EXE, "gateway", "run", "-cluster", "newyork", "-once", "true", "-engine", "local", "-json"],
        capture_output=True,
        text=True,
        env=child_env,
        timeout=120,
    )
    [ran] = json_rows((result.returncode, result.stdout, result.stderr))
    assert ran["messages"] == len(more)
    assert_exactly_once(api, NY, old + more)


def test_two_gateway_processes_one_killed(replicated, child_env):
    api = replicated
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 2)
    api.set_gateways("newyork", "g1 g2", cluster="sanfrancisco")
    api.create_topic(SF, "u", 3)
    old = backlog(api, f"{SF}:t", BACKLOG) + backlog(api, f"{SF}:u", 10_000, tag="u")
    writer = Writer(api, [f"{SF}:t", f"{SF}:u"], "live")
    writer.start()
    expiry = 1.0
    g1 = Child(GATEWAY_CHILD, ["newyork", "g1", rng.choice([200, 1000]), expiry], child_env)
    g2 = Child(GATEWAY_CHILD, ["newyork", "g2", rng.choice([200, 1000]), expiry], child_env)
    try:
        g1.wait_ready()
        g2.wait_ready()
        wait_until(lambda: count(api, NY) > 0, 30, "the gateways to apply something")
        time.sleep(rng.uniform(0.02, 0.3))
        g1.kill9()
        # what g1 left undone in its share: g2 must take it over once g1's heartbeat expires
        src_uuid, marks = api.entry(SF).uuid, api.store(api.path(NY)).marks(api.entry(NY).uuid)
        units = [(t, p) for t, n in (("t", PARTITIONS), ("u", 3)) for p in range(n)]
        g1_share = deal(units, ["g1", "g2"])["g1"]
        store = api.store(api.path(SF))
        left = sum(store.offsets(src_uuid, t, p)[1] - marks.get(position_key(src_uuid, t, p), 0) for t, p in g1_share)
        assert left > 0, f"g1 had finished its share before the kill (seed {SEED})"
        time.sleep(0.3)
        live = writer.stop()
        total = len(old) + len(live)
        wait_progressing(lambda: count(api, NY), total, 60, "g2 to replicate everything")
        time.sleep(0.2)  # g2 keeps running: it must not write anything more
    finally:
        writer.halt.set()
        kill_all([g2, g1])
    assert_exactly_once(api, NY, old + live)
    assert_same_partitions(api, SF, NY)


@pytest.mark.parametrize("job", ["gateway", "copystream"])
def test_kill_inside_the_apply_transaction_commits_nothing(replicated, child_env, job):
    """Messages and the marks that say they were applied are one transaction: a kill between
    the two writes leaves neither, and the rerun applies the batch once."""
    api = replicated
    old = backlog(api, f"{SF}:t", 20_000)
    child = Child(HANG_CHILD, [job, 1000, SF, NY], child_env)
    child.wait_ready()
    deadline = time.monotonic() + 30
    while "MIDWAY" not in child.lines:
        assert child.proc.poll() is None and time.monotonic() < deadline, f"never got midway: {child.lines}"
        time.sleep(0.005)
    child.kill9()
    assert count(api, NY) == 0  # the batch's messages were not committed
    assert api.store(api.path(NY)).marks(api.entry(NY).uuid) == {}

    # restarted under its own id (another id would leave g1's share to g1 until its heartbeat expires)
    argv = (
        ["gateway", "run", "-cluster", "newyork", "-id", "g1", "-once", "true"]
        if job == "gateway"
        else ["copystream", "-src", SF, "-dst", NY]
    )
    result = subprocess.run(
        [STREAMREP_EXE, *argv, "-engine", "local", "-json"], capture_output=True, text=True, env=child_env, timeout=120
    )
    [ran] = json_rows((result.returncode, result.stdout, result.stderr))
    assert ran["messages"] == len(old)
    assert_exactly_once(api, NY, old)
    assert_same_partitions(api, SF, NY)
