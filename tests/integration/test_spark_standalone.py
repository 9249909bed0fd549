"""copystream, a gateway and diffstreams on a real Spark standalone cluster, through the CLI's ``-master``.

The cluster (``spark_cluster``) is a master and one worker from pyspark's own ``spark-class``,
started without PYTHONPATH. The executors run a Python of their own (``STREAMREP_SPARK_PYTHON``)
in which streamrep is a wheel built from this repository and installed: not this venv's
editable install, not the repository's ``plugins/`` folder. That the job succeeds proves that
what docs/operations.md ("Running on a Spark cluster") asks to install on the workers is enough.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

from streamrep.client import Producer
from streamrep.model.message import Message
from streamrep.replication.apply import ORIGIN_HEADER

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SF, NY = "sanfrancisco", "newyork"
SOURCE, REPLICA = f"/mapr/{SF}/orders", f"/mapr/{NY}/orders"
TOPICS = {"placed": 3, "shipped": 2}
SPARK_TIMEOUT = 600  # one Spark app on a busy 2-core machine
EXECUTOR = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@pytest.fixture(scope="module")
def worker_python(tmp_path_factory) -> Path:
    """A Python for the executors with streamrep installed from a wheel: a venv whose other
    packages (pyarrow, pyspark, confluent-kafka) come from this venv's site-packages through a
    ``.pth`` line. A folder added that way is not a site directory, so this venv's own ``.pth``
    files (its editable install of streamrep) are not read: streamrep comes from the wheel alone.
    Each start of this Python appends its parent's command line to ``started.log`` beside the
    venv, so the test can see that executors ran it."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH (./run installs it): it builds the streamrep wheel")
    root = tmp_path_factory.mktemp("worker-python")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "streamrep-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    started_log = root / "started.log"
    (site / "streamrep-witness.pth").write_text(  # a .pth line that starts with "import" runs at every start
        f"import os; open({str(started_log)!r}, 'a').write(open(f'/proc/{{os.getppid()}}/cmdline', 'rb')"
        ".read().replace(b'\\0', b' ').decode(errors='replace') + '\\n')\n"
    )
    built = subprocess.run(
        [uv, "build", "--wheel", "--offline", "--out-dir", str(root / "dist"), str(REPO)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = (root / "dist").glob("streamrep-*.whl")
    installed = subprocess.run(
        [uv, "pip", "install", "--offline", "--no-deps", "--python", str(python), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = subprocess.run(
        [str(python), "-c", "import streamrep; print(streamrep.__file__)"],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).parent == site / "streamrep", where
    assert started_log.is_file()
    return python


def produce(admin, topic: str, values) -> list[str]:
    """Keyed messages (eleven keys, over every partition), every third with headers."""
    values = list(values)
    with Producer(admin, batch_size=50_000) as producer:
        for i, value in enumerate(values):
            producer.send(
                topic,
                value,
                key=f"key-{i % 11}",
                headers=[("seq", str(i)), ("bin", bytes([i % 256, 0, 255]))] if i % 3 == 0 else None,
            )
    return values


def messages_by_partition(admin, stream: str) -> dict[tuple[str, int], list[Message]]:
    sp = admin.path(stream)
    entry = admin.entry(sp)
    store = admin.store(sp)
    result = {}
    for topic, count in store.topics(entry.uuid).items():
        for partition in range(count):
            start, end = store.offsets(entry.uuid, topic, partition)
            result[(topic, partition)] = store.read(entry.uuid, topic, partition, start, end - start + 1)
    return result


def assert_replica_exactly_once(admin, source: str, replica: str) -> int:
    """Every source message once in the replica, in the same topic and partition and order, with
    its key, headers and timestamp; returns how many."""

    def content(m: Message) -> tuple:
        return m.value, m.key, tuple(h for h in m.headers if h[0] != ORIGIN_HEADER), m.timestamp

    want = messages_by_partition(admin, source)
    got = messages_by_partition(admin, replica)
    assert set(got) == set(want)
    for key, messages in want.items():
        assert [content(m) for m in got[key]] == [content(m) for m in messages], f"{replica} {key} differs"
    return sum(len(m) for m in want.values())


def applications(cluster) -> list[dict]:
    with urllib.request.urlopen(f"{cluster.webui}/json/", timeout=10) as response:
        status = json.load(response)
    return status["activeapps"] + status["completedapps"]


@pytest.mark.timeout(1500)  # the cluster's start and three apps; each app alone took 2-3 min on a busy machine
def test_copystream_gateway_and_diffstreams_on_a_standalone_cluster(
    spark_cluster, worker_python, cli, api, streamrep_home, tmp_path
):
    cluster = spark_cluster
    api.clusters.add(SF)
    api.clusters.add(NY)
    api.create_stream(SOURCE, defaultpartitions=3)
    for topic, partitions in TOPICS.items():
        api.create_topic(SOURCE, topic, partitions)
    before = produce(api, f"{SOURCE}:placed", (f"placed-{i}" for i in range(3000))) + produce(
        api, f"{SOURCE}:shipped", (f"shipped-{i}" for i in range(1000))
    )
    # The seeds' manual setup: replica registered paused, upstream agreed, copy, resume.
    api.create_stream(REPLICA, copymetafrom=SOURCE)
    api.add_replica(SOURCE, REPLICA, paused=True)
    api.add_upstream(REPLICA, SOURCE)
    on_cluster = {"STREAMREP_SPARK_PYTHON": str(worker_python)}

    def on_spark(*args: str) -> tuple[int, str, str]:
        """A command run as a Spark app on the cluster, with ``-json``."""
        spark = ("-engine", "spark", "-master", cluster.master_url, "-json")
        return cli(*args, *spark, timeout=SPARK_TIMEOUT, **on_cluster)

    started = time.monotonic()
    code, out, err = on_spark("copystream", "-src", SOURCE, "-dst", REPLICA)
    print(f"\ncopystream of {len(before)} messages on {cluster.master_url}: {time.monotonic() - started:.1f} s")
    assert code == 0, err[-3000:]
    assert json.loads(out)["data"][0]["messages"] == len(before)
    assert assert_replica_exactly_once(api, SOURCE, REPLICA) == len(before)

    api.resume_replica(SOURCE, REPLICA)
    after = produce(api, f"{SOURCE}:placed", (f"later-{i}" for i in range(500)))
    started = time.monotonic()
    code, out, err = cli(
        "gateway",
        "run",
        "-cluster",
        NY,
        "-id",
        "gw1",
        "-once",
        "-master",
        cluster.master_url,
        timeout=SPARK_TIMEOUT,
        **on_cluster,
    )
    print(f"gateway -once of {len(after)} messages: {time.monotonic() - started:.1f} s")
    assert code == 0, err[-3000:]
    total = len(before) + len(after)
    assert assert_replica_exactly_once(api, SOURCE, REPLICA) == total

    # The replica checked by its content, on the cluster: the same.
    started = time.monotonic()
    code, out, err = on_spark("diffstreamswithcrc", "-src", SOURCE, "-dst", REPLICA, "-outdir", str(tmp_path / "diff"))
    print(f"diffstreamswithcrc of {2 * total} messages: {time.monotonic() - started:.1f} s")
    assert code == 0, err[-3000:]
    [row] = json.loads(out)["data"]
    assert row["same"] and row["compared"] == 2 * total and row["dstBehind"] == 0
    assert (tmp_path / "diff" / "opsForDst" / "manifest.json").is_file()

    # The three apps ran on the cluster: the master lists them as finished, the worker kept their
    # executors' folders, and the executors started the worker Python.
    apps = {app["name"]: app for app in applications(cluster)}
    ours = ("streamrep-copystream", f"streamrep-gateway-{NY}", "streamrep-diffstreams")  # the sessions' names
    assert set(ours) <= set(apps), sorted(apps)
    assert [apps[name]["state"] for name in ours] == ["FINISHED"] * 3
    folders = {p.name for p in cluster.work_dir.iterdir()}
    assert {apps[name]["id"] for name in ours} <= folders
    parents = (worker_python.parents[2] / "started.log").read_text().splitlines()
    assert sum(EXECUTOR in parent for parent in parents) >= 3, parents  # at least once for each app
