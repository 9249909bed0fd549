"""An Airflow venv that is not this repository's (``scripts/wheel_envs.py`` makes them), with an
Airflow home of its own: what the wheel-install and folder-deployment tests share."""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from airflow_production import LOADED_MACHINE, free_ports

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_GUIDE = REPO / "docs" / "airflow.md"
FILE_MARKER = re.compile(r"<!-- file: (?P<name>[\w/.]+) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)
# The caller's settings never leak into the venv's processes.
SCRUBBED = ("AIRFLOW", "STREAMREP_", "SPARK_", "PYSPARK_", "PYTHON", "VIRTUAL_ENV", "PYTEST")


def documented_files() -> dict[str, str]:
    """The files the Airflow guide (docs/airflow.md) shows whole, each after a ``<!-- file: NAME -->`` line."""
    text = AIRFLOW_GUIDE.read_text(encoding="utf-8")
    return {m["name"]: m["body"] for m in FILE_MARKER.finditer(text)}


def build_wheel(out: Path) -> Path:
    """The wheel and sdist of this checkout, built offline with the locked hatchling."""
    done = subprocess.run(
        ["uv", "build", "--no-build-isolation", "--offline", "--quiet", "--out-dir", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("streamrep-*-py3-none-any.whl")
    assert list(out.glob("streamrep-*.tar.gz")), "no sdist"
    return built


def require_venv(venv: Path) -> None:
    if not (venv / ".lock.sha256").is_file():
        pytest.skip(f"{venv} is missing: ./run test makes it (scripts/wheel_envs.py install; no such Python here?)")


@dataclass
class AirflowVenv:
    """A venv, a root folder holding an Airflow home, and the environment of its processes."""

    venv: Path
    root: Path
    env: dict[str, str]

    @classmethod
    def make(cls, venv: Path, root: Path, **settings: str) -> AirflowVenv:
        home = root / "airflow-home"
        (home / "plugins").mkdir(parents=True, exist_ok=True)
        (home / "dags").mkdir(exist_ok=True)
        (port,) = free_ports(1)
        env = {k: v for k, v in os.environ.items() if not k.startswith(SCRUBBED)}
        env.update(
            {
                "PATH": os.pathsep.join([str(venv / "bin"), env.get("PATH", "")]),  # java stays on PATH
                "AIRFLOW_HOME": str(home),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(root / "passwords.json"),
                "AIRFLOW__API__PORT": str(port),
                "AIRFLOW__API_AUTH__JWT_SECRET": "wheel-install-test-secret-of-a-decent-length-for-hmac-sha512-keys",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "STREAMREP_HOME": str(root / "streamrep-home"),
                "PYTHONUNBUFFERED": "1",
                **LOADED_MACHINE,
                **settings,
            }
        )
        (root / "passwords.json").write_text(json.dumps({"admin": "admin-password"}))
        return cls(venv, root, env)

    @property
    def python_version(self) -> str:
        (lib,) = (self.venv / "lib").glob("python3.*")
        return lib.name.removeprefix("python")

    def run(
        self,
        *args: str,
        timeout: float = 300,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            cwd=cwd or self.root,
            env=env or self.env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = 300, input: str | None = None) -> str:
        done = self.run(*args, timeout=timeout, input=input)
        assert done.returncode == 0, (
            f"{' '.join(args)}: {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
        return done.stdout
