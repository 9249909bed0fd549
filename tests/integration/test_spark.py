"""The Spark side: the ``streamrep`` Python Data Source, copystream and the gateway on Spark.

One SparkSession is shared by the module (starting one costs several seconds). Two tests run
the real apps through ``spark-submit`` (copystream; the gateway killed with kill -9, then
restarted with ``--once``); the rest run the same job functions on the shared session.

Every test has its own STREAMREP_HOME and passes it explicitly (option ``home`` / ``--home``):
Spark's Python workers are reused across tests and keep the environment they started with.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from replication_helpers import alive

from streamrep.client import Producer
from streamrep.errors import Misinstalled
from streamrep.model.message import Message
from streamrep.replication.apply import ORIGIN_HEADER
from streamrep.replication.gateway import HEARTBEAT_KIND, Gateway

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("STREAMREP_TEST_SEED", random.randrange(1 << 30)))
SF, NY = "sanfrancisco", "newyork"
T0 = int(time.time() * 1000) - 3_600_000  # recent: older messages fall to the default TTL


# -- fixtures and helpers ------------------------------------------------------------------
@pytest.fixture
def clusters(api, streamrep_home):
    """The admin API (as alice) over a STREAMREP_HOME with embedded clusters sf and ny."""
    api.clusters.add(SF)
    api.clusters.add(NY)
    return api


def home_of(admin) -> str:
    return admin.clusters.home


def make_stream(admin, path: str, topics: dict[str, int]) -> str:
    admin.create_stream(path, defaultpartitions=max(topics.values()))
    for topic, partitions in topics.items():
        admin.create_topic(path, topic, partitions)
    return path


def link(admin, source: str, replica: str, paused: bool = False) -> None:
    """Make ``replica`` (created from the source's metadata) an agreed replica of ``source``."""
    admin.create_stream(replica, copymetafrom=source)
    admin.add_replica(source, replica, paused=paused)
    admin.add_upstream(replica, source)


def produce(admin, topic: str, values, keyed: bool = True, headers: bool = True) -> list[str]:
    values = list(values)
    with Producer(admin, batch_size=50_000) as producer:
        for i, value in enumerate(values):
            producer.send(
                topic,
                value,
                key=f"key-{i % 11}" if keyed else None,
                headers=[("seq", str(i)), ("bin", bytes([i % 256, 0, 255]))] if headers and i % 3 == 0 else None,
                timestamp=T0 + i,
            )
    return values


def contents(admin, stream: str) -> dict[tuple[str, int], list[Message]]:
    """Every message ``stream`` holds, by (topic, partition), in offset order."""
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    result = {}
    for topic, count in store.topics(entry.uuid).items():
        for partition in range(count):
            start, end = store.offsets(entry.uuid, topic, partition)
            held = []
            while start < end:
                chunk = store.read(entry.uuid, topic, partition, start, 50_000)
                held += chunk
                start = chunk[-1].offset + 1
            result[(topic, partition)] = held
    return result


def held(admin, stream: str) -> int:
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    return sum(
        end - start
        for topic, count in store.topics(entry.uuid).items()
        for start, end in (store.offsets(entry.uuid, topic, p) for p in range(count))
    )


def strip_origin(message: Message) -> tuple:
    headers = tuple(h for h in message.headers if h[0] != ORIGIN_HEADER)
    return message.value, message.key, headers, message.timestamp


def assert_same_messages(admin, source: str, replica: str) -> None:
    """The replica holds every source message exactly once, in the same topic and partition,
    in the same order, with key, headers and timestamp, and the origin of each."""
    src_uuid = admin.entry(source).uuid
    want, got = contents(admin, source), contents(admin, replica)
    for (topic, partition), messages in want.items():
        have = got.get((topic, partition), [])
        assert len(have) == len(messages), f"{replica}:{topic}/{partition}: {len(have)} of {len(messages)}"
        assert [strip_origin(m) for m in have] == [strip_origin(m) for m in messages], f"{topic}/{partition}"
        assert [m.header(ORIGIN_HEADER) for m in have] == [
            f"{src_uuid}/{partition}/{m.offset}".encode() for m in messages
        ]
    assert sum(map(len, got.values())) == sum(map(len, want.values()))


def wait_for(condition, timeout: float = 90, what: str = "condition", every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def replica_state(admin, source: str, replica: str) -> str:
    [row] = [r for r in admin.list_replicas(source) if r.replica_path == replica]
    return row.state


WORKER_NOT_CONNECTED = "Python worker failed to connect back"
START_SECONDS = 600  # for a streaming query's source to start, attempts included
# the tests that start a streaming query: START_SECONDS, and the test's own work
STARTS_A_STREAM = pytest.mark.timeout(START_SECONDS + 600)


def start_query(start, timeout: float = START_SECONDS):
    """The streaming query ``start()`` returns, once its streamrep source has started (or the
    query has ended).

    Spark runs a Python data source's stream reader in a Python process of its own, started with
    the query, and waits a fixed 10 s for it to connect back (PythonWorkerFactory.createSimpleWorker,
    called by PythonStreamingSourceRunner: no setting changes it in Spark 4.3). That process
    imports pyspark from pyspark.zip, compiling it (zipimport caches no bytecode): on a loaded
    machine this took 11-25 s (load 20-30 beside two CPU hogs), and the query failed with "Python
    worker failed to connect back" before any streamrep code ran. Such a query is started again
    until its source starts, for up to ``timeout`` seconds; any other failure is left to the test.
    (At load 30 an attempt took 10-50 s and most failed.)"""
    deadline = time.monotonic() + timeout
    attempt = 1
    while True:
        query = start()
        wait_for(
            lambda q=query: not q.isActive or not q.status["message"].startswith("Initializing"),
            timeout=timeout,
            what="the streaming query's source to start",
        )
        error = None if query.isActive else query.exception()
        if error is None or WORKER_NOT_CONNECTED not in str(error) or time.monotonic() > deadline:
            return query
        print(
            f"attempt {attempt}: the query's source process did not connect back within Spark's 10 s; again", flush=True
        )
        attempt += 1


# -- the data source as a reader -------------------------------------------------------------
@STARTS_A_STREAM
def test_read_a_stream_as_a_dataframe(spark, clusters, tmp_path):
    from streamrep.spark.source import SCHEMA

    admin = clusters
    stream = make_stream(admin, f"/mapr/{SF}/events", {"clicks": 3, "views": 1})
    produce(admin, f"{stream}:clicks", (f"click-{i}" for i in range(60)))
    produce(admin, f"{stream}:views", (f"view-{i}" for i in range(5)), keyed=False, headers=False)
    uuid = admin.entry(stream).uuid

    df = spark.read.format("streamrep").option("path", stream).option("home", home_of(admin)).load()
    assert df.schema == SCHEMA
    # timestamp and timestampType as Spark's Kafka source gives them (issue 21, item 18)
    from pyspark.sql import functions

    rows = df.withColumn("ms", functions.expr("unix_millis(timestamp)")).collect()
    assert {r.timestampType for r in rows} == {0}
    by_partition: dict[tuple[str, int], list] = {}
    for row in rows:
        assert row.source == stream and row.source_uuid == uuid
        by_partition.setdefault((row.topic, row.partition), []).append(row)
    want = contents(admin, stream)
    assert len(rows) == 65
    assert set(by_partition) == {k for k, v in want.items() if v}
    for key, messages in want.items():
        got = by_partition.get(key, [])
        assert [r.offset for r in got] == [m.offset for m in messages]
        assert [(r.value, r.key, tuple((h.key, h.value) for h in r.headers), r.ms) for r in got] == [
            (m.value, m.key, m.headers, m.timestamp) for m in messages
        ]
    assert any(r.headers for r in rows) and any(r.key is None for r in rows)

    views = (
        spark.read.format("streamrep")
        .option("path", stream)
        .option("home", home_of(admin))
        .option("topics", "views")
        .load()
    )
    assert sorted(r.value for r in views.collect()) == sorted(f"view-{i}".encode() for i in range(5))

    # The same stream as a stream, rate-limited: every message once, over several micro-batches.
    query = start_query(
        lambda: (
            spark.readStream.format("streamrep")
            .option("path", stream)
            .option("home", home_of(admin))
            .option("maxRecordsPerTrigger", "20")
            .load()
            .writeStream.format("memory")
            .queryName("events_stream")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
    )
    assert query.awaitTermination(300), "the availableNow query did not end"
    assert query.exception() is None
    streamed = spark.table("events_stream").collect()
    assert Counter((r.topic, r.partition, r.offset) for r in streamed) == Counter(
        (r.topic, r.partition, r.offset) for r in rows
    )
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert len(batches) >= 4 and max(p["numInputRows"] for p in batches) <= 20


def test_read_a_stream_as_a_stream_resumes_from_its_checkpoint(spark, clusters, tmp_path):
    """``spark.readStream.format("streamrep")`` as a user's job runs it, run after run on one
    checkpoint into Parquet files (``Trigger.AvailableNow``: each run reads what is there and
    ends): a run reads only what came since the last one, a partition added since from its
    start, so the files hold every message once; with ``startingOffsets`` latest a new query
    skips what the stream held when it started."""
    admin = clusters
    stream = make_stream(admin, f"/mapr/{SF}/ticks", {"t": 2})
    produce(admin, f"{stream}:t", (f"old-{i}" for i in range(10)))

    def run(name: str, **options: str) -> int:
        """One run of the job ``name``; returns the rows it read."""
        reader = spark.readStream.format("streamrep").option("path", stream).option("home", home_of(admin))
        for key, value in options.items():
            reader = reader.option(key, value)
        query = (
            reader.load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / name / "out"))
            .option("checkpointLocation", str(tmp_path / name / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert not query.isActive and query.exception() is None
        return sum(p["numInputRows"] for p in query.recentProgress)

    def written(name: str) -> Counter:
        return Counter(r.value.decode() for r in spark.read.parquet(str(tmp_path / name / "out")).collect())

    assert run("ticks") == 10
    assert written("ticks") == Counter(f"old-{i}" for i in range(10))

    produce(admin, f"{stream}:t", (f"new-{i}" for i in range(30)))
    admin.edit_topic(stream, "t", 3)  # a new partition, read from its start
    produce(admin, f"{stream}:t", (f"more-{i}" for i in range(30)), keyed=False)
    assert run("ticks") == 60
    assert run("ticks") == 0  # nothing new
    rows = spark.read.parquet(str(tmp_path / "ticks" / "out")).collect()
    assert {r.partition for r in rows} == {0, 1, 2}
    want = [f"old-{i}" for i in range(10)] + [f"new-{i}" for i in range(30)] + [f"more-{i}" for i in range(30)]
    assert written("ticks") == Counter(want)  # each exactly once

    assert run("latest", startingOffsets="latest") == 0


# -- copystream -----------------------------------------------------------------------------
def test_copystream_app_copies_every_message_exactly_once(spark, clusters, child_env):
    from streamrep.spark import jobs, run_app

    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/orders", {"placed": 3, "shipped": 2})
    produce(admin, f"{source}:placed", (f"placed-{i}" for i in range(3000)))
    produce(admin, f"{source}:shipped", (f"shipped-{i}" for i in range(500)), keyed=False)
    destination = f"/mapr/{NY}/orders-copy"  # does not exist yet: the copy creates it

    started = time.monotonic()
    result = run_app(
        "copystream", ["--src", source, "--dst", destination, "--home", home_of(admin)], env=child_env, timeout=300
    )
    print(f"\ncopystream app (3,500 messages): {time.monotonic() - started:.1f}s")
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = result.stdout.strip().splitlines()  # stdout carries the summary alone
    summary = json.loads(line)
    assert summary["messages"] == 3500  # the app prints JSON (CopySummary.to_dict)
    assert summary["destination"] == destination
    assert_same_messages(admin, source, destination)

    # The positions are recorded with the messages: the copy resumes, and a gateway would too.
    src_uuid, dst = admin.entry(source).uuid, admin.entry(destination)
    marks = admin.store(admin.path(destination)).marks(dst.uuid)
    ends = {f"{t}:{p}": len(m) for (t, p), m in contents(admin, source).items()}
    assert summary["positions"] == ends
    assert {k: marks[f"p|{src_uuid}|{k.replace(':', '|')}"] for k in ends} == ends

    again = jobs.copystream_job(spark, admin, source, destination)
    assert again.messages == 0
    assert held(admin, destination) == 3500


def test_copystream_job_shows_copy_in_progress_and_resumes(spark, clusters):
    """A copy into a registered (paused) replica: the link shows COPY_IN_PROGRESS only while
    it runs, and a copy that finds part of the data there copies only the rest."""
    from streamrep.replication.copy import copy_partition, plan_copy
    from streamrep.spark import jobs

    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/ledger", {"entries": 2})
    produce(admin, f"{source}:entries", (f"entry-{i}" for i in range(2000)))
    replica = f"/mapr/{NY}/ledger"
    link(admin, source, replica, paused=True)

    # Part of the copy already happened (one partition, in this process).
    plan = plan_copy(admin, source, replica)
    first = min(plan.ends)
    done = copy_partition(admin.store(plan.source), admin.store(plan.destination), plan, first)
    states = []
    original = admin.set_replica_state

    def spy(path, rep, state, error=None, **kwargs):
        states.append(state.value)
        return original(path, rep, state, error, **kwargs)

    admin.set_replica_state = spy
    summary = jobs.copystream_job(spark, admin, source, replica)
    assert summary.messages == 2000 - done
    assert states == ["REPLICA_STATE_COPY_IN_PROGRESS", "REPLICA_STATE_WAITING_FOR_GATEWAY"]
    assert replica_state(admin, source, replica) == "REPLICA_STATE_PAUSED"  # copied, not resumed yet
    assert_same_messages(admin, source, replica)


def test_copystream_job_of_an_empty_stream(spark, clusters):
    from streamrep.spark import jobs

    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/quiet", {"nothing": 2})
    admin.create_stream(f"/mapr/{SF}/bare")  # no topics at all: Spark plans one empty partition
    assert jobs.copystream_job(spark, admin, source, f"/mapr/{NY}/quiet").messages == 0
    assert jobs.copystream_job(spark, admin, f"/mapr/{SF}/bare", f"/mapr/{NY}/bare").messages == 0
    assert [t.topic for t in admin.list_topics(f"/mapr/{NY}/quiet")] == ["nothing"]


def test_a_gateway_pass_reports_a_failing_replica_and_applies_the_others(clusters):
    """A Spark gateway pass's apply, called as its task calls it (``tasks.apply_runs``): a
    replica that cannot take the messages (here: they would leave a gap) is reported, and the
    others still get them; ``record_pass`` records UNEXPECTED with the error, and REPLICATING
    for the others."""
    from streamrep.replication.lag import flow_key
    from streamrep.replication.reads import SourceRead
    from streamrep.replication.transfer import apply_batch
    from streamrep.spark.tasks import apply_runs, record_pass

    admin = clusters
    stream = make_stream(admin, f"/mapr/{SF}/sensors", {"temp": 1})
    produce(admin, f"{stream}:temp", (f"t-{i}" for i in range(10)), keyed=False)
    ahead, behind = f"/mapr/{NY}/sensors-a", f"/mapr/{NY}/sensors-b"
    link(admin, stream, ahead)
    link(admin, stream, behind)
    gateway = Gateway(admin, NY, "g1")
    unit = next(iter(gateway.assignment().units))
    messages = contents(admin, stream)[("temp", 0)]
    apply_batch(admin.store(admin.path(ahead)), admin.entry(ahead).uuid, unit, messages[:5])

    commit = apply_runs(gateway, {unit: SourceRead(messages[5:], (5, 10), 0)})[unit]  # messages 5..9 only
    assert commit.rows == 5
    assert commit.written == {flow_key(unit.source_uuid, admin.entry(ahead).uuid): 5}
    [(key, error)] = commit.errors.items()
    assert key.endswith(admin.entry(behind).uuid) and "replication gap" in error
    assert [m.value for m in contents(admin, ahead)[("temp", 0)]] == [m.value for m in messages]
    assert held(admin, behind) == 0

    record_pass(gateway, commit)
    assert replica_state(admin, stream, ahead) == "REPLICA_STATE_REPLICATING"
    [row] = [r for r in admin.list_replicas(stream) if r.replica_path == behind]
    assert row.state == "REPLICA_STATE_UNEXPECTED" and "replication gap" in row.errors


# -- the gateway --------------------------------------------------------------------------------
def test_gateway_once_replicates_resumed_replica_not_paused_one(spark, clusters):
    """The gateway job with --once (the app's code, on the shared session; the kill test runs
    the app itself through spark-submit)."""
    from streamrep.spark import jobs

    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/feed", {"items": 3})
    live, paused = f"/mapr/{NY}/feed-live", f"/mapr/{NY}/feed-paused"
    link(admin, source, live, paused=True)
    link(admin, source, paused, paused=True)
    admin.resume_replica(source, live)
    produce(admin, f"{source}:items", (f"item-{i}" for i in range(1500)))

    jobs.gateway_job(spark, admin, NY, "g1", once=True)
    assert_same_messages(admin, source, live)
    assert held(admin, paused) == 0
    assert not admin.store(admin.path(paused)).marks(admin.entry(paused).uuid)
    assert replica_state(admin, source, live) == "REPLICA_STATE_REPLICATING"
    assert replica_state(admin, source, paused) == "REPLICA_STATE_PAUSED"
    assert "g1" not in admin.store(admin.path(live)).catalog_list(HEARTBEAT_KIND)  # withdrawn on exit

    # Resumed, with more data and a new topic: the next run brings the paused replica up from
    # its own position, which is behind the live one's, and the live one on from where it stood.
    admin.resume_replica(source, paused)
    admin.create_topic(source, "extra", 2)
    produce(admin, f"{source}:items", (f"more-{i}" for i in range(300)))
    produce(admin, f"{source}:extra", (f"extra-{i}" for i in range(100)))
    jobs.gateway_job(spark, admin, NY, "g1", once=True)
    assert_same_messages(admin, source, live)
    assert_same_messages(admin, source, paused)


def test_the_spark_gateway_keeps_a_replicas_byte_limit_over_its_tasks(spark, clusters):
    """-maxbytespersec on the Spark engine: the pass's tasks (one per core) split the gateway's
    part, so together they stay under the limit (an upper bound on the rate: load only slows it)."""
    from streamrep.replication.throttle import BURST_SECONDS
    from streamrep.spark import jobs

    admin = clusters
    limit = 50_000
    source = make_stream(admin, f"/mapr/{SF}/limited", {"items": 4})
    admin.create_stream(f"/mapr/{NY}/limited", copymetafrom=source)
    admin.add_replica(source, f"/mapr/{NY}/limited", maxbytespersec=limit)
    admin.add_upstream(f"/mapr/{NY}/limited", source)
    values = produce(admin, f"{source}:items", (f"{i:0>996}" for i in range(1000)), keyed=False, headers=False)
    sent = sum(len(v) for v in values)  # 1 MB: 20 s at the limit, a few without it
    began = time.monotonic()
    jobs.gateway_job(spark, admin, NY, "g1", once=True)
    elapsed = time.monotonic() - began
    assert_same_messages(admin, source, f"/mapr/{NY}/limited")
    slices = spark.sparkContext.defaultParallelism
    assert sent <= limit * (elapsed + slices * BURST_SECONDS), f"{sent} bytes in {elapsed:.1f} s"


def test_the_gateway_warm_up_runs_in_the_python_workers_and_only_logs_a_failure(spark, clusters, tmp_path, caplog):
    """The Spark gateway starts its Python workers before its first pass (and an idle one keeps
    them alive): the warm-up opens the gateway in each worker, and failing there (here: a
    STREAMREP_HOME without the cluster) costs only a warning, never the gateway."""
    from streamrep.spark import jobs

    gateway = Gateway(clusters, NY, "warm")
    pids = jobs._Passes(spark, gateway, home_of(clusters), once=False, max_records=None).warm()
    assert pids and os.getpid() not in pids  # one per task, each in a Python worker
    empty = tmp_path / "empty-home"
    empty.mkdir()
    broken = jobs._Passes(spark, gateway, str(empty), once=False, max_records=None)
    with caplog.at_level(logging.WARNING, logger=jobs.__name__):
        assert broken.warm() == []
    assert any("warm-up job failed" in r.getMessage() for r in caplog.records)
    assert broken.last_job > float("-inf")  # the next warm-up waits WARM_SECONDS, not one idle pass


def gateway_while(spark, admin, steps, **options) -> None:
    """Run the Spark gateway g1 of NY (``jobs.gateway_job``, in the test's thread, where its
    session is active) until ``steps``, run in another thread, end; then raise what they raised."""
    import threading

    from streamrep.spark import jobs

    stop = threading.Event()
    failed: list[BaseException] = []

    def watch() -> None:
        try:
            steps()
        except BaseException as err:  # noqa: BLE001 - reported by the test
            failed.append(err)
        finally:
            stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        jobs.gateway_job(spark, admin, NY, "g1", stop=stop, **options)
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert not failed, failed


def test_the_spark_gateway_picks_up_new_topics_partitions_and_replicas(spark, clusters):
    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/clicks", {"web": 2})
    first, second = f"/mapr/{NY}/clicks-1", f"/mapr/{NY}/clicks-2"
    link(admin, source, first)
    produce(admin, f"{source}:web", (f"web-{i}" for i in range(500)))

    def steps() -> None:
        wait_for(lambda: held(admin, first) == 500, what="the first replica")
        admin.create_topic(source, "mobile", 1)
        admin.edit_topic(source, "web", 3)
        produce(admin, f"{source}:mobile", (f"mobile-{i}" for i in range(50)))
        produce(admin, f"{source}:web", (f"web2-{i}" for i in range(90)), keyed=False)
        wait_for(lambda: held(admin, first) == 640, what="the new topic and partition")
        link(admin, source, second)
        wait_for(lambda: held(admin, second) == 640, what="the new replica")

    gateway_while(spark, admin, steps, interval=0.2, max_records=200)
    assert "g1" not in admin.store(admin.path(first)).catalog_list(HEARTBEAT_KIND)  # withdrawn on exit
    assert_same_messages(admin, source, first)
    assert_same_messages(admin, source, second)
    assert replica_state(admin, source, second) == "REPLICA_STATE_REPLICATING"


def test_the_spark_gateway_records_lag_and_serves_metrics_from_its_driver(spark, clusters):
    """The Spark engine's driver samples the replicas' lag into their history and serves the
    gateway's Prometheus metrics, counting micro-batches as passes."""
    import threading
    import urllib.request

    import kafka_local  # loaded by tests/conftest.py from scripts/kafka_local.py

    from streamrep.replication.lag import lag_history
    from streamrep.spark import jobs

    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/lagged", {"t": 2})
    live, paused = f"/mapr/{NY}/lagged-live", f"/mapr/{NY}/lagged-paused"
    link(admin, source, live)
    link(admin, source, paused, paused=True)
    produce(admin, f"{source}:t", (f"v-{i}" for i in range(400)))
    (port,) = kafka_local.free_ports(1)
    stop = threading.Event()
    seen: dict[str, float] = {}
    failed: list[BaseException] = []

    def scrape() -> dict[str, float]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
                text = response.read().decode()
        except OSError:
            return {}
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    gw = 'cluster="newyork",gateway="g1"'
    lag_key = f'streamrep_replica_lag_messages{{replica="{paused}",source="{source}"}}'

    def watch() -> None:  # the gateway runs in the test's thread, where its session is active
        try:
            wait_for(lambda: held(admin, live) == 400, what="the live replica")
            wait_for(
                lambda: (
                    scrape().get(f"streamrep_gateway_replicated_messages_total{{{gw}}}", 0) == 400
                    and lag_key in scrape()
                ),
                what="the replicated messages counted",
            )
            seen.update(scrape())
        except BaseException as err:  # noqa: BLE001 - reported by the test
            failed.append(err)
        finally:
            stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    jobs.gateway_job(spark, admin, NY, "g1", interval=0.3, stop=stop, metrics_port=port)
    watcher.join(timeout=30)
    assert not failed, failed
    assert seen[f"streamrep_gateway_passes_total{{{gw}}}"] >= 1
    assert seen[lag_key] == 400
    assert [s.messages for s in lag_history(admin, source, paused)][:1] == [400]
    assert lag_history(admin, source, live)  # sampled by the driver too
    assert scrape() == {}  # the endpoint closed with the gateway


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (Spark's JVM, its Python daemons and their workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_everything(proc: subprocess.Popen) -> list[int]:
    """kill -9 the spark-submit process group, and the groups of the Python daemons Spark
    started (each daemon leads its own process group, with its workers in it)."""
    pids = [proc.pid, *descendants(proc.pid)]
    groups = {proc.pid}
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    for group in sorted(groups, key=lambda g: g != proc.pid):  # the JVM's group first
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()
    return pids


def test_gateway_app_killed_mid_backlog_loses_and_duplicates_nothing(clusters, child_env, tmp_path):
    """The gateway app through spark-submit: kill -9 of everything it started at a random
    moment of a 200k-message backlog, then a restart with --once: every source message
    exactly once in the (resumed) replica, and nothing in a paused one."""
    from streamrep.spark import run_app, start_app

    admin = clusters
    rng = random.Random(SEED)
    total = 200_000
    source = make_stream(admin, f"/mapr/{SF}/big", {"t": 3})
    replica, paused = f"/mapr/{NY}/big", f"/mapr/{NY}/big-paused"
    link(admin, source, replica, paused=True)
    link(admin, source, paused, paused=True)
    admin.resume_replica(source, replica)
    produce(admin, f"{source}:t", (f"m{i:07d}-" + "x" * 90 for i in range(total)), keyed=False, headers=False)
    args = [
        "--cluster",
        NY,
        "--id",
        "g1",
        "--home",
        home_of(admin),
        "--max-records",
        "10000",
        "--interval",
        "0.2",
    ]
    # Small passes, an early threshold and a short wait: the kill lands mid-backlog even
    # on a fast machine (a pass of 10k takes about 0.2 s here, so 80k+ remain for 1.6 s+).
    threshold = rng.randint(1, 120_000)

    started = time.monotonic()
    with open(tmp_path / "gateway.log", "wb") as log:
        proc = start_app("gateway", args, env=child_env, start_new_session=True, stdout=log, stderr=log)
        try:
            wait_for(
                lambda: held(admin, replica) >= threshold or proc.poll() is not None,
                timeout=240,
                what=f"{threshold} messages replicated (seed {SEED})",
                every=0.01,
            )
            assert proc.poll() is None, (tmp_path / "gateway.log").read_text()[-3000:]
            time.sleep(rng.uniform(0, 0.4))  # anywhere in the passes under way, or between them
        finally:
            pids = kill_everything(proc)
    at_kill = held(admin, replica)
    wait_for(lambda: not alive(pids), timeout=30, what="every killed process to go")
    assert held(admin, replica) == at_kill
    killed_after = time.monotonic() - started
    assert 0 < at_kill < total, f"seed {SEED}: killed at {at_kill}"

    result = run_app("gateway", [*args, "--once"], env=child_env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "g1" not in admin.store(admin.path(replica)).catalog_list(HEARTBEAT_KIND)  # withdrawn on exit
    print(
        f"\nkill test (seed {SEED}): killed at {at_kill} messages after {killed_after:.1f}s; "
        f"whole test {time.monotonic() - started:.1f}s"
    )

    values = Counter(m.value for messages in contents(admin, replica).values() for m in messages)
    expected = {f"m{i:07d}-".encode() + b"x" * 90 for i in range(total)}
    duplicated = sum(n - 1 for n in values.values() if n > 1)
    lost = len(expected - set(values))
    assert (lost, duplicated, len(values)) == (0, 0, total), f"seed {SEED}"
    assert_same_messages(admin, source, replica)
    assert held(admin, paused) == 0
    assert replica_state(admin, source, replica) == "REPLICA_STATE_REPLICATING"
    assert replica_state(admin, source, paused) == "REPLICA_STATE_PAUSED"


# -- spark-submit ------------------------------------------------------------------------------
def test_spark_submit_command(monkeypatch, tmp_path):
    from streamrep.spark import command, submit

    monkeypatch.delenv("STREAMREP_SPARK_MASTER", raising=False)
    monkeypatch.delenv("STREAMREP_SPARK_APPS", raising=False)
    argv, env = command.spark_submit_command("copystream", ["--src", "/mapr/a/s", "--dst", "/mapr/b/s"])
    assert Path(argv[0]).name == "spark-submit" and Path(argv[0]).parent == Path(sys.executable).parent
    assert argv[argv.index("--master") + 1] == "local[2]"
    assert "spark.ui.enabled=false" in argv and "spark.python.worker.reuse=true" in argv
    assert argv[-5:] == [
        str(Path(command.__file__).resolve().parents[3] / "spark_apps" / "copystream.py"),
        "--src",
        "/mapr/a/s",
        "--dst",
        "/mapr/b/s",
    ]
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent)

    argv, _ = command.spark_submit_command("copystream", ["--src", "a", "--dst", "b", "--numthreads", "3"])
    assert argv[argv.index("--master") + 1] == "local[3]"
    monkeypatch.setenv("STREAMREP_SPARK_MASTER", "spark://somewhere:7077")
    argv, _ = command.spark_submit_command("gateway", ["--cluster", "c"], conf={"spark.executor.memory": "2g"})
    assert argv[argv.index("--master") + 1] == "spark://somewhere:7077" and "spark.executor.memory=2g" in argv

    path, args, conf = command.application("gateway", ["--cluster", "c", "--once"])
    assert path.endswith("spark_apps/gateway.py") and args == ["--cluster", "c", "--once"]
    assert conf["spark.ui.enabled"] == "false"

    apps = tmp_path / "apps"
    apps.mkdir()
    (apps / "gateway.py").write_text("")
    monkeypatch.setenv("STREAMREP_SPARK_APPS", str(apps))
    assert command.application("gateway")[0] == str(apps / "gateway.py")
    with pytest.raises(Misinstalled, match=r"Spark app copystream.py not found in .*apps: point STREAMREP_SPARK_APPS"):
        command.application("copystream")

    monkeypatch.setattr(command.shutil, "which", lambda *a, **k: None)
    with pytest.raises(Misinstalled, match="spark-submit was not found"):
        submit.run_app("gateway", ["--cluster", "c"])


def test_a_worker_without_java_gets_one_line_naming_the_fix(tmp_path):
    """spark-submit on a machine with no JRE fails in its shell script; streamrep says so first."""
    from streamrep.spark import command

    venv_bin = str(Path(sys.executable).parent)  # spark-submit is here, java is not
    with pytest.raises(Misinstalled, match=r"Spark needs Java on this worker \(no java on PATH\): install a JRE"):
        command.spark_submit_command("copystream", ["--src", "a", "--dst", "b"], env={"PATH": venv_bin})
    bogus = tmp_path / "jdk"
    with pytest.raises(Misinstalled, match=f"JAVA_HOME={bogus} has no bin/java.*set JAVA_HOME"):
        command.spark_submit_command("gateway", ["--cluster", "c"], env={"PATH": venv_bin, "JAVA_HOME": str(bogus)})
    java = command.require_java({"PATH": os.environ["PATH"]})  # this machine has one
    assert os.access(java, os.X_OK)


# --- cursors ---
def test_the_spark_gateway_syncs_consumer_cursors(spark, clusters):
    """The Spark engine's gateway carries a group's committed cursor to the replica, as the
    in-process one does (both sync from ``Gateway.assignment``, every CURSOR_SYNC_SECONDS)."""
    from streamrep.client import Consumer

    admin = clusters
    source = make_stream(admin, f"/mapr/{SF}/orders", {"t": 2})
    replica = f"/mapr/{NY}/orders"
    link(admin, source, replica)
    produce(admin, f"{source}:t", (f"o-{i}" for i in range(300)))
    consumer = Consumer(f"{source}:t", group="g", from_start=True, admin=admin)
    first = consumer.poll(120)
    consumer.commit()
    replica_store, replica_uuid = admin.store(admin.path(replica)), admin.entry(replica).uuid
    gateway_while(
        spark,
        admin,
        lambda: wait_for(
            lambda: replica_store.cursors("g", replica_uuid, "t") == consumer.positions,
            timeout=120,
            what="the group's cursors on the replica",
        ),
        interval=0.2,
    )
    resumed = Consumer(f"{replica}:t", group="g", from_start=True, admin=admin)
    rest = []
    while batch := resumed.poll(1000):
        rest += batch
    assert sorted(m.value for m in first + rest) == sorted(f"o-{i}".encode() for i in range(300))


def test_pyspark_files_overwritten_by_pyspark_client_are_named_with_the_fix(tmp_path):
    """The Spark provider's pyspark-client overwrites pyspark's Python files with an older
    release (docs/platform.md); spark-submit is refused with the reinstall that repairs it."""
    import pyspark

    from streamrep.spark import command

    jars = tmp_path / "pyspark" / "jars"
    jars.mkdir(parents=True)
    (jars / "spark-core_2.13-4.2.0.jar").write_bytes(b"")
    with pytest.raises(
        Misinstalled,
        match=r"Python files are 4\.1\.1 but its jars are 4\.2\.0 .*"
        r"pip install --force-reinstall --no-deps pyspark==4\.2\.0",
    ):
        command.require_matching_pyspark(str(tmp_path / "pyspark"), "4.1.1")
    command.require_matching_pyspark(str(tmp_path / "pyspark"), "4.2.0")
    command.require_matching_pyspark()  # this venv's pyspark is whole
    assert pyspark.__version__ == "4.2.0"
