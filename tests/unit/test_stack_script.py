"""./run stack's bad input, without an engine: each fails in one line that names the fix."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# scripts/ is not a package (and "conftest" may name another folder's under pytest-xdist).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import stack  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(stack.REPO / "scripts" / "stack.py"), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_no_engine_at_docker_host_is_one_line(tmp_path):
    done = run_script("check", DOCKER_HOST=f"unix://{tmp_path}/none.sock")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"stack: Docker unavailable: no engine answers at DOCKER_HOST=unix://{tmp_path}/none.sock; "
        "start it, or unset DOCKER_HOST to let ./run stack start its own"
    ]


def test_unknown_command_prints_the_usage():
    done = run_script("upp")
    assert done.returncode == 2
    assert done.stderr.strip() == "usage: ./run stack [up|check|down|logs SERVICE]"


def test_a_port_in_use_names_the_port_and_its_env_variable(monkeypatch):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for name in stack.published_ports():  # the others free, whatever runs here
            monkeypatch.setenv(name, str(free_port()))
        monkeypatch.setenv("NEWYORK_PORT", str(port))
        with pytest.raises(stack.StackError) as err:
            stack.check_ports()
    assert str(err.value) == (
        f"port {port} on 127.0.0.1 is already in use: stop what uses it, or set NEWYORK_PORT to a free port in .env"
    )


def test_every_published_port_has_its_variable():
    assert set(stack.published_ports()) == {"AIRFLOW_PORT", "SPARK_MASTER_UI_PORT", "SANFRANCISCO_PORT", "NEWYORK_PORT"}


def test_a_failed_build_names_the_service_and_its_error(monkeypatch, tmp_path):
    log = tmp_path / "build.log"
    log.write_text(
        "Step 2/4 : RUN apt-get update && apt-get install -y redis-server nothing-such\n"
        "\x1b[91mE: Unable to locate package nothing-such\n"
        'ERROR: for redis  (<Service: redis>, "The command ...")\n'
        "Service 'redis' failed to build : The command '/bin/sh -c apt-get update' returned a "
        "non-zero code: 100\n"
    )
    monkeypatch.setattr(stack, "BUILD_LOG", log)
    assert stack._build_failure() == "redis: E: Unable to locate package nothing-such"
