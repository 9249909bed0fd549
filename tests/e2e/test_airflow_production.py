"""Airflow as it runs in production (issue 9): PostgreSQL, and the api-server, a scheduler with
the LocalExecutor, a dag-processor and a triggerer, with login on, driven over REST only.

1. ``stream_replica_manual_setup`` is triggered over REST and succeeds (copystream on Spark);
2. ``stream_gateways`` runs the gateway continuously (``once: false``) under the scheduler;
3. the gateway's Spark driver JVM is killed (kill -9) and the scheduler brings it back: a new
   task try, a new Spark job, a new heartbeat;
4. messages produced before, during and after the kill are in the replica exactly once;
5. ``stream_gateway_service`` (action=stop, over REST) stops the gateway cleanly: its run ends
   SUCCESS; the scheduler restarts, and after action=start the supervisor launches the gateways
   again by itself, and what was produced meanwhile arrives exactly once.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from test_airflow_e2e import USER, contents, expect

from streamrep.client import Clusters, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.replication.assignment import HEARTBEAT_EXPIRY_SECONDS
from streamrep.replication.gateway import HEARTBEAT_KIND
from streamrep.replication.status import replica_status

# The timeouts below are generous: on a 2-core machine shared with other Spark jobs one Spark
# job start took minutes (idle: seconds).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

SF, NY = "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"
GATEWAY = "gw1"
SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"


def produce(admin: StreamAdmin, topic: str, values: list[str]) -> None:
    with Producer(admin) as producer:
        for value in values:
            producer.send(f"{SF}:{topic}", value.encode(), key=value.split("-")[-1].encode())


def _stat(pid: int) -> tuple[str, int]:
    """(state, parent pid) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return fields[0], int(fields[1])


def spark_jvm_of(pid: int) -> int | None:
    """The spark-submit JVM (the Spark driver) above ``pid``: the heartbeat is written by the
    Python driver or by the Python process planning the source's offsets, both started by it."""
    while pid > 1:
        try:
            if SPARK_SUBMIT in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                return pid
            pid = _stat(pid)[1]
        except OSError:
            return None
    return None


def alive(pid: int) -> bool:
    try:
        return _stat(pid)[0] != "Z"
    except OSError:
        return False


def heartbeat(admin: StreamAdmin) -> dict | None:
    return admin.clusters.store("newyork").catalog_list(HEARTBEAT_KIND).get(GATEWAY)


def wait_for(what: str, check, timeout: float, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
    return result


def live_gateway_jvm(admin: StreamAdmin, after: float, not_jvm: int | None = None) -> int | None:
    """The JVM of the gateway whose heartbeat is newer than ``after`` (and not ``not_jvm``)."""
    beat = heartbeat(admin)
    if not beat or beat["ts"] <= after:
        return None
    jvm = spark_jvm_of(beat["pid"])
    return jvm if jvm and jvm != not_jvm and alive(jvm) else None


def gateway_tries(airflow, run_id: str) -> list[tuple[str, int]]:
    return [
        (t["state"], t["try_number"])
        for t in airflow.task_instances("stream_gateways", run_id)
        if t["task_id"] == "gateway"
    ]


def test_production_airflow_replicates_exactly_once_through_kill_stop_and_restart(airflow_production):
    airflow, timings = airflow_production, airflow_production.timings
    clusters = Clusters(str(airflow.streamrep_home))
    clusters.add("sanfrancisco")
    clusters.add("newyork")
    admin = StreamAdmin(clusters, Identity(USER))
    admin.create_stream(SF, defaultpartitions=2)
    admin.create_topic(SF, "orders")
    admin.create_topic(SF, "refunds", partitions=1)
    sent = {"orders": [f"order-{i}" for i in range(200)], "refunds": [f"refund-{i}" for i in range(20)]}
    for topic, values in sent.items():
        produce(admin, topic, values)

    # 1. the seven steps, triggered over REST, copy what the source holds
    started = time.monotonic()
    setup = airflow.trigger("stream_replica_manual_setup", {"path": SF, "replica": NY})
    assert airflow.wait_run("stream_replica_manual_setup", setup) == "success", airflow.log("scheduler")
    timings["REST-triggered stream_replica_manual_setup until success"] = round(time.monotonic() - started, 1)
    states = {t["task_id"]: t["state"] for t in airflow.task_instances("stream_replica_manual_setup", setup)}
    assert states == dict.fromkeys(
        (
            "create_replica",
            "add_replica_paused",
            "verify_replica",
            "add_upstream",
            "verify_upstream",
            "copystream",
            "verify",
            "resume_replica",
            "wait_caught_up",
        ),
        "success",
    )
    assert contents(admin, NY) == expect(sent)

    # 2. the gateway runs continuously under the scheduler
    admin.set_gateways("newyork", GATEWAY, cluster="sanfrancisco")
    live = {"orders": [f"live-order-{i}" for i in range(100)]}
    produce(admin, "orders", live["orders"])
    sent["orders"] += live["orders"]
    started, since = time.monotonic(), time.time()
    gateways = airflow.trigger("stream_gateways", {"cluster": "newyork", "once": False})
    wait_for("the gateway task to run", lambda: ("running", 1) in gateway_tries(airflow, gateways), 300)
    timings["trigger until the gateway task runs (scheduler pickup)"] = round(time.monotonic() - started, 1)
    jvm = wait_for("the gateway's first heartbeat", lambda: live_gateway_jvm(admin, since), 300)
    timings["trigger until the gateway's first heartbeat"] = round(time.monotonic() - started, 1)
    wait_for("the live messages in the replica", lambda: contents(admin, NY) == expect(sent), 400, interval=2)
    timings["trigger until the replica holds the live messages"] = round(time.monotonic() - started, 1)

    # 3. kill -9 the gateway's Spark driver: the scheduler retries the task, a new job heartbeats
    before_kill = {"orders": [f"pre-kill-{i}" for i in range(50)]}
    produce(admin, "orders", before_kill["orders"])
    os.kill(jvm, signal.SIGKILL)
    killed_at, since = time.monotonic(), time.time()
    during = {"orders": [f"down-order-{i}" for i in range(80)], "refunds": [f"down-refund-{i}" for i in range(10)]}
    for topic, values in during.items():
        produce(admin, topic, values)
    wait_for(
        "the gateway's next try",
        lambda: any(t[1] >= 2 and t[0] == "running" for t in gateway_tries(airflow, gateways)),
        400,
    )
    timings["kill -9 until the gateway task's next try runs"] = round(time.monotonic() - killed_at, 1)
    new_jvm = wait_for("a new gateway job", lambda: live_gateway_jvm(admin, since, not_jvm=jvm), 400)
    timings["kill -9 until a new gateway heartbeats"] = round(time.monotonic() - killed_at, 1)
    assert not alive(jvm)
    tries = gateway_tries(airflow, gateways)
    assert len(tries) == 1 and tries[0][0] == "running" and tries[0][1] >= 2, tries
    after = {"orders": [f"after-order-{i}" for i in range(60)]}
    produce(admin, "orders", after["orders"])
    for batch in (before_kill, during, after):
        for topic, values in batch.items():
            sent[topic] += values

    # 4. everything produced before, during and after the kill, exactly once
    wait_for(
        "every message in the replica",
        lambda: sum(contents(admin, NY).values()) >= sum(map(len, sent.values())),
        400,
        interval=2,
    )
    timings["kill -9 until the replica holds everything"] = round(time.monotonic() - killed_at, 1)
    time.sleep(2)  # a duplicate would show up with the next micro-batches
    assert contents(admin, NY) == expect(sent)
    (row,) = replica_status(admin, SF)
    assert row.is_uptodate and row.pending_messages == 0, row
    assert airflow.run_state("stream_gateways", gateways) == "running"
    assert live_gateway_jvm(admin, time.time() - HEARTBEAT_EXPIRY_SECONDS) == new_jvm  # the same job, live

    # 5. stopped cleanly over REST (stream_gateway_service, action=stop): the gateway finishes its
    # micro-batch and exits 0, so its stream_gateways run ends SUCCESS
    started = time.monotonic()
    stop = airflow.trigger("stream_gateway_service", {"action": "stop", "cluster": "newyork"})
    assert airflow.wait_run("stream_gateway_service", stop) == "success", airflow.log("scheduler")
    assert airflow.wait_run("stream_gateways", gateways) == "success", gateway_tries(airflow, gateways)
    timings["REST stop until the stream_gateways run ends SUCCESS"] = round(time.monotonic() - started, 1)
    wait_for("the stopped gateway's Spark job to end", lambda: not alive(new_jvm), 60)
    assert heartbeat(admin) is None  # withdrawn on the way out
    while_stopped = {"orders": [f"stopped-order-{i}" for i in range(40)]}
    produce(admin, "orders", while_stopped["orders"])  # waits at the source
    sent["orders"] += while_stopped["orders"]

    # the scheduler restarts; after action=start the supervisor launches the gateways by itself
    started = time.monotonic()
    airflow.stop("scheduler")
    airflow.start("scheduler")
    airflow.wait_healthy(parts=("scheduler",))
    timings["scheduler restart until healthy"] = round(time.monotonic() - started, 1)
    started, since = time.monotonic(), time.time()
    start = airflow.trigger("stream_gateway_service", {"action": "start", "cluster": "newyork"})
    assert airflow.wait_run("stream_gateway_service", start) == "success", airflow.log("scheduler")
    back = wait_for("a gateway launched by the supervisor", lambda: live_gateway_jvm(admin, since), 400)
    timings["REST start until a gateway heartbeats"] = round(time.monotonic() - started, 1)
    launched = heartbeat(admin)["airflow"]
    assert launched["dagId"] == "stream_gateways" and launched["runId"] != gateways, launched
    assert airflow.run_state("stream_gateways", launched["runId"]) == "running"
    wait_for(
        "the messages produced while stopped",
        lambda: sum(contents(admin, NY).values()) >= sum(map(len, sent.values())),
        400,
        interval=2,
    )
    time.sleep(2)
    assert contents(admin, NY) == expect(sent)
    assert alive(back)
    clusters.close()
