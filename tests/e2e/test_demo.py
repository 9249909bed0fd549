"""``./run demo`` (scripts/demo.sh) ends healthy (issue 21, item 9): its last ``replica list``
shows the replica up to date and REPLICATING with a live gateway, and it leaves no gateway
running. It runs the whole demo: Airflow's ``dags test``, copystream and a gateway on Spark."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def column(table: str, name: str) -> str:
    """The value under ``name`` in a one-row text table (columns left-aligned under the header)."""
    header, row = [line for line in table.splitlines() if line.strip()][:2]
    return row[header.index(name) :].split()[0]


def test_the_demo_ends_with_the_replica_up_to_date_and_a_live_gateway(tmp_path):
    home = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STREAMREP_", "SPARK_", "PYSPARK_"))}
    env["STREAMREP_HOME"] = str(home)
    # a bound, not an expectation: the demo took 5 minutes at load 30 (two Spark starts, Airflow)
    done = subprocess.run(["bash", "scripts/demo.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    last = done.stdout.rsplit("$ streamrep stream replica list -path /mapr/sanfrancisco/activity\n", 1)[1]
    table = last.split("\n$ ", 1)[0]
    assert column(table, "replicaState") == "REPLICA_STATE_REPLICATING", table
    assert column(table, "gateways") == "gw1", table
    assert column(table, "isUptodate") == "true" and column(table, "pendingMessages") == "0", table
    assert "ErrAllGatewaysUnreachable" not in table
    # every order once on the replica, the two produced while gw1 ran among them
    orders = done.stdout.rsplit("$ streamrep consume -path /mapr/newyork/activity:orders -fromstart true\n", 1)[1]
    orders = orders.split("\n$ ", 1)[0].split()
    assert sorted(orders) == sorted(f"order-{i}" for i in range(1, 10)), orders
    # the demo explains what follows, and leaves no gateway running
    assert "gw1 is stopped now" in done.stdout
    listed = subprocess.run(
        [str(REPO / ".venv/bin/streamrep"), "gateway", "list", "-cluster", "newyork", "-json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert all(gw["status"] != "live" for gw in json.loads(listed.stdout)["data"]), listed.stdout
