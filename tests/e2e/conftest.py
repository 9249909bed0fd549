"""End-to-end fixtures: one Airflow home and one STREAMREP_HOME for the whole session, the
real ``airflow`` and ``streamrep`` executables, and Airflow's UI started by the Airflow guide's
command (``scripts/airflow-ui.sh``) on a free port.

Every child process gets a scrubbed environment: the caller's ``AIRFLOW__*``/``AIRFLOW_CONN_*``
and ``STREAMREP_*`` settings never leak in.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from airflow_production import (  # noqa: F401 - fixtures (PostgreSQL, Airflow's services)
    LOADED_MACHINE,
    airflow_production,
    http_json,
    postgres,
)

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
USER = "alice"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Run:
    """A finished command: exit status, merged output and how long it took."""

    args: list[str]
    returncode: int
    output: str
    seconds: float


class Session:
    """The shared homes, the child environment and ways to run the executables."""

    def __init__(self, root: Path):
        self.root = root
        self.airflow_home = root / "airflow-home"
        self.streamrep_home = root / "streamrep-home"
        self.airflow_home.mkdir()
        self.streamrep_home.mkdir()
        self.port = free_port()
        self.timings: dict[str, float] = {}
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "STREAMREP_", "SPARK_", "PYSPARK_"))
        }
        env.update(
            {
                "PATH": os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),
                "AIRFLOW_HOME": str(self.airflow_home),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
                # the plugins folder stays AIRFLOW_HOME's empty one: the page comes from the package
                "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__PARALLELISM": "2",
                **LOADED_MACHINE,
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
                "PYSPARK_PYTHON": sys.executable,
                "STREAMREP_HOME": str(self.streamrep_home),
                "STREAMREP_USER": USER,
                "STREAMREP_GROUPS": "",
                "PYTHONUNBUFFERED": "1",
                "PORT": str(self.port),
            }
        )
        self.env = env

    def env_for(self, airflow_home: Path | None) -> dict[str, str]:
        return self.env if airflow_home is None else {**self.env, "AIRFLOW_HOME": str(airflow_home)}

    def copy_airflow_home(self, name: str) -> Path:
        """Another Airflow home with a copy of the migrated metadata database, so that Airflow
        processes can run side by side without sharing one SQLite file."""
        target = self.root / name
        shutil.copytree(self.airflow_home, target, ignore=shutil.ignore_patterns("logs"))
        cfg = target / "airflow.cfg"  # the generated config names its home's files
        cfg.write_text(cfg.read_text().replace(f"{self.airflow_home}/", f"{target}/"))
        return target

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        timeout: float = 300,
        label: str | None = None,
        airflow_home: Path | None = None,
    ) -> Run:
        return self.start(*args, stdin=stdin, label=label, airflow_home=airflow_home).wait(timeout)

    def start(
        self,
        *args: str,
        stdin: str | None = None,
        label: str | None = None,
        airflow_home: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Running:
        """Start a command in the background; ``.wait()`` gives its Run.

        :param env: the whole environment instead of the session's (e.g. other connections)."""
        return Running(
            self, [str(a) for a in args], stdin, label, env if env is not None else self.env_for(airflow_home)
        )

    def airflow(self, *args: str, **kwargs: Any) -> Run:
        return self.run(VENV_BIN / "airflow", *args, **kwargs)

    def streamrep(self, *args: str, stdin: str | None = None) -> Run:
        run = self.run(VENV_BIN / "streamrep", *args, stdin=stdin, timeout=60)
        assert run.returncode == 0, run.output
        return run

    def dags_test(
        self,
        dag_id: str,
        conf: dict[str, Any],
        label: str,
        airflow_home: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Running:
        """``airflow dags test`` started in the background."""
        return self.start(
            VENV_BIN / "airflow",
            "dags",
            "test",
            dag_id,
            "-c",
            json.dumps(conf),
            label=label,
            airflow_home=airflow_home,
            env=env,
        )


class Running:
    """A command running in the background, its output going to a file."""

    def __init__(self, session: Session, args: list[str], stdin: str | None, label: str | None, env: dict[str, str]):
        self.session, self.args, self.label = session, args, label
        self.started = time.monotonic()
        self.out = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=self.out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )
        if stdin is not None:
            self.proc.stdin.write(stdin.encode())
            self.proc.stdin.close()

    def wait(self, timeout: float = 420) -> Run:
        try:
            returncode = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        seconds = time.monotonic() - self.started
        if self.label:
            self.session.timings[self.label] = round(seconds, 1)
        self.out.seek(0)
        output = self.out.read().decode("utf-8", "replace")
        self.out.close()
        return Run(self.args, returncode, output, seconds)


@pytest.fixture(scope="session")
def e2e(tmp_path_factory) -> Session:
    """The session: Airflow's metadata database migrated once."""
    session = Session(tmp_path_factory.mktemp("e2e"))
    # a bound, not an expectation: migrating PostgreSQL took 101 s at load 30 (airflow_production)
    migrate = session.airflow("db", "migrate", timeout=900, label="airflow db migrate")
    assert migrate.returncode == 0, migrate.output[-3000:]
    yield session
    print("\ne2e timings (s):", json.dumps(session.timings, indent=1))


@pytest.fixture(scope="session")
def e2e_homes(tmp_path_factory) -> Session:
    """A session like ``e2e`` (its own homes, the scrubbed child environment) whose Airflow home
    has no database yet: for an Airflow on another database (``airflow_production``)."""
    session = Session(tmp_path_factory.mktemp("e2e-homes"))
    yield session
    print("\ne2e (own homes) timings (s):", json.dumps(session.timings, indent=1))


class AirflowUI:
    """Airflow started by scripts/airflow-ui.sh, reached over HTTP."""

    def __init__(self, base: str, process: subprocess.Popen, log: Path):
        self.base = base
        self.process = process
        self.log = log

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Waits for the answer however slow (up to airflow_production.HTTP_SECONDS) and retries
        a failed connection (``http_json``)."""
        return http_json(self.base + path, method, body)

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        assert status == 200, (path, status, body)
        return body


def _healthy(base: str) -> bool:
    try:
        # polled until healthy: a slow answer is a late one, not a failure
        with urllib.request.urlopen(base + "/api/v2/monitor/health", timeout=30) as resp:
            health = json.loads(resp.read())
    except (OSError, ValueError):
        return False
    return all(
        health.get(part, {}).get("status") == "healthy"
        for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
    )


@pytest.fixture(scope="module")  # stopped after its module: an idle Airflow costs the rest of the suite CPU
def airflow_ui_started(e2e: Session):
    """``scripts/airflow-ui.sh`` (airflow standalone: api-server, scheduler, dag-processor,
    triggerer) with login off, on a free port and its own copy of the metadata database, started
    in the background so that it comes up while the ``airflow dags test`` runs work; stopped with
    its whole process group."""
    log = e2e.root / "airflow-ui.log"
    env = e2e.env_for(e2e.copy_airflow_home("airflow-home-ui"))
    with open(log, "wb") as out:
        process = subprocess.Popen(
            ["bash", str(REPO / "scripts" / "airflow-ui.sh")],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    ui = AirflowUI(f"http://localhost:{e2e.port}", process, log)
    ui.started = time.monotonic()
    try:
        yield ui
    finally:
        _stop_group(process)


@pytest.fixture(scope="module")  # stopped after its module: an idle Airflow costs the rest of the suite CPU
def airflow_ui(e2e: Session, airflow_ui_started: AirflowUI) -> AirflowUI:
    """The UI, once every component is healthy."""
    ui = airflow_ui_started
    deadline = time.monotonic() + 240
    while not _healthy(ui.base):
        if ui.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"Airflow did not start (exit {ui.process.poll()}):\n{ui.log.read_text()[-4000:]}")
        time.sleep(1)
    # Healthy is not parsed: under load the dag-processor lists the DAGs minutes later, and a
    # trigger before that is a 404 (a CI run at load 60 met it).
    while not _dag_listed(ui.base, "stream_replica_control"):
        if ui.process.poll() is not None or time.monotonic() > deadline + 300:
            raise AssertionError(f"Airflow never listed the DAGs:\n{ui.log.read_text()[-4000:]}")
        time.sleep(2)
    e2e.timings["airflow-ui.sh until healthy (started during the dags tests)"] = round(time.monotonic() - ui.started, 1)
    return ui


def _dag_listed(base: str, dag_id: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/api/v2/dags/{dag_id}", timeout=30) as resp:
            return resp.status == 200
    except (OSError, ValueError):
        return False


def _stop_group(process: subprocess.Popen) -> None:
    """Stop the process group this fixture started (its pgid is the child's pid)."""
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            time.sleep(1)  # let the group's other members go too
        except subprocess.TimeoutExpired:
            continue
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout (and its sdist beside it), built once per session."""
    from airflow_venv import build_wheel

    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (the Debian package the tests install), driven by Playwright; skipped
    where it is missing. Playwright downloads no browser of its own."""
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()
