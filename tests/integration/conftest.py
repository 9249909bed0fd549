"""Fixtures for integration tests: the real ``streamrep`` executable and real processes.

Every test gets its own ``STREAMREP_HOME`` (a fresh ``tmp_path``) and runs as user
``alice`` unless it says otherwise, so no test sees another's clusters.
"""

from __future__ import annotations

import subprocess
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
