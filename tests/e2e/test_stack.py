"""The compose stack for real: ``./run stack up``, ``check`` and ``down`` (scripts/stack.py).

Builds every image on this machine (from scratch on a fresh clone: the engine's data is in the
git-ignored .docker/), starts every service until healthy, runs the walkthrough of docs/operations.md inside
the stack, and tears it down. Skipped, with the reason, when no Docker engine can be used. The
host ports are free ones (the .env variables), so ``./run kafka``'s brokers can run beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
# scripts/ is not a package; tests/conftest.py's load_script may have loaded it already.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import stack  # noqa: E402

PORT_VARIABLES = ("AIRFLOW_PORT", "SPARK_MASTER_UI_PORT", "SANFRANCISCO_PORT", "NEWYORK_PORT")


def run_stack(command: str) -> subprocess.CompletedProcess:
    """``./run stack <command>`` as a user runs it (the script, with this interpreter)."""
    return subprocess.run(
        [sys.executable, str(stack.REPO / "scripts" / "stack.py"), command],
        capture_output=True,
        text=True,
        timeout=3000,
    )


def leftovers(host: str) -> dict[str, str]:
    """The stack's containers, networks and volumes that the engine at ``host`` still lists."""
    label = f"label=com.docker.compose.project={stack.PROJECT}"
    env = {**os.environ, "DOCKER_HOST": host}
    found = {}
    for kind in ("container", "network", "volume"):
        listing = ["docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", label]
        found[kind] = subprocess.run(listing, env=env, capture_output=True, text=True, check=True).stdout.strip()
    return found


def engine_processes() -> list[str]:
    """Command lines of processes that use this repository's .docker/ (dockerd, its containerd)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(stack.DATA_ROOT) in text or str(stack._exec_root()) in text:
            found.append(text.strip())
    return found


@pytest.fixture(scope="module")
def stack_run(session_servers_stopped):
    """up, check and down, once for the module: what check saw, and what down left. The module runs
    last and alone (tests/conftest.py), after this worker's own brokers and Spark are stopped."""
    try:
        host = stack.engine_host(start=True)
    except stack.DockerUnavailable as err:
        pytest.skip(str(err))
    saved = {name: os.environ.get(name) for name in PORT_VARIABLES}
    os.environ.update({name: str(free_port()) for name in PORT_VARIABLES})
    engine = stack.Stack(host)
    try:
        engine.up()
        result = stack.check(engine)
    finally:
        try:
            engine.down()
            left = leftovers(host)
        finally:
            down = run_stack("down")  # as a user runs it: also stops the dockerd of .docker/
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    yield result, left, down, host


def test_check_replicates_through_the_stack(stack_run):
    result, _, _, _ = stack_run
    # Two messages copied by the autosetup's copystream, one replicated by the gateway: each once.
    assert result.consumed == ["again", "hello", "world"]
    assert result.replica_row["isUptodate"] is True
    assert result.replica_row["pendingMessages"] == 0
    # copystream and the gateway ran on the stack's Spark cluster, their drivers on the Celery worker
    assert "streamrep-copystream" in result.spark_apps and "streamrep-gateway-newyork" in result.spark_apps
    # stream_replica_verify compared it on the Spark cluster and recorded it the same (issue 32)
    assert "streamrep-diffstreams" in result.spark_apps
    assert result.verified_row["verification"] == "same", result.verified_row
    assert result.verified_row["verificationSummary"].startswith("same: 6 messages compared")
    assert result.gateway["engine"] == "spark" and result.gateway["master"] == "spark://spark-master:7077"
    assert result.gateway["host"] in result.worker_hostnames
    for part in (
        "up",
        "check: autosetup DAG (copystream on the Spark cluster)",
        "check: gateway started, 1 message produced and replicated",
        "check: verification DAG (diffstreamswithcrc on the Spark cluster)",
    ):
        assert part in result.timings


def test_down_leaves_nothing_behind(stack_run):
    _, left, down, host = stack_run
    assert left == {"container": "", "network": "", "volume": ""}
    assert down.returncode == 0 and down.stderr == "", down.stderr
    if host == f"unix://{stack.SOCKET}":
        assert engine_processes() == []
        assert stack.engine_mounts() == [], "dockerd left mounts behind"
        assert not stack.SOCKET.exists() and not stack.PIDFILE.exists()
