"""A user's own PySpark job (docs/examples/spark_count_job.py), run as a user runs it: a plain
``python job.py`` with no ``PYSPARK_PYTHON`` set, where the ``python3`` on the PATH does not have
streamrep (issue 21, item 19). Spark's Python workers must find streamrep anyway; a worker Python
chosen by hand that cannot import it is refused in one line before any task runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from replication_helpers import clean_env, produce

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parents[2] / "docs" / "examples" / "spark_count_job.py"
STREAM = "/mapr/sanfrancisco/activity"


@pytest.fixture
def bare_python() -> str:
    """An interpreter without streamrep: the one the project's venv was made from."""
    python = os.path.realpath(sys.executable)
    if subprocess.run([python, "-c", "import streamrep"], capture_output=True).returncode == 0:
        pytest.skip(f"{python} has streamrep installed: no bare interpreter to test with")
    return python


def run_job(streamrep_home: Path, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = clean_env(streamrep_home, **env)
    if "PYSPARK_PYTHON" not in env:
        environment.pop("PYSPARK_PYTHON", None)
        environment.pop("PYSPARK_DRIVER_PYTHON", None)
    return subprocess.run(
        [sys.executable, str(JOB), STREAM], capture_output=True, text=True, env=environment, timeout=600, cwd=tmp_path
    )


@pytest.fixture
def api(api):
    api.clusters.add("sanfrancisco")
    return api


def test_a_users_job_reads_a_stream_without_pyspark_python(api, streamrep_home, tmp_path, bare_python):
    api.create_stream(STREAM)
    api.create_topic(STREAM, "clicks", 2)
    produce(api, f"{STREAM}:clicks", (f"c{i}" for i in range(40)))
    produce(api, f"{STREAM}:views", (f"v{i}" for i in range(3)))
    shadow = tmp_path / "bin"  # the python3 a bare PATH finds has no streamrep
    shadow.mkdir()
    (shadow / "python3").symlink_to(bare_python)
    done = run_job(streamrep_home, tmp_path, PATH=f"{shadow}{os.pathsep}{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert {topic: c["messages"] for topic, c in counts.items()} == {"clicks": 40, "views": 3}
    newest = max(
        m.timestamp for m in api.store(api.path(STREAM)).read(api.entry(STREAM).uuid, "views", 0, 0, 10)
    )  # one partition
    assert counts["views"]["newest_ms"] == newest  # the TimestampType column, back to the millisecond


def test_a_worker_python_without_streamrep_is_refused_in_one_line(api, streamrep_home, tmp_path, bare_python):
    api.create_stream(STREAM)
    done = run_job(streamrep_home, tmp_path, PYSPARK_PYTHON=bare_python)
    assert done.returncode != 0
    assert f"Spark's Python workers run {bare_python}" in done.stderr
    assert (
        f"cannot import streamrep and pyarrow: set it to a Python that has them, such as {sys.executable}"
        in done.stderr
    )
    assert "Py4JJavaError" not in done.stderr  # refused before any task ran
