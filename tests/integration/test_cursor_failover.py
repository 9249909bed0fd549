"""Consumer failover with replicated cursors (issue 10, section 1), on embedded and Kafka clusters.

A real consumer process reads a source topic as group ``g`` and commits at random points while a
producer writes and a gateway process replicates and syncs cursors; the consumer is killed with
SIGKILL. A new consumer process of the same group on the replica, with no manual step, must get
exactly the messages after the group's last commit at the source: 0 skipped, 0 repeated.

Then the bound for messages that reach the replica by another path (two-way multi-master), as the
"Consumer failover: replicated cursors" section of docs/user-guide.md states it.

The random seed is printed; ``STREAMREP_TEST_SEED=<seed>`` replays the same batch sizes, commit
points and kill moment.
"""

from __future__ import annotations

import os
import random
import textwrap
import threading
import time
from collections import Counter

import pytest
from replication_helpers import Child, contents, origin, produce, wait_until

from streamrep.client import Consumer, Producer
from streamrep.model.replication import position_key
from streamrep.replication.cursors import SYNCED, sync_cursors
from streamrep.replication.gateway import Gateway
from streamrep.replication.translate import translate_cursors

SEED = int(os.environ.get("STREAMREP_TEST_SEED", random.randrange(1 << 30)))
SF = "/mapr/sanfrancisco/orders"
NY = "/mapr/newyork/orders"
MESSAGES = 3000
PARTITIONS = 3

# A consumer of group ``g``: prints every value it gets (GOT v) and each commit once done (COMMITTED).
# ``work``: random poll sizes, commits at random points, until killed. ``drain``: everything there
# is, one commit, then DONE.
CONSUMER_CHILD = textwrap.dedent("""
    import random, sys, time
    from streamrep.client import Consumer

    topic, mode, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    consumer = Consumer(topic, group="g", from_start=True)
    print("READY", flush=True)
    idle = time.monotonic()
    while True:
        batch = consumer.poll(rng.randint(1, 40) if mode == "work" else 1000, timeout=0.1)
        if batch:
            print("\\n".join("GOT " + m.value.decode() for m in batch), flush=True)
            idle = time.monotonic()
        if mode == "work":
            if batch and rng.random() < 0.25:
                consumer.commit()
                print("COMMITTED", flush=True)
            time.sleep(rng.random() * 0.005)
        elif time.monotonic() - idle > 2.0:
            break
    consumer.commit()
    print("DONE", flush=True)
""")

# The in-process gateway pass after pass, with cursor syncs every ``interval`` seconds.
GATEWAY_CHILD = textwrap.dedent("""
    import sys, time
    from streamrep.client import StreamAdmin
    from streamrep.replication.gateway import Gateway

    batch, interval = int(sys.argv[1]), float(sys.argv[2])
    gateway = Gateway(StreamAdmin(), "newyork", "gw1")
    gateway.cursor_sync.interval = interval
    print("READY", flush=True)
    while True:
        if gateway.run_once(max_messages=batch) == 0:
            time.sleep(0.01)
""")


@pytest.fixture
def pair(api, add_cluster):
    """sanfrancisco and newyork on the test's backend; SF:t replicating to NY, agreed both ways."""
    for name in ("sanfrancisco", "newyork"):
        add_cluster(api.clusters, name)
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", PARTITIONS)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    return api


def got(child: Child) -> list[str]:
    return [line[4:] for line in child.lines if line.startswith("GOT ")]


def cursors(admin, path: str) -> dict[int, int]:
    sp = admin.path(path)
    return admin.store(sp).cursors("g", admin.entry(sp).uuid, "t")


def caught_up(admin) -> bool:
    """Every source partition's messages are applied to the replica (its stored positions)."""
    src, dst = admin.entry(SF).uuid, admin.entry(NY).uuid
    source, marks = admin.store(admin.path(SF)), admin.store(admin.path(NY)).marks(dst)
    return all(marks.get(position_key(src, "t", p), -1) >= source.offsets(src, "t", p)[1] for p in range(PARTITIONS))


def synced(admin) -> bool:
    """The replica's cursors of ``g`` are the translation of the group's last source commit."""
    want = {r.partition: r.replica_offset for r in translate_cursors(admin, SF, NY, "g")}
    return bool(want) and cursors(admin, NY) == want


@pytest.mark.backends("embedded", "kafka")
def test_a_killed_consumer_resumes_on_the_replica_with_no_skip_and_no_repeat(pair, child_env, backend):
    admin = pair
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    gateway = Child(GATEWAY_CHILD, [rng.randint(20, 400), 0.2], child_env)
    worker = Child(CONSUMER_CHILD, [f"{SF}:t", "work", rng.randrange(1 << 30)], child_env)
    started = time.monotonic()
    try:
        gateway.wait_ready(60)
        worker.wait_ready(60)
        values = [f"m{i}" for i in range(MESSAGES)]

        def write() -> None:  # in bursts, while the consumer and the gateway work
            with Producer(admin, batch_size=50) as producer:
                for value in values:
                    producer.send(f"{SF}:t", value, key=f"k{rng.randrange(97)}")
                    if rng.random() < 0.02:
                        producer.flush()
                        time.sleep(0.01)

        writer = threading.Thread(target=write)
        writer.start()
        kill_after = rng.randint(MESSAGES // 5, MESSAGES * 4 // 5)
        wait_until(
            lambda: len(got(worker)) >= kill_after and "COMMITTED" in worker.lines,
            120,
            f"the consumer to get {kill_after} messages",
        )
        worker.kill9()
        writer.join(120)
        wait_until(lambda: caught_up(admin), 120, "the replica to catch up")
        wait_until(lambda: synced(admin), 60, "the gateway to sync the last commit")
    finally:
        worker.kill9()
        gateway.kill9()
    committed = cursors(admin, SF)
    print(
        f"{backend}: killed after {len(got(worker))} messages and {worker.lines.count('COMMITTED')} commits; "
        f"source cursors {committed}, replica cursors {cursors(admin, NY)}; "
        f"synced {time.monotonic() - started:.1f}s after the start"
    )

    successor = Child(CONSUMER_CHILD, [f"{NY}:t", "drain", 0], child_env)
    try:
        successor.wait_ready(60)
        wait_until(lambda: "DONE" in successor.lines, 120, "the replica's consumer to drain")
    finally:
        successor.kill9()
    before = {m.value.decode() for (_, p), held in contents(admin, SF).items() for m in held if m.offset < committed[p]}
    after = {m.value.decode() for (_, p), held in contents(admin, SF).items() for m in held if m.offset >= committed[p]}
    assert len(before) + len(after) == MESSAGES and before and after
    resumed = Counter(got(successor))
    skips = after - set(resumed)
    repeats = sum(n for v, n in resumed.items() if v in before) + sum(n - 1 for n in resumed.values() if n > 1)
    assert set(resumed) <= before | after
    print(
        f"{backend}: {len(before)} committed at the source, {len(after)} after; "
        f"the replica's consumer got {sum(resumed.values())}: {len(skips)} skipped, {repeats} repeated"
    )
    assert (len(skips), repeats) == (0, 0), f"skipped {sorted(skips)[:5]}; seed {SEED}"


def consumed_from(admin, path: str, positions: dict[int, int]) -> list:
    consumer = Consumer(f"{path}:t", from_start=True, admin=admin)
    for p, offset in positions.items():
        consumer.seek(p, offset)
    out = []
    while batch := consumer.poll(1000):
        out += batch
    return out


@pytest.mark.backends("embedded", "kafka")
def test_the_bound_for_messages_that_reach_the_replica_by_another_path(pair):
    """Two-way multi-master SF <-> NY, one partition: NY's own messages reach SF, and a group of SF
    fails over to NY. Exactly the user guide's bound: a message of SF's partition that NY holds from
    another path (here: NY produced it) is skipped iff it is at or after the cursor on SF and
    before the translated cursor on NY, repeated iff before the cursor on SF and at or after it on
    NY (never, for two streams); every message NY got from SF is neither."""
    admin = pair
    admin.add_replica(NY, SF)
    admin.add_upstream(SF, NY)
    gateways = {"newyork": Gateway(admin, "newyork", "gw1"), "sanfrancisco": Gateway(admin, "sanfrancisco", "gw2")}
    for g in gateways.values():
        g.cursor_sync.interval = None  # syncs below are explicit

    def one(cluster: str, value: str) -> None:  # produce on the cluster's stream, partition 0
        produce(admin, f"{SF if cluster == 'sanfrancisco' else NY}:t", [value], partition=0)

    # Orders that cross: NY's message n1 is produced before SF's s2 reaches NY, but reaches SF after s2.
    one("sanfrancisco", "s1")
    gateways["newyork"].run_once(whole=True)
    one("newyork", "n1")
    one("sanfrancisco", "s2")
    gateways["sanfrancisco"].run_once(whole=True)  # SF: s1 s2 n1
    gateways["newyork"].run_once(whole=True)  # NY: s1 n1 s2
    one("sanfrancisco", "s3")
    one("newyork", "n2")
    gateways["newyork"].run_once(whole=True)
    gateways["sanfrancisco"].run_once(whole=True)  # SF: s1 s2 n1 s3 n2; NY: s1 n1 s2 n2 s3
    sf_held = contents(admin, SF)[("t", 0)]
    ny_held = contents(admin, NY)[("t", 0)]
    ny_offset = {m.value.decode(): m.offset for m in ny_held}
    sf_uuid = admin.entry(SF).uuid
    store = admin.store(admin.path(SF))
    for cut in range(len(sf_held) + 1):  # the group committed after each message of SF in turn
        cursor = sf_held[cut].offset if cut < len(sf_held) else store.offsets(sf_uuid, "t", 0)[1]
        store.commit_cursors("g", sf_uuid, "t", {0: cursor})
        [row] = [r for r in translate_cursors(admin, SF, NY, "g") if r.partition == 0]
        r = row.replica_offset
        resumed = Counter(m.value.decode() for m in consumed_from(admin, NY, {0: r}))
        before = [m.value.decode() for m in sf_held[:cut]]
        after = [m.value.decode() for m in sf_held[cut:]]
        other_path = {m.value.decode() for m in sf_held if origin(m) is not None}  # NY's own, come back
        skipped = {v for v in after if v not in resumed}
        repeated = {v for v in before if v in resumed}
        assert skipped == {v for v in after if v in other_path and ny_offset[v] < r}, (cut, resumed)
        assert repeated == {v for v in before if v in other_path and ny_offset[v] >= r} == set(), (cut, resumed)
        assert not (skipped | repeated) - other_path  # every message NY got from SF: exact
    # committed after s2: n1 and n2, produced on NY before s3 reached it, come before the cursor there
    store.commit_cursors("g", sf_uuid, "t", {0: sf_held[2].offset})
    assert [m.value.decode() for m in sf_held] == ["s1", "s2", "n1", "s3", "n2"]
    assert [m.value.decode() for m in ny_held] == ["s1", "n1", "s2", "n2", "s3"]
    [row] = [r for r in sync_cursors(admin, SF, NY) if r.partition == 0]
    assert row.action == SYNCED
    assert [m.value.decode() for m in consumed_from(admin, NY, {0: row.replica_offset})] == ["s3"]  # 2 skipped
