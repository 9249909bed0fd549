"""Exactly-once on a wide stream (``WIDE`` partitions) under the faults that matter to a gateway whose
apply transactions span many partitions at once, with real processes and real signals:

- a gateway SIGKILLed while one of its apply transactions is open, its records written;
- a gateway frozen (SIGSTOP) past its heartbeat while its share moves to another, then resumed
  (SIGCONT): its commit is refused, and it goes on with its new share;
- gateways whose shares change (one joins, one is killed, one comes back) while others apply and a
  producer writes;
- the broker restarted while a takeover fences the frozen gateway's transactions.

Each counts every replica message: 0 lost, 0 duplicated, in source order (``assert_exact_replica``).
``STREAMREP_TEST_SEED=<seed>`` replays the same moments.
"""

from __future__ import annotations

import os
import random
import signal
import textwrap
import threading
import time

import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py
import pytest
from test_kafka_faults import (  # tests/kafka is on sys.path, as for every module of this folder
    NY,
    SEED,
    SF,
    applied,
    assert_exact_replica,
    committed,
    produce_backlog,
    replicate,
)

from integration.replication_helpers import GATEWAY_CHILD, Child, clean_env, kill_all, wait_progressing, wait_until
from streamrep.client import StreamAdmin
from streamrep.errors import Unavailable
from streamrep.model.replication import position_key

pytestmark = pytest.mark.backends("kafka")

WIDE = 32  # partitions: a gateway's share spans many of them in every round

# GATEWAY_CHILD that freezes (SIGSTOP to itself) at the first commit of an apply transaction after it
# got SIGUSR2: its records are written, not committed, as in a long GC pause or a hung VM. Says
# FROZEN then; once continued, whether that commit went through; then it runs on as a gateway.
FREEZE_ON_SIGNAL_CHILD = (
    textwrap.dedent("""
    import os, signal
    from confluent_kafka import Producer
    import streamrep.store.kafka.transactions as kafka_transactions

    asked = []
    signal.signal(signal.SIGUSR2, lambda *_: asked.append(True))

    class Freezing(Producer):
        frozen = False

        def __init__(self, config):
            super().__init__(config)
            self.applies = ".apply." in config.get("transactional.id", "")

        def commit_transaction(self, *args):
            if not self.applies or not asked or Freezing.frozen:
                return super().commit_transaction(*args)
            Freezing.frozen = True
            print("FROZEN", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
            try:
                super().commit_transaction(*args)
            except Exception as exc:
                print("ZOMBIE COMMIT FAILED", exc, flush=True)
                raise
            print("ZOMBIE COMMITTED", flush=True)

    kafka_transactions.Producer = Freezing  # the transactional producers are made there
""")
    + GATEWAY_CHILD
)


def freeze(gateway: Child) -> None:
    """Make ``gateway`` (a FREEZE_ON_SIGNAL_CHILD) stop inside its next apply commit."""
    gateway.signal(signal.SIGUSR2)
    try:
        wait_until(lambda: "FROZEN" in gateway.lines, 120, "the gateway to freeze inside a transaction")
    except AssertionError as err:  # it made no apply commit since: say what it was doing
        raise AssertionError(f"{err}; its last output:\n{gateway.stderr()[-3000:]}") from None


def zombie_outcome(gateway: Child) -> str:
    """What a resumed frozen gateway said of its commit."""
    wait_until(lambda: any(line.startswith("ZOMBIE") for line in gateway.lines), 120, "the zombie's commit")
    [outcome] = [line for line in gateway.lines if line.startswith("ZOMBIE")]
    return outcome


def positions(api: StreamAdmin) -> dict[int, int]:
    """Each partition's stored position (source messages applied), as the replica's marks say;
    ``Unavailable`` while the cluster does not answer counts as no progress (-1)."""
    source = api.entry(SF).uuid
    try:
        marks = api.store(api.path(NY)).marks(api.entry(NY).uuid)
    except Unavailable:
        return dict.fromkeys(range(WIDE), -1)
    return {p: marks.get(position_key(source, "t", p), 0) for p in range(WIDE)}


def written_but_uncommitted(api: StreamAdmin, backlog: int) -> bool:
    """Whether the replica's log holds records no read_committed reader sees (an aborted transaction's)."""
    everything = committed(api, NY, "read_uncommitted", partitions=WIDE)
    return sum(len(r) for r in everything.values()) > backlog


@pytest.mark.slow
def test_a_gateway_killed_inside_a_wide_transaction(api, child_env):
    """g1 is SIGKILLed while its apply transaction is open with its records written; the gateway
    started again under the same id fences it and finishes the backlog."""
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 10)
    backlog = 32_000
    replicate(api, backlog, WIDE)
    g1 = Child(FREEZE_ON_SIGNAL_CHILD, ["newyork", "g1", rng.choice([100, 200]), 10], child_env)
    try:
        g1.wait_ready()
        wait_until(lambda: applied(api, WIDE) > 0, 120, "g1 to apply something")
        freeze(g1)
    finally:
        g1.kill9()
    assert applied(api, WIDE) < backlog, f"g1 finished before it was killed (seed {SEED})"
    again = Child(GATEWAY_CHILD, ["newyork", "g1", rng.choice([200, 2000]), 10], child_env)
    try:
        again.wait_ready()
        wait_progressing(lambda: applied(api, WIDE), backlog, 180, "the restarted g1 to replicate everything")
    finally:
        again.kill9()
    assert_exact_replica(api, SF, NY, backlog, WIDE)
    assert written_but_uncommitted(api, backlog), "the killed transaction wrote nothing: it was not inside one"


@pytest.mark.slow
def test_a_frozen_gateway_whose_share_moved_cannot_commit(api, child_env):
    """g1 and g2 share the stream; g1 freezes inside an apply transaction past its heartbeat, so g2
    takes g1's share over. Resumed, g1's commit is refused (fenced); then both apply again, the
    shares dealt anew, and the replica ends exact."""
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 11)
    backlog = 64_000
    replicate(api, backlog, WIDE)
    api.set_gateways("newyork", "g1 g2", cluster="sanfrancisco")
    # 3 s, not 1: on a loaded CI machine a heartbeat can come late by more than a second; g2 then takes
    # g1's lanes too, they fence each other's producers, and g2 may finish g1's share before g1 reaches
    # the commit it is to freeze in.
    expiry = 3.0
    g1 = Child(FREEZE_ON_SIGNAL_CHILD, ["newyork", "g1", rng.choice([200, 500]), expiry], child_env)
    g2 = Child(GATEWAY_CHILD, ["newyork", "g2", rng.choice([200, 500]), expiry], child_env)
    try:
        g1.wait_ready()
        g2.wait_ready()
        before = applied(api, WIDE)
        wait_until(lambda: applied(api, WIDE) > before + 2_000, 120, "both gateways to apply")
        freeze(g1)
        at_freeze = positions(api)
        time.sleep(expiry * 3)  # g1's heartbeat expires: g2 deals itself g1's share
        # Resumed only once g2 applied to every unfinished partition since the freeze: it has then begun a
        # transaction in every lane, g1's among them, which fenced g1. (More messages applied is not enough:
        # under load g2 may still apply only its own share, and g1's commit then rightly goes through.)
        per_partition = backlog // WIDE
        wait_until(
            lambda: all(n > at_freeze[p] or n == per_partition for p, n in positions(api).items()),
            180,
            "g2 to apply g1's share too",
        )
        g1.signal(signal.SIGCONT)
        outcome = zombie_outcome(g1)
        assert outcome.startswith("ZOMBIE COMMIT FAILED") and "fenced" in outcome.lower(), outcome
        wait_progressing(lambda: applied(api, WIDE), backlog, 180, "both gateways to replicate everything")
        assert g1.proc.poll() is None, f"the resumed g1 exited: {g1.stderr()}"
    finally:
        g1.kill9()
        g2.kill9()
    assert_exact_replica(api, SF, NY, backlog, WIDE)
    assert written_but_uncommitted(api, backlog), "the frozen transaction's records are not in the log"


@pytest.mark.slow
def test_shares_change_while_two_gateways_apply(api, child_env):
    """g1 and g2 apply while a producer writes; g3 joins and is killed, g2 is killed and comes back,
    so every share is dealt again several times while transactions are open."""
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 12)
    backlog, live = 16_000, 16_000
    replicate(api, backlog, WIDE)
    api.set_gateways("newyork", "g1 g2 g3", cluster="sanfrancisco")
    expiry = 1.0

    def start(gid: str) -> Child:
        child = Child(GATEWAY_CHILD, ["newyork", gid, rng.choice([200, 500, 2000]), expiry], child_env)
        child.wait_ready()
        return child

    producer = threading.Thread(target=produce_backlog, args=(api, SF, live, WIDE, backlog))
    gateways = {"g1": start("g1"), "g2": start("g2")}
    producer.start()
    try:
        for step in ("g3", "g2", "g3", "g2"):  # start or kill it: its share goes to, or comes from, the others
            time.sleep(rng.uniform(0.5, 2 * expiry))
            if step in gateways:
                gateways.pop(step).kill9()
            else:
                gateways[step] = start(step)
        producer.join(timeout=300)
        assert not producer.is_alive(), "the producer did not finish"
        wait_progressing(lambda: applied(api, WIDE), backlog + live, 180, "the gateways to replicate everything")
    finally:
        kill_all(gateways.values())
        producer.join(timeout=300)
    assert_exact_replica(api, SF, NY, backlog + live, WIDE)


@pytest.mark.slow
@pytest.mark.kafka  # on a broker of its own: no backend parameter to mark it
def test_the_broker_restarts_while_a_takeover_fences(on_own_broker, own_broker, empty_home):
    """g1 freezes inside an apply transaction; g2 starts to take g1's share over (its first pass
    fences g1's transactional ids) and the broker is killed and started again around that fence.
    Resumed, g1 cannot commit; the replica ends exact."""
    api = on_own_broker
    env = clean_env(empty_home.home)
    print(f"STREAMREP_TEST_SEED={SEED}")
    rng = random.Random(SEED + 13)
    backlog = 32_000
    replicate(api, backlog, WIDE)
    api.set_gateways("newyork", "g1 g2", cluster="sanfrancisco")
    expiry = 1.0
    g1 = Child(FREEZE_ON_SIGNAL_CHILD, ["newyork", "g1", rng.choice([100, 200]), expiry], env)
    g2 = None
    try:
        g1.wait_ready()
        wait_until(lambda: applied(api, WIDE) > 0, 120, "g1 to apply something")
        freeze(g1)
        at_freeze = positions(api)
        g2 = Child(GATEWAY_CHILD, ["newyork", "g2", rng.choice([200, 500]), expiry], env)
        g2.wait_ready()
        time.sleep(rng.uniform(expiry, 3 * expiry))  # g2 fences g1's share around now
        api.clusters.close()  # this process's clients would only retry meanwhile
        os.kill(kafka_local.running_pid(own_broker), signal.SIGKILL)
        wait_until(lambda: kafka_local.running_pid(own_broker) is None, 60, "the broker to stop")
        kafka_local.start(own_broker, die_with_parent=True)
        # Resumed only once g2 applied to every partition since the freeze: it has then begun a transaction
        # in every lane, g1's among them, which fenced g1. (Resumed earlier, g1 may commit, rightly: under
        # load g2 had not reached g1's lane yet, and nobody else had applied it.)
        per_partition = backlog // WIDE
        wait_until(
            lambda: all(n > at_freeze[p] or n == per_partition for p, n in positions(api).items()),
            240,
            "g2 to apply to every partition",
        )
        g1.signal(signal.SIGCONT)
        outcome = zombie_outcome(g1)
        assert outcome.startswith("ZOMBIE COMMIT FAILED"), outcome
        wait_progressing(lambda: applied(api, WIDE), backlog, 240, "the gateways to replicate everything")
        assert g2.proc.poll() is None, f"g2 exited: {g2.stderr()}"
    finally:
        g1.kill9()
        if g2 is not None:
            g2.kill9()
    assert_exact_replica(api, SF, NY, backlog, WIDE)
