"""How an in-process gateway (``gateway run -engine local``, the real executable) ends: SIGTERM
stops it cleanly (it says so, withdraws its heartbeat at once, exits 0); a ``-once`` drain counts
only the messages it applied, ends with a cursor sync, and fails in one line naming an upstream
it cannot read; a full disk is one line naming the cause, and a gateway that dies of it gives up
its heartbeat and leaves the error on its replica."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from replication_helpers import STREAMREP_EXE, all_values, clean_env, produce, wait_until

from streamrep.client import Consumer
from streamrep.replication.gateway import HEARTBEAT_KIND

pytestmark = pytest.mark.slow

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
ONCE = ("gateway", "run", "-cluster", "newyork", "-engine", "local", "-once", "true")


def setup(cli, api, ny_url: str | None = None) -> None:
    assert cli("cluster", "add", "-name", "sanfrancisco")[0] == 0
    extra = ("-url", ny_url) if ny_url else ()
    code, _, err = cli("cluster", "add", "-name", "newyork", *extra)
    assert code == 0, err
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", 2)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)


def heartbeats(api) -> dict:
    return api.clusters.store("newyork").catalog_list(HEARTBEAT_KIND)


def replica_row(cli) -> dict:
    code, out, err = cli("stream", "replica", "list", "-path", SF, "-json")
    assert code == 0, err
    (row,) = json.loads(out)["data"]
    return row


def start_gateway(streamrep_home) -> subprocess.Popen:
    """``gateway run -engine local -id gw1`` of newyork, the real executable, its output piped."""
    return subprocess.Popen(
        [str(STREAMREP_EXE), "gateway", "run", "-cluster", "newyork", "-engine", "local", "-id", "gw1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(streamrep_home),
    )


def test_sigterm_stops_a_local_gateway_cleanly(cli, api, streamrep_home):
    setup(cli, api)
    sent = produce(api, f"{SF}:t", [f"a{i}" for i in range(50)])
    proc = start_gateway(streamrep_home)
    try:
        wait_until(lambda: "gw1" in heartbeats(api) and len(all_values(api, NY)) == 50, 120, "the gateway to replicate")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert err.count("\n") == 1 and "gateway gw1 stopped by SIGTERM" in err
    assert "gw1" not in heartbeats(api)  # withdrawn at once, not left to expire
    assert sorted(all_values(api, NY)) == sorted(sent)


def test_sigusr1_prints_where_a_local_gateway_is_and_it_replicates_on(cli, api, streamrep_home):
    """For an operator facing a gateway that seems stuck: ``kill -USR1`` prints every thread's stack."""
    setup(cli, api)
    sent = produce(api, f"{SF}:t", [f"a{i}" for i in range(20)])
    proc = start_gateway(streamrep_home)
    try:
        wait_until(lambda: len(all_values(api, NY)) == 20, 120, "the gateway to replicate")
        proc.send_signal(signal.SIGUSR1)
        sent += produce(api, f"{SF}:t", [f"b{i}" for i in range(20)])
        wait_until(lambda: len(all_values(api, NY)) == 40, 120, "the gateway to replicate on")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Current thread" in err and "streamrep/replication/gateway.py" in err, err
    assert err.splitlines()[-1] == "streamrep: gateway gw1 stopped by SIGTERM; its heartbeat is withdrawn"
    assert sorted(all_values(api, NY)) == sorted(sent)


def test_once_counts_only_applied_messages_and_ends_with_a_cursor_sync(cli, api):
    setup(cli, api)
    produce(api, f"{SF}:t", ["a", "b", "c"])
    consumer = Consumer(f"{SF}:t", group="g", from_start=True, admin=api)
    assert len(consumer.poll(10)) == 3
    consumer.commit()
    code, out, err = cli(*ONCE, "-json")
    assert code == 0, err
    assert json.loads(out)["data"][0]["messages"] == 3
    # the short drain left the group's cursors translated on the replica
    code, out, err = cli("stream", "cursor", "list", "-path", NY, "-group", "g", "-json")
    assert code == 0, err
    assert sum(1 for row in json.loads(out)["data"] if row["group"] == "g") == 2  # both partitions
    # multi-master: the reverse gateway reads NY's 3 messages of SF's origin and applies none
    api.add_replica(NY, SF)
    api.add_upstream(SF, NY)
    produce(api, f"{NY}:t", ["ny1", "ny2"])
    code, out, err = cli("gateway", "run", "-cluster", "sanfrancisco", "-engine", "local", "-once", "true", "-json")
    assert code == 0, err
    assert json.loads(out)["data"][0]["messages"] == 2  # not the 5 read
    assert sorted(all_values(api, SF)) == ["a", "b", "c", "ny1", "ny2"]


@pytest.mark.parametrize("damage", ["garbage", "empty", "deleted", "directory"])
def test_once_names_an_upstream_cluster_it_cannot_read(cli, api, damage):
    setup(cli, api)
    produce(api, f"{SF}:t", ["a"])
    store = Path(api.clusters.get("sanfrancisco").url.removeprefix("embedded:"))
    api.clusters.close()
    for extra in (store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        extra.unlink(missing_ok=True)
    if damage == "garbage":
        store.write_bytes(os.urandom(8192))
    elif damage == "empty":
        store.write_bytes(b"")
    elif damage == "deleted":
        store.unlink()
    else:
        store.unlink()
        store.mkdir()
    code, out, err = cli(*ONCE)
    assert code == 1, (out, err)
    assert err.count("\n") == 1 and err.startswith("streamrep: error: ")
    assert f"upstream {SF} of {NY} cannot be read" in err and "cluster sanfrancisco" in err


def test_a_running_gateway_says_once_which_upstream_it_cannot_read(cli, api, streamrep_home):
    """A continuous gateway whose upstream's store is unreadable keeps running (the store may come
    back), but says why its replica waits: one warning naming the upstream and the cause, not one
    per pass (nothing else says it: the replica's link lives in the catalog it cannot read)."""
    setup(cli, api)
    store = Path(api.clusters.get("sanfrancisco").url.removeprefix("embedded:"))
    api.clusters.close()
    for extra in (store.with_name(store.name + "-wal"), store.with_name(store.name + "-shm")):
        extra.unlink(missing_ok=True)
    store.write_bytes(os.urandom(8192))
    proc = start_gateway(streamrep_home)
    try:
        time.sleep(4)  # many passes (an idle pass waits 0.2 s)
        assert proc.poll() is None, proc.communicate()
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    lines = [line for line in err.splitlines() if f"upstream {SF} of {NY} cannot be read" in line]
    assert len(lines) == 1, err
    assert "sanfrancisco" in lines[0] and "file is not a database" in lines[0] and "Traceback" not in err


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB filesystem (tmpfs), or a skip where this process may not mount one."""
    where = tmp_path / "small"
    where.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root here")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(where: Path) -> None:
    """Take every free byte of the filesystem."""
    with open(where / "filler", "ab") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass


def test_a_full_disk_is_one_line_and_a_dying_gateway_gives_up_its_heartbeat(cli, api, small_disk, streamrep_home):
    setup(cli, api, ny_url=f"embedded:{small_disk / 'newyork.db'}")
    local = "/mapr/newyork/local"  # a stream of the replica's cluster that its own producers write
    api.create_stream(local)
    api.create_topic(local, "t", 1)
    sent = produce(api, f"{SF}:t", [f"m{i:05d}-" + "x" * 500 for i in range(4000)])  # ~2 MB: more than is free
    with open(small_disk / "filler", "wb") as f:  # leave about 400 KB free
        f.write(b"\0" * (2 * 1024 * 1024 - 600 * 1024))
    code, out, err = cli(*ONCE)
    assert code == 1, (out, err)
    assert err.count("\n") == 1 and "disk holding store" in err and "is full" in err and "Traceback" not in err
    fill(small_disk)  # not a byte left
    code, _, err = cli(
        "produce", "-path", f"{local}:t", stdin=("x" * 500 + "\n") * 5000
    )  # a producer on the full cluster
    assert code == 1 and err.count("\n") == 1 and "is full" in err
    # a continuous gateway dies of it: it says why, gives up its heartbeat, and its replica shows the error
    code, _, err = cli("gateway", "run", "-cluster", "newyork", "-engine", "local", "-id", "gw1", timeout=120)
    assert code == 1 and err.count("\n") == 1 and "is full" in err
    assert "gw1" not in heartbeats(api)
    row = replica_row(cli)
    assert "gateway gw1 stopped on an error" in (row["errors"] or "") and "is full" in row["errors"]
    # space again: the next drain completes it exactly once
    (small_disk / "filler").unlink()
    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    code, _, err = cli(*ONCE)
    assert code == 0, err
    assert sorted(all_values(api, NY)) == sorted(sent)


BAD_KAFKA_SETTINGS = {
    "ssl": ({"security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"}, "ssl"),
    "sasl": (
        {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "p"},
        "",
    ),
    "unknown": ({"no.such.setting": "1"}, "no.such.setting"),
}


@pytest.mark.parametrize("bad", sorted(BAD_KAFKA_SETTINGS))
def test_once_names_a_kafka_upstream_whose_settings_fail(cli, api, streamrep_home, kafka_broker, bad):
    namespace = f"t{os.urandom(5).hex()}-sf"
    api.clusters.add("sanfrancisco", url=f"kafka://{kafka_broker}", settings={"streamrep.namespace": namespace})
    api.clusters.add("newyork")
    api.create_stream(SF, ttl=0)
    api.create_topic(SF, "t", 1)
    api.create_stream(NY, copymetafrom=SF)
    api.add_replica(SF, NY)
    api.add_upstream(NY, SF)
    api.clusters.close()
    registry = streamrep_home / "clusters.json"
    data = json.loads(registry.read_text())
    settings, fragment = BAD_KAFKA_SETTINGS[bad]
    data["clusters"]["sanfrancisco"]["settings"].update(settings)
    registry.write_text(json.dumps(data))
    code, out, err = cli(*ONCE, timeout=180)
    assert code == 1, (out, err)
    assert err.count("\n") == 1 and err.startswith("streamrep: error: ") and "internal error" not in err
    assert f"upstream {SF} of {NY} cannot be read" in err and "sanfrancisco" in err and fragment in err
