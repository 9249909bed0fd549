"""Virtual environments holding a released Airflow on a given Python, for the wheel-install test
and the folder-deployment test.

Each tested cell (an Airflow release on an interpreter) has a lock in
``tests/wheel/airflow-<release>-py<python>.txt``: what uv resolved from the package index for that
release plus streamrep's declared dependencies (and pytest, to run the example test of
docs/airflow.md), with hashes. Airflow's published constraint files are not reachable from this
machine, so the locks stand in for them: Airflow and everything it brings are resolved as the
index stood the day after the release (``--exclude-newer``), which is what its constraint file
pins; streamrep's own direct dependencies as the index stood on ``LOCKED_ON``. (Resolved with
today's index instead, Airflow 3.2.2's API server does not start: pydantic 2.14, released after
it, rejects its models.) The full matrix of interpreters runs on the newest Airflow; each older
Airflow minor gets one cell.

    python scripts/wheel_envs.py lock      # re-resolve every lock (a developer's step)
    python scripts/wheel_envs.py install   # ./run test: one venv per cell in .cache/wheel-envs

``install`` makes ``.cache/wheel-envs/airflow-<release>-py<python>/`` only when it is missing or
its lock changed (a stamp holds the lock's SHA-256), so the tests download nothing. Those venvs
have streamrep's dependencies but not streamrep: the wheel-install test installs the built wheel
with pip; the folder-deployment test uses its own venv (``FOLDERS``) and never installs it. The
wheelhouse holds pyspark-client's wheel, which the test reinstalls over pyspark with pip.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOCKS = REPO / "tests" / "wheel"
ENVS = REPO / ".cache" / "wheel-envs"
# The Airflow releases tested, the newest of each supported minor, with the day after each was
# published on PyPI (3.2.2: 2026-05-29, 3.3.2: 2026-09-17).
AIRFLOW_RELEASED = {"3.2.2": "2026-05-30", "3.3.2": "2026-09-18"}
NEWEST = "3.3.2"
PYTHONS = ("3.11", "3.12", "3.13")  # what pyproject.toml's requires-python admits and CI runs
# (Airflow release, Python): every interpreter on the newest Airflow, one cell per older minor.
CELLS = tuple([(NEWEST, py) for py in PYTHONS] + [(r, PYTHONS[0]) for r in AIRFLOW_RELEASED if r != NEWEST])
FOLDERS = (NEWEST, PYTHONS[-1])  # the folder-deployment test's Airflow: streamrep never installed
# streamrep's direct dependencies (pyproject.toml), the test's, and the providers' common-compat
# that Spark provider 6.3.4 requires (providers are released apart from Airflow): not held back.
DIRECT = (
    "apache-airflow-providers-apache-spark",
    "apache-airflow-providers-common-compat",
    "apache-airflow-providers-common-messaging",
    "pyspark",
    "pyspark-client",
    "pyarrow",
    "pandas",
    "confluent-kafka",
    "prometheus-client",
    "pytest",
)
LOCKED_ON = "2026-11-28"
# What the example test of docs/airflow.md needs beside streamrep: the repository's pinned pytest.
TEST_REQUIREMENTS = ("pytest==9.2.0",)
WHEELHOUSE = ENVS / "wheelhouse"


def cell_name(release: str, python: str) -> str:
    return f"airflow-{release}-py{python}"


def lock_path(release: str, python: str) -> Path:
    return LOCKS / f"{cell_name(release, python)}.txt"


def env_path(release: str, python: str, purpose: str = "") -> Path:
    return ENVS / f"{purpose}{cell_name(release, python)}"


def find_python(version: str) -> str | None:
    """An interpreter of ``version`` (``3.12``): pyenv's build, else ``python3.12`` on PATH."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for candidate in sorted(pyenv.glob(f"{version}.*/bin/python{version}"), reverse=True):
        return str(candidate)
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:  # not a dead shim
        return found
    return None


def lock() -> None:
    LOCKS.mkdir(parents=True, exist_ok=True)
    for release, python in CELLS:
        wanted = LOCKS / f"airflow-{release}.in"
        wanted.write_text("\n".join([f"apache-airflow=={release}", *TEST_REQUIREMENTS]) + "\n")
        # --no-config: the lock holds what pip gives a user, whatever the repository's uv settings.
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
                python,
                "--generate-hashes",
                "--no-header",
                "--exclude-newer",
                AIRFLOW_RELEASED[release],
                *(f"--exclude-newer-package={name}={LOCKED_ON}" for name in DIRECT),
                "--custom-compile-command",
                "python scripts/wheel_envs.py lock",
                "-o",
                str(lock_path(release, python)),
            ],
            check=True,
            cwd=REPO,
        )
        print(f"wheel_envs: {lock_path(release, python).relative_to(REPO)}")


def make_env(release: str, python: str, purpose: str = "") -> None:
    """The venv of one cell, exactly its lock, unless it is there already for this lock."""
    lock_file, env = lock_path(release, python), env_path(release, python, purpose)
    digest = hashlib.sha256(lock_file.read_bytes()).hexdigest()
    stamp = env / ".lock.sha256"
    if stamp.is_file() and stamp.read_text() == digest:
        return
    interpreter = find_python(python)
    if interpreter is None:
        print(f"wheel_envs: no Python {python} here: its cells will be skipped", file=sys.stderr)
        return
    shutil.rmtree(env, ignore_errors=True)
    run = lambda *args: subprocess.run(["uv", *args], check=True, cwd=REPO)  # noqa: E731
    run("venv", "--quiet", "--seed", "--python", interpreter, str(env))
    # Compiled, as ./run compiles .venv: each Airflow process of the tests would compile its imports.
    target = ("--python", str(env / "bin" / "python"), "--require-hashes", "--compile-bytecode")
    run("pip", "sync", "--quiet", *target, str(lock_file))
    stamp.write_text(digest)
    print(f"wheel_envs: {env.relative_to(REPO)}")


def wheelhouse() -> None:
    """pyspark-client's wheel, as the locks pin it, for the test's reinstall over pyspark (built
    here from its sdist, the only form the index has: the test itself builds nothing)."""
    pinned = [line.split(" ")[0] for line in lock_path(*CELLS[0]).read_text().splitlines()]
    (client,) = [p for p in pinned if p.startswith("pyspark-client==")]
    if list(WHEELHOUSE.glob(f"pyspark_client-{client.split('==')[1]}-*.whl")):
        return
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    pip = env_path(*CELLS[0]) / "bin" / "pip"  # seeded; the repository's .venv has no pip
    subprocess.run([str(pip), "wheel", "--quiet", "--no-deps", "-w", str(WHEELHOUSE), client], check=True)
    print(f"wheel_envs: {WHEELHOUSE.relative_to(REPO)} ({client})")


def install() -> None:
    for release, python in CELLS:
        make_env(release, python)
    make_env(*FOLDERS, purpose="folders-")
    wheelhouse()


if __name__ == "__main__":
    commands = {"lock": lock, "install": install}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        raise SystemExit("usage: python scripts/wheel_envs.py lock | install")
    commands[sys.argv[1]]()
