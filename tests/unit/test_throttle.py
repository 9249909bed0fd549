"""Issue 20 part 5: MapR's ``-throttle`` (back off while the replica's cluster is under load) and
streamrep's ``-maxbytespersec`` (a byte-rate limit per replica, shared by its gateways), on real
embedded clusters and the in-process gateway.

The limit is checked as an upper bound on the rate (bytes written over the time taken, with a
tolerance of the limit's own burst), which a loaded machine cannot break: load only slows a
gateway down."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
import time

import pytest

from integration.replication_helpers import read_next
from streamrep.cli.main import run
from streamrep.errors import InvalidArgument, NotFound
from streamrep.model import network
from streamrep.replication import throttle
from streamrep.replication.gateway import Gateway
from streamrep.replication.setup import autosetup
from streamrep.replication.status import replica_status
from streamrep.replication.throttle import BURST_SECONDS, LOAD_FACTOR, LoadSignal

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
VALUE = b"v" * 1000  # 1,000 bytes a message: the limit counts keys and values


def make_pair(admin, partitions: int, **options):
    admin.create_stream(SF)
    admin.create_topic(SF, "t", partitions)
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY, **options)
    admin.add_upstream(NY, SF)
    return admin


def produce(admin, count: int, partitions: int) -> int:
    from streamrep.client.producer import Producer

    with Producer(admin) as producer:
        for i in range(count):
            producer.send(f"{SF}:t", VALUE, partition=i % partitions)
    return count * len(VALUE)


def replicated(admin) -> int:
    (row,) = replica_status(admin, SF)
    entry = admin.entry(NY)
    store = admin.store(admin.path(NY))
    total = 0
    for topic, count in store.topics(entry.uuid).items():
        for p in range(count):
            first, end = store.offsets(entry.uuid, topic, p)
            total += len(store.read(entry.uuid, topic, p, first, end - first + 1))
    assert row.pending_messages == 0
    return total


# -- the option's values (model/network.py) ------------------------------------------------------
@pytest.mark.parametrize(
    "given, rate",
    [(None, 0), (0, 0), ("0", 0), (1500, 1500), ("1M", 1_000_000), ("10MB/s", 10_000_000), ("2.5k", 2500)],
)
def test_maxbytespersec_values(given, rate):
    assert network.parse_max_bytes_per_sec(given) == rate


@pytest.mark.parametrize(
    "bad", ["nan", float("nan"), "inf", float("inf"), "-1", -5, "1e30", 1e30, "fast", "", True, "0.5", "999", [1]]
)
def test_bad_maxbytespersec_is_one_line(bad):
    with pytest.raises(InvalidArgument, match="invalid maxbytespersec") as raised:
        network.parse_max_bytes_per_sec(bad)
    assert "\n" not in str(raised.value)


# -- carried by replica add, autosetup and the CLI -----------------------------------------------
def test_replica_add_records_and_lists_the_limit(admin):
    make_pair(admin, 1, maxbytespersec="10M", throttle=True)
    (row,) = admin.list_replicas(SF)
    assert (row.maxbytespersec, row.throttle) == (10_000_000, True)
    assert admin.entry(SF).replicas[0].maxbytespersec == 10_000_000


def test_autosetup_gives_both_links_the_limit_and_refuses_a_bad_one_first(admin):
    admin.create_stream(SF)
    with pytest.raises(InvalidArgument, match="invalid maxbytespersec '-1'"):
        autosetup(admin, SF, NY, maxbytespersec="-1")
    with pytest.raises(NotFound):
        admin.entry(NY)  # nothing created
    done = autosetup(admin, SF, NY, multimaster=True, maxbytespersec="1M")
    assert done.maxbytespersec == 1_000_000
    for source in (SF, NY):
        assert admin.entry(source).replicas[0].maxbytespersec == 1_000_000


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = run(list(argv), out, err, io.StringIO())
    return status, out.getvalue(), err.getvalue()


def test_cli_replica_add_takes_the_limit_and_list_shows_it(admin, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")  # the ``admin`` fixture's user, who owns the streams
    monkeypatch.setenv("STREAMREP_GROUPS", "")
    admin.create_stream(SF)
    admin.create_stream(NY, copymetafrom=SF)
    status, _, err = cli("stream", "replica", "add", "-path", SF, "-replica", NY, "-maxbytespersec", "nan")
    assert (status, err) == (
        1,
        "streamrep: error: invalid maxbytespersec 'nan': bytes a second, 0 (no limit) or 1,000 to 100G\n",
    )
    assert admin.entry(SF).replicas == ()
    status, _, err = cli("stream", "replica", "add", "-path", SF, "-replica", NY, "-maxbytespersec", "10M")
    assert status == 0, err
    listed = json.loads(cli("stream", "replica", "list", "-path", SF, "-json")[1])
    assert listed["data"][0]["maxbytespersec"] == 10_000_000
    status, out, err = cli("stream", "replica", "autosetup", "-path", SF, "-replica", "/mapr/newyork/b", "-json")
    assert status == 0, err
    assert json.loads(out)["data"][0]["maxbytespersec"] == 0  # no limit unless asked


# -- the limit, enforced -------------------------------------------------------------------------
def test_the_limit_bounds_the_bytes_a_gateway_writes(admin):
    limit = 200_000
    make_pair(admin, 2, maxbytespersec=limit)
    sent = produce(admin, 600, 2)  # 600 kB: 3 s at the limit, well under 1 s without it
    gateway = Gateway(admin, "newyork", "gw1")
    began = time.monotonic()
    gateway.run_once(max_messages=100)
    elapsed = time.monotonic() - began
    assert replicated(admin) == 600  # exactly once: every message, none twice
    assert sent <= limit * (elapsed + BURST_SECONDS), f"{sent} bytes in {elapsed:.2f} s"
    assert gateway.pacer.waited > 0


def test_two_gateways_share_one_replicas_limit(admin):
    limit = 200_000
    make_pair(admin, 2, maxbytespersec=limit)
    sent = produce(admin, 600, 2)
    gateways = [Gateway(admin, "newyork", name) for name in ("gw1", "gw2")]
    for gateway in gateways:
        gateway.heartbeat()  # both live before either deals the partitions
    ny = admin.entry(NY).uuid
    for gateway in gateways:
        units = gateway.assignment().units
        assert len(units) == 1  # one partition each
        assert gateway.pacer.parts == {ny: 0.5}
    began = time.monotonic()
    threads = [threading.Thread(target=g.run_once, kwargs={"max_messages": 100}) for g in gateways]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    elapsed = time.monotonic() - began
    assert replicated(admin) == 600
    # each takes half the limit, so together they stay under it (each with its own burst)
    assert sent <= limit * (elapsed + 2 * BURST_SECONDS), f"{sent} bytes in {elapsed:.2f} s"


def test_a_replica_fed_by_one_partition_gets_the_whole_limit_at_its_holder(admin):
    make_pair(admin, 1, maxbytespersec=100_000)
    gateways = [Gateway(admin, "newyork", name) for name in ("gw1", "gw2")]
    for gateway in gateways:
        gateway.heartbeat()
    ny = admin.entry(NY).uuid
    assert [len(g.assignment().units) for g in gateways] == [1, 0]
    assert gateways[0].pacer.parts == {ny: 1.0}


def test_a_spark_task_takes_its_slots_part_of_the_gateways(admin, monkeypatch):
    from streamrep.spark import runtime
    from streamrep.spark.tasks import replicate_slot

    make_pair(admin, 1, maxbytespersec=100_000)
    monkeypatch.setitem(runtime._ADMINS, runtime.resolve_home(admin.clusters.home), admin)
    ny = admin.entry(NY).uuid
    assert list(replicate_slot(admin.clusters.home, "newyork", "spark-gw", [], {}, 2, [0], parts={ny: 0.5})) == []
    gateway = runtime.gateway_for(admin.clusters.home, "newyork", "spark-gw")
    assert gateway.pacer.parts == {ny: 0.25}  # two tasks run at once: each half of the gateway's half


# -- -throttle: the load signal and the back-off -------------------------------------------------
def test_the_load_signal_compares_apply_time_with_its_own_baseline():
    noise = LoadSignal()
    assert noise.observe(0.0001, 1000, 0.0) == 1.0
    assert noise.observe(0.001, 1000, 1.0) < LOAD_FACTOR  # 10x, but within scheduling noise
    signal = LoadSignal()
    now = 0.0
    for _ in range(20):  # 10 ms applies: the baseline
        now += 1
        assert signal.observe(0.010, 1000, now) < LOAD_FACTOR
        assert signal.backoff(0.010, 1.0) == 0
    ratios = []
    for _ in range(10):  # 100 ms applies: under load
        now += 1
        ratios.append(signal.observe(0.100, 1000, now))
    assert ratios[-1] > LOAD_FACTOR
    assert signal.backoff(0.100, ratios[-1]) == pytest.approx(0.100 * (ratios[-1] - 1))
    assert signal.backoff(10.0, 50.0) == throttle.MAX_BACKOFF_SECONDS
    # a bigger batch costs more without being load
    assert signal.observe(0.010 * 3, 2 << 20, now + 1) < ratios[-1]
    # a load that lasts longer than the baseline window becomes the baseline
    for _ in range(int(throttle.BASELINE_SECONDS) + 40):
        now += 1
        ratio = signal.observe(0.100, 1000, now)
    assert ratio < LOAD_FACTOR


class LockHolder(threading.Thread):
    """A competing writer of the replica cluster's SQLite file: holds its write lock ``first``
    seconds, then ``hold`` seconds of every ``every``."""

    def __init__(self, path: str, first: float = 1.0, hold: float = 0.15, every: float = 0.2):
        super().__init__(daemon=True)
        self.path, self.first, self.hold, self.every = path, first, hold, every
        self.halt = threading.Event()
        self.holding = threading.Event()  # set once it first holds the lock

    def run(self) -> None:
        con = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            hold = self.first
            while not self.halt.is_set():
                con.execute("BEGIN IMMEDIATE")
                self.holding.set()
                time.sleep(hold)
                con.execute("COMMIT")
                time.sleep(self.every - self.hold)
                hold = self.hold
        finally:
            con.close()


@pytest.mark.parametrize("throttled", [True, False])
def test_throttle_backs_off_while_the_replica_cluster_is_busy(admin, throttled):
    make_pair(admin, 1, throttle=throttled)
    gateway = Gateway(admin, "newyork", "gw1")
    produce(admin, 150, 1)
    [(unit, flows)] = gateway.assignment().units.items()
    for _ in range(20):  # 20 applies with no competing writer: the baseline
        read = read_next(gateway, unit, flows, 5)
        assert not gateway.apply_reads({unit: (flows, read.messages, read.source_start, read.span)})[unit][1]
    quiet = gateway.pacer.backed_off  # a loaded machine may already count as load: no assertion on it
    holder = LockHolder(admin.clusters.store("newyork").path)
    holder.start()
    try:
        assert holder.holding.wait(60)
        for _ in range(10):  # the first waits for the competing writer (apply is its first write)
            read = read_next(gateway, unit, flows, 5)
            assert not gateway.apply_reads({unit: (flows, read.messages, read.source_start, read.span)})[unit][1]
    finally:
        holder.halt.set()
        holder.join()
    assert replicated(admin) == 150  # exactly once, backed off or not
    busy = gateway.pacer.backed_off - quiet
    if throttled:
        assert busy > quiet, (quiet, busy)
    else:
        assert gateway.pacer.backed_off == 0
