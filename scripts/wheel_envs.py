"""Virtual environments holding a released Airflow, for the wheel-install test.

Each supported Airflow release has a lock in ``tests/wheel/airflow-<version>.txt``: what uv
resolved from the package index for that release plus streamrep's declared dependencies (and
pytest, to run the example test of docs/airflow.md), with hashes. Airflow's published constraint files
are not reachable from this machine, so the locks stand in for them: Airflow and everything it
brings are resolved as the index stood the day after the release (``--exclude-newer``), which is
what its constraint file pins; streamrep's own direct dependencies as the index stands today.
(Resolved with today's index instead, Airflow 3.2.2's API server does not start: pydantic 2.14,
released after it, rejects its models.)

    python scripts/wheel_envs.py lock      # re-resolve every lock (a developer's step)
    python scripts/wheel_envs.py install   # ./run test: one venv per lock in .cache/wheel-envs

``install`` makes ``.cache/wheel-envs/airflow-<version>/`` only when it is missing or its lock
changed (a stamp holds the lock's SHA-256), so the test itself downloads nothing. The venvs are
not the repository's ``.venv``: streamrep is not in them until the test installs the built wheel.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCKS = REPO / "tests" / "wheel"
ENVS = REPO / ".cache" / "wheel-envs"
# The Airflow releases the wheel is tested on, the newest of each supported minor, with the day
# after each was published on PyPI (3.2.2: 2026-05-29, 3.3.2: 2026-09-17).
AIRFLOW_RELEASED = {"3.2.2": "2026-05-30", "3.3.2": "2026-09-18"}
AIRFLOW_RELEASES = tuple(AIRFLOW_RELEASED)
# streamrep's direct dependencies (pyproject.toml), the test's, and the providers' common-compat
# that Spark provider 6.3.4 requires (providers are released apart from Airflow): not held back.
DIRECT = (
    "apache-airflow-providers-apache-spark",
    "apache-airflow-providers-common-compat",
    "pyspark",
    "pyarrow",
    "pandas",
    "confluent-kafka",
    "prometheus-client",
    "pytest",
)
LOCKED_ON = "2026-11-25"
PYTHON = "3.11"
# What the example test of docs/airflow.md needs beside streamrep: the repository's pinned pytest.
TEST_REQUIREMENTS = ("pytest==9.2.0",)


def lock_path(release: str) -> Path:
    return LOCKS / f"airflow-{release}.txt"


def env_path(release: str) -> Path:
    return ENVS / f"airflow-{release}"


def split_pyspark(lock: Path) -> tuple[str, str]:
    """The lock without pyspark's requirement, and that requirement alone (with its hashes)."""
    rest, pyspark, inside = [], [], False
    for line in lock.read_text().splitlines(keepends=True):
        if not line.startswith((" ", "\t")):
            inside = line.startswith("pyspark==")
        (pyspark if inside else rest).append(line)
    if not pyspark:
        raise SystemExit(f"{lock}: no pyspark pin")
    return "".join(rest), "".join(pyspark)


def lock() -> None:
    LOCKS.mkdir(parents=True, exist_ok=True)
    for release, released in AIRFLOW_RELEASED.items():
        wanted = LOCKS / f"airflow-{release}.in"
        wanted.write_text("\n".join([f"apache-airflow=={release}", *TEST_REQUIREMENTS]) + "\n")
        # --no-config: without the repository's own override that drops pyspark-client, so the
        # lock holds what pip gives a user.
        subprocess.run(
            [
                "uv",
                "pip",
                "compile",
                "--quiet",
                "--no-config",
                str(REPO / "pyproject.toml"),
                str(wanted),
                "--python-version",
                PYTHON,
                "--generate-hashes",
                "--no-header",
                "--exclude-newer",
                released,
                *(f"--exclude-newer-package={name}={LOCKED_ON}" for name in DIRECT),
                "--custom-compile-command",
                "python scripts/wheel_envs.py lock",
                "-o",
                str(lock_path(release)),
            ],
            check=True,
            cwd=REPO,
        )
        print(f"wheel_envs: {lock_path(release).relative_to(REPO)}")


def install() -> None:
    for release in AIRFLOW_RELEASES:
        lock_file, env = lock_path(release), env_path(release)
        digest = hashlib.sha256(lock_file.read_bytes()).hexdigest()
        stamp = env / ".lock.sha256"
        if stamp.is_file() and stamp.read_text() == digest:
            continue
        shutil.rmtree(env, ignore_errors=True)
        python = shutil.which(f"python{PYTHON}") or sys.executable
        run = lambda *args: subprocess.run(["uv", *args], check=True, cwd=REPO)  # noqa: E731
        run("venv", "--quiet", "--seed", "--python", python, str(env))
        # The Spark provider requires pyspark-client, an older copy of pyspark's Python files that
        # overwrites them; pyspark goes in after it, as docs/airflow.md tells pip users. Installed
        # rather than reinstalled: uv's --reinstall refreshes, which rebuilds pyspark's 400 MB sdist.
        without_pyspark, pyspark = split_pyspark(lock_file)
        (env / "without-pyspark.txt").write_text(without_pyspark)
        (env / "pyspark.txt").write_text(pyspark)
        target = ("--python", str(env / "bin" / "python"), "--require-hashes")
        # compiled, as ./run compiles .venv: each Airflow process of the test would compile its imports
        run("pip", "sync", "--quiet", "--compile-bytecode", *target, str(env / "without-pyspark.txt"))
        run("pip", "install", "--quiet", "--compile-bytecode", "--no-deps", *target, "-r", str(env / "pyspark.txt"))
        stamp.write_text(digest)
        print(f"wheel_envs: {env.relative_to(REPO)} (Airflow {release})")


if __name__ == "__main__":
    commands = {"lock": lock, "install": install}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        raise SystemExit("usage: python scripts/wheel_envs.py lock | install")
    commands[sys.argv[1]]()
