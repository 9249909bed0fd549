"""Fixtures for integration tests: the real ``streamrep`` executable and real processes.

Every test gets its own ``STREAMREP_HOME`` (a fresh ``tmp_path``) and runs as user
``alice`` unless it says otherwise, so no test sees another's clusters.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from replication_helpers import STREAMREP_EXE, USER, clean_env

from streamrep.client import Clusters, StreamAdmin
from streamrep.model.ace import Identity


@pytest.fixture
def streamrep_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    return home


@pytest.fixture
def child_env(streamrep_home: Path) -> dict[str, str]:
    """The environment for a child Python process sharing the test's ``STREAMREP_HOME``."""
    return clean_env(streamrep_home)


CliResult = tuple[int, str, str]


@pytest.fixture
def cli(streamrep_home: Path) -> Callable[..., CliResult]:
    """``cli("stream", "info", "-path", p, stdin="...", user="eve")`` runs the real executable
    and returns ``(returncode, stdout, stderr)``; ``stdin`` may be text or bytes."""
    assert STREAMREP_EXE.exists(), f"the streamrep executable is missing: {STREAMREP_EXE}"

    def run(
        *args: str, stdin: str | bytes | None = None, user: str = USER, timeout: float = 60, **env: str
    ) -> CliResult:
        proc = subprocess.run(
            [str(STREAMREP_EXE), *map(str, args)],
            input=(stdin if stdin is not None else "").encode() if not isinstance(stdin, bytes) else stdin,
            capture_output=True,
            env=clean_env(streamrep_home, user, **env),
            timeout=timeout,
        )
        return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")

    return run


@pytest.fixture
def api(streamrep_home: Path):
    """The Python admin API over the same ``STREAMREP_HOME`` as ``cli``, as user alice."""
    admin = StreamAdmin(Clusters(str(streamrep_home)), Identity(USER))
    yield admin
    admin.clusters.close()


@pytest.fixture(scope="module")
def spark():
    """One local SparkSession for a module (starting one costs seconds), as user alice (Spark's
    Python workers inherit the environment of the JVM, fixed when it starts)."""
    from streamrep.spark.command import python_env

    saved = {k: os.environ.get(k) for k in ("STREAMREP_USER", "STREAMREP_GROUPS", *python_env())}
    os.environ.update({"STREAMREP_USER": "alice", "STREAMREP_GROUPS": "", **python_env()})
    from streamrep.spark import jobs

    started = time.monotonic()
    session = jobs.session("streamrep-tests")
    print(f"\nSparkSession started in {time.monotonic() - started:.1f}s")
    yield session
    session.stop()
    # py4j says goodbye from __del__ at interpreter exit, after pytest has closed the streams
    # its log handler writes to: an INFO line becomes a "Logging error" after the summary.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
