"""diffstreams and diffstreamswithcrc on Spark (issue 32, step 2): the Spark engine finds exactly
what the in-process engine finds and writes the same ops files; ``-engine auto`` keeps small
streams in process; a killed Spark comparison leaves no process and no ops behind.

One stream pair holds every planted case, one topic each, so that one Spark job per variant
checks them all. The comparisons on the module's SparkSession (``spark``) run ``diff_job`` as the
app does; two tests run the real app through spark-submit (the CLI's ``-engine auto`` above its
threshold, and a run killed through its parent). The standalone cluster's run is in
``test_spark_standalone.py``, on the cluster that test starts anyway.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from replication_helpers import STREAMREP_EXE, alive, clean_env, command

from streamrep.cli.main import run
from streamrep.model.message import ORIGIN_HEADER, Message
from streamrep.replication import ops as ops_module
from streamrep.replication.diff import DiffResult, Kind
from streamrep.replication.ops import MANIFEST, OPS_FOR_DST, OPS_FOR_SRC, DiffRequest, diff_to_ops
from streamrep.spark.diff import diff_job
from streamrep.spark.lifetime import job_processes

pytestmark = pytest.mark.slow

SF = "/mapr/sanfrancisco/activity"
NY = "/mapr/newyork/activity"
PER_PARTITION = 15  # messages of each planted topic's partitions


def drop_one(partition, copies):
    return copies[:3] + copies[4:] if partition == 0 else copies


def add_one_of_its_own(partition, copies):
    return copies + [Message(b"planted", b"x")] if partition == 1 else copies


def flip_a_byte(partition, copies):
    if partition == 1:
        m = copies[2]
        copies[2] = m._replace(value=bytes([m.value[0] ^ 1]) + m.value[1:])
    return copies


def change_a_header(partition, copies):
    if partition == 0:
        m = copies[5]
        copies[5] = m._replace(headers=tuple((k, b"changed" if k == "trace" else v) for k, v in m.headers))
    return copies


def swap_two(partition, copies):
    if partition == 1:
        copies[3], copies[4] = copies[4], copies[3]
    return copies


def unchanged(partition, copies):
    return copies


# topic: (what NY's copy of it undergoes, what a comparison finds in it)
PLANTED = {
    "missing": (drop_one, {Kind.MISSING_IN_DST: 1}),
    "extra": (add_one_of_its_own, {Kind.EXTRA_IN_DST: 1}),
    "byte": (flip_a_byte, {Kind.CHANGED: 1}),
    "header": (change_a_header, {Kind.CHANGED: 1}),
    "swapped": (swap_two, {Kind.OUT_OF_ORDER: 1}),
    "same": (unchanged, {}),
}


def write(admin, path: str, topic: str, partition: int, messages: list[Message]) -> None:
    sp = admin.path(path)
    admin.store(sp).append(admin.entry(sp).uuid, topic, {partition: messages})


def plant(admin, topics=PLANTED, per_partition: int = PER_PARTITION, partitions: int = 2) -> None:
    """SF with ``topics``, and NY (not linked to it) holding SF's messages as a gateway writes them
    (origin headers), after each topic's change."""
    admin.create_stream(SF, ttl=0)
    admin.create_stream(NY, ttl=0)
    sf = admin.entry(admin.path(SF)).uuid
    for topic, (change, _) in topics.items():
        admin.create_topic(SF, topic, partitions)
        admin.create_topic(NY, topic, partitions)
        for partition in range(partitions):
            held = [
                Message(f"{topic}-{partition}-{i}".encode(), f"k{i}".encode(), (("trace", str(i).encode()),), 1_000 + i)
                for i in range(per_partition)
            ]
            write(admin, SF, topic, partition, held)
            copies = [
                m._replace(headers=(*m.headers, (ORIGIN_HEADER, f"{sf}/{partition}/{offset}".encode())))
                for offset, m in enumerate(held)
            ]
            write(admin, NY, topic, partition, change(partition, copies))


def by_topic(result: DiffResult) -> dict[str, dict[Kind, int]]:
    found: dict[str, dict[Kind, int]] = {topic: {} for topic in PLANTED}
    for d in result.differences:
        found[d.topic][d.kind] = found[d.topic].get(d.kind, 0) + 1
    return found


def ops_files(outdir: Path) -> dict[str, object]:
    """Every file of both ops directories, the manifests without their ``created`` time."""
    files: dict[str, object] = {}
    for direction in (OPS_FOR_DST, OPS_FOR_SRC):
        for path in sorted((outdir / direction).iterdir()):
            if path.name == MANIFEST:
                manifest = json.loads(path.read_text())
                assert isinstance(manifest.pop("created"), int)
                files[f"{direction}/{path.name}"] = manifest
            else:
                files[f"{direction}/{path.name}"] = path.read_text()
    return files


def counts(result: DiffResult) -> tuple:
    return (
        result.compared,
        result.dst_behind,
        result.src_behind,
        result.read_messages,
        result.read_bytes,
        result.runs,
        result.runs_differing,
        result.stopped_early,
    )


@pytest.mark.backends("embedded", "kafka")
def test_spark_finds_exactly_what_the_local_engine_finds(spark, admin, tmp_path):
    plant(admin)
    home = admin.clusters.home
    for crc in (False, True):
        local = diff_to_ops(admin, DiffRequest(SF, NY, str(tmp_path / f"local-{crc}"), crc=crc))
        on_spark = diff_job(spark, admin, DiffRequest(SF, NY, str(tmp_path / f"spark-{crc}"), crc=crc), home=home)
        assert by_topic(on_spark) == {topic: found for topic, (_, found) in PLANTED.items()}
        assert on_spark.differences == local.differences
        assert counts(on_spark) == counts(local)
        assert on_spark.compared == 2 * len(PLANTED) * 2 * PER_PARTITION  # NY: one dropped, one added
        assert ops_files(tmp_path / f"spark-{crc}") == ops_files(tmp_path / f"local-{crc}")
        assert on_spark.to_dict("o") == local.to_dict("o")
        if crc:  # only the differing runs were read again, on Spark as in process
            assert (on_spark.runs, on_spark.runs_differing) == (2 * len(PLANTED) + 1, 5)
            assert on_spark.read_messages < 2 * on_spark.compared
    # -first_exit: the first topic that differs ("byte") only, on Spark as in process
    local = diff_to_ops(admin, DiffRequest(SF, NY, str(tmp_path / "local-first"), first_exit=True))
    on_spark = diff_job(spark, admin, DiffRequest(SF, NY, str(tmp_path / "spark-first"), first_exit=True), home=home)
    assert on_spark.differences == local.differences and len(on_spark.differences) == 1
    assert on_spark.stopped_early and on_spark.differences[0].topic == "byte"
    assert counts(on_spark) == counts(local) and on_spark.read_messages == 4 * PER_PARTITION
    assert ops_files(tmp_path / "spark-first") == ops_files(tmp_path / "local-first")


def cli(*argv: str) -> tuple[int, str, str]:
    """The CLI in this process (so that a test can lower the threshold of ``-engine auto``)."""
    out, err = io.StringIO(), io.StringIO()
    return run(list(argv), out, err, io.StringIO()), out.getvalue(), err.getvalue()


def test_auto_runs_the_spark_app_above_its_threshold_and_in_process_below(admin, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")  # the CLI acts as alice, who made the streams
    plant(admin)
    local_status, _, local_err = cli("diffstreamswithcrc", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "l"))
    assert local_status == 1 and local_err.startswith("streamrep: error: differ: 1 missing in dst, 1 extra in dst,")
    # Below the threshold auto stays in process: with no Java at all, it still compares.
    no_java = {"JAVA_HOME": str(tmp_path / "no-java")}
    with monkeypatch.context() as patched:
        for name, value in no_java.items():
            patched.setenv(name, value)
        assert cli("diffstreamswithcrc", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "a")) == (1, "", local_err)
        status, _, err = cli("diffstreams", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "s"), "-engine", "spark")
        assert status != 0 and err.startswith("streamrep: error: Spark needs Java") and err.count("\n") == 1, err
        assert not (tmp_path / "s").exists()
    assert ops_files(tmp_path / "a") == ops_files(tmp_path / "l")
    # Above it, the Spark app through spark-submit: the same line, the same ops.
    monkeypatch.setattr(ops_module, "DIFF_IN_PROCESS_MAX", 10)  # ops.diff_engine decides for the CLI
    started = time.monotonic()
    status, _, err = cli("diffstreamswithcrc", "-src", SF, "-dst", NY, "-outdir", str(tmp_path / "x"))
    print(f"\ndiffstreamswithcrc on Spark through spark-submit: {time.monotonic() - started:.1f} s")
    assert (status, err) == (1, local_err)
    assert ops_files(tmp_path / "x") == ops_files(tmp_path / "l")


BIG = 150_000  # messages of each stream in the kill test: the scan is still running when it is killed


@pytest.mark.timeout(900)
def test_a_killed_spark_comparison_leaves_nothing_behind_and_a_rerun_works(admin, tmp_path):
    big = {"t": (unchanged, {})}
    plant(admin, big, per_partition=BIG // 2)
    env = clean_env(admin.clusters.home, STREAMREP_SPARK_MASTER="local[2]")
    outdir = tmp_path / "out"
    argv = [str(STREAMREP_EXE), "diffstreams", "-src", SF, "-dst", NY, "-outdir", str(outdir), "-engine", "spark"]
    parent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    job: list[int] = []
    deadline = time.monotonic() + 600
    while not any("pyspark.daemon" in command(p) for p in job):  # the tasks have started
        assert parent.poll() is None, parent.communicate()
        assert time.monotonic() < deadline, "the Spark job never started its Python workers"
        time.sleep(0.05)
        job = job_processes(parent.pid)
    job = [p for p in job if p != parent.pid]
    assert any("spark_apps/diffstreams.py" in command(p) for p in job)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=30)
    parent.stdout.close()
    parent.stderr.close()
    deadline = time.monotonic() + 90
    while alive(job) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(job), [(p, command(p)[:120]) for p in alive(job)]
    assert not (outdir / OPS_FOR_DST / MANIFEST).exists()  # nothing complete was written
    # A rerun into the same directory, now as empty as before, is a whole comparison.
    assert not outdir.exists() or not any(outdir.iterdir())
    done = subprocess.run(argv + ["-json"], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [row] = json.loads(done.stdout)["data"]
    assert row["same"] and row["compared"] == 2 * BIG
