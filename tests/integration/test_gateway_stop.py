"""A Spark gateway (``streamrep gateway run``: spark-submit in the foreground) stops cleanly on
``gateway stop``: it finishes its micro-batch, withdraws its heartbeat and exits 0, having
replicated every message exactly once; ``gateway list`` showed it live on Spark with its share."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from replication_helpers import STREAMREP_EXE, assert_exactly_once, count, produce

from streamrep.replication.gateway import HEARTBEAT_KIND
from streamrep.spark.lifetime import stop_job

pytestmark = pytest.mark.slow

SF, NY = "sanfrancisco", "newyork"
SOURCE, REPLICA = f"/mapr/{SF}/activity", f"/mapr/{NY}/activity"
BACKLOG, MORE = 20_000, 5_000


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.2)


def held(admin) -> int:
    try:
        return count(admin, REPLICA)
    except Exception:  # noqa: BLE001 - the replica's topics are created by the gateway's first batch
        return 0


def test_spark_gateway_stops_cleanly_on_gateway_stop(api, cli, child_env, tmp_path: Path):
    api.clusters.add(SF)
    api.clusters.add(NY)
    api.create_stream(SOURCE, ttl=0)
    api.create_topic(SOURCE, "clicks", 2)
    api.create_stream(REPLICA, copymetafrom=SOURCE)
    api.add_replica(SOURCE, REPLICA)
    api.add_upstream(REPLICA, SOURCE)
    values = produce(api, f"{SOURCE}:clicks", (f"m{i:06d}" for i in range(BACKLOG)))
    code, out, err = cli("gateway", "start", "-cluster", NY)
    assert code == 0, err

    log = tmp_path / "gateway.log"
    with open(log, "wb") as sink:
        gateway = subprocess.Popen(
            [str(STREAMREP_EXE), "gateway", "run", "-cluster", NY, "-id", "g1", "-interval", "0.2"],
            env=child_env,
            stdout=sink,
            stderr=sink,
        )
    try:
        wait_for(lambda: held(api) == BACKLOG or gateway.poll() is not None, 300, "the backlog to be replicated")
        assert gateway.poll() is None, log.read_text()[-3000:]
        code, out, err = cli("gateway", "list", "-cluster", NY, "-json")
        assert code == 0, err
        [row] = json.loads(out)["data"]
        assert (row["id"], row["status"], row["engine"], row["desired"]) == ("g1", "live", "spark", "running")
        assert row["appId"] and row["master"].startswith("local")
        assert row["share"] == [f"{SOURCE}:clicks/0", f"{SOURCE}:clicks/1"] and row["partitions"] == 2

        values += produce(api, f"{SOURCE}:clicks", (f"n{i:06d}" for i in range(MORE)))  # in flight at the stop
        asked = time.monotonic()
        code, out, err = cli(
            "gateway", "stop", "-cluster", NY, "-wait", "true", "-timeout", "120", "-json", timeout=180
        )
        assert code == 0, err
        assert json.loads(out)["data"][0]["next"] == "stopped"
        gateway.wait(timeout=120)
        stopped_after = time.monotonic() - asked
    finally:
        if gateway.poll() is None:
            stop_job(gateway, grace=5)
    output = log.read_text()
    print(f"\nthe Spark gateway exited {gateway.returncode} {stopped_after:.1f}s after 'gateway stop'")
    assert gateway.returncode == 0, output[-3000:]
    assert "streamrep: error" not in output and "Traceback" not in output
    assert "gateway g1 stopped: the gateways of cluster newyork are stopped (gateway stop by alice" in output
    assert "g1" not in api.store(api.path(REPLICA)).catalog_list(HEARTBEAT_KIND)  # withdrawn
    # Nothing moves while stopped; a start and a drain finish the rest, still exactly once.
    at_stop = count(api, REPLICA)
    assert BACKLOG <= at_stop <= BACKLOG + MORE
    code, _, err = cli("gateway", "run", "-cluster", NY, "-id", "g1", "-engine", "local")
    assert code == 0 and "not started" in err  # stopped: a gateway does not start
    assert count(api, REPLICA) == at_stop
    code, out, err = cli("gateway", "run", "-cluster", NY, "-id", "g1", "-once", "true", "-engine", "local")
    assert code == 0, err
    assert_exactly_once(api, REPLICA, values)
