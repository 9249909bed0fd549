"""Airflow as it runs in production, for the end-to-end tests: PostgreSQL (Debian's server,
``initdb`` in a temporary folder, on a free loopback port) as the metadata database, and the
four services started one by one (``airflow api-server``, ``scheduler`` with the LocalExecutor,
``dag-processor``, ``triggerer``), with login on (simple auth manager, JWT over REST).

Nothing outlives the session, even a killed one. PostgreSQL is tethered to the pytest process
(PR_SET_PDEATHSIG, as Spark jobs are: ``streamrep.spark.lifetime.tether``). Each Airflow service
runs under a small supervisor (this file run as a script), itself tethered: SIGTERM to the
supervisor stops the service's process group, and after a grace period kills everything still
below it. A signal to the service alone is not enough: on SIGTERM the scheduler waits for its
running tasks (a continuous gateway never ends), and its task processes and their Spark jobs
(sessions of their own) would outlive it. The supervisor is a child subreaper, so orphans of
the tree are reparented to it and found.

The fixtures are registered by ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

import ctypes
import glob
import http.client
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from streamrep.spark.lifetime import job_processes, tether

REPO = Path(__file__).resolve().parents[2]
POSTGRES_USER = "postgres"  # the OS account the server runs as when we are root (postgres refuses root)
DB_USER = DB_NAME = "airflow"
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")
SERVICE_GRACE_SECONDS = 15  # for a service to stop by itself (the scheduler stops its tasks' Spark jobs)
PR_SET_CHILD_SUBREAPER = 36
# A generous bound on one REST call, retries included: on a loaded 2-core machine the api-server
# took more than 30 s to answer (idle: milliseconds). A slow answer is waited for, not retried.
HTTP_SECONDS = 300
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "PATCH", "DELETE"})

# Parsing a DAG file on a 2-core machine at a load average of 30-60 (the secured brokers restarting
# beside Spark and Airflow) took more than the 30 s Airflow allows (a quiet parse: 0.7 s): the DAG
# was dropped mid-run and its REST triggers got 404 (a rehearsal, 30 Nov 2026). Bounds, not waits.
LOADED_MACHINE = {
    "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",  # 30
    "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "330",  # 50
}

# Intervals lowered so that a test sees the scheduler act within seconds (defaults in comments).
FAST_AIRFLOW = {
    **LOADED_MACHINE,
    "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
    "AIRFLOW__CORE__PARALLELISM": "4",  # 32: a continuous gateway holds a slot for good
    "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",  # 5
    "AIRFLOW__SCHEDULER__JOB_HEARTBEAT_SEC": "2",  # 5
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",  # 1
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_SEC": "2",  # 0 (job_heartbeat_sec)
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",  # 300: a task process that died unnoticed
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",  # 10
    "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",  # 5
    "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",  # 300: new DAG files
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",  # 30: the files do not change here
}


def postgres_bindir() -> Path | None:
    """Debian's PostgreSQL server binaries (the newest installed major version), or the
    ``postgres`` on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[-3]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).resolve().parent if on_path else None


def http_json(
    url: str,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    timeout: float = HTTP_SECONDS,
    idempotent: bool | None = None,
) -> tuple[int, Any]:
    """``(status, JSON body or text)`` of one HTTP request, waiting up to ``timeout`` seconds for
    the answer, however slow. A connection that fails (refused while the server starts, reset,
    closed before the answer) is tried again until then: any request when ``idempotent`` (by
    default: every method but POST), else only one the server never received (refused)."""
    idempotent = method in IDEMPOTENT if idempotent is None else idempotent
    data = None if body is None else json.dumps(body).encode()
    deadline = time.monotonic() + timeout
    while True:
        request = urllib.request.Request(
            url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
        )
        try:
            with urllib.request.urlopen(request, timeout=max(1.0, deadline - time.monotonic())) as resp:
                raw, status = resp.read(), resp.status
            break
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
            break
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException, TimeoutError) as err:
            reason = getattr(err, "reason", err)
            unsent = isinstance(reason, ConnectionRefusedError)
            if time.monotonic() >= deadline or isinstance(reason, TimeoutError) or not (idempotent or unsent):
                raise AssertionError(f"{method} {url}: no answer within {timeout} s: {err!r}") from err
            time.sleep(1)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def free_ports(count: int) -> list[int]:
    # kafka_local is registered by tests/conftest.py; imported here, not at the top, because the
    # supervisor (this file run as a script) has no conftest
    from kafka_local import free_ports as kafka_local_free_ports

    return kafka_local_free_ports(count)


def stop_tree(process: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 20) -> None:
    """Stop a process started with ``tether()`` and everything below it: ``sig`` to its group,
    then SIGKILL to whatever of its tree (collected first: Spark jobs lead sessions of their own
    and are reparented once their launcher goes) is still there after ``grace`` seconds."""
    tree = job_processes(process.pid) if process.poll() is None else []
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_alive(p) for p in tree):
        time.sleep(0.2)
    for pid in tree:
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
    process.wait()


def supervise(argv: list[str], grace: float = SERVICE_GRACE_SECONDS) -> int:
    """Run ``argv`` in a process group of its own until it ends or this process gets SIGTERM or
    SIGINT; then SIGTERM to that group, and SIGKILL to every process still below this one after
    ``grace`` seconds. Returns the command's exit status."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    child = subprocess.Popen(argv, start_new_session=True)
    while child.poll() is None and not stop.wait(0.5):
        pass
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGTERM)
            child.wait(grace)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    while below := job_processes(os.getpid())[1:]:
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
        while True:  # reap the orphans reparented here
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
    return child.wait()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Postgres:
    """A PostgreSQL server of its own in a temporary folder, as the ``postgres`` OS user when
    this process is root, else as this user.

    :param bindir: the folder holding ``initdb`` and ``postgres``.
    """

    def __init__(self, bindir: Path):
        self.bindir = bindir
        (self.port,) = free_ports(1)
        self.root = Path(tempfile.mkdtemp(prefix="streamrep-postgres-"))  # not under pytest's 0700 root-only tmp
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.process: subprocess.Popen | None = None
        self.as_user: dict[str, Any] = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam(POSTGRES_USER)
            os.chown(self.root, account.pw_uid, account.pw_gid)
            # Popen switches user before preexec_fn runs, so tether()'s PR_SET_PDEATHSIG survives.
            self.as_user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{DB_USER}@127.0.0.1:{self.port}/{DB_NAME}"

    def start(self) -> None:
        # trust on loopback only: a throwaway server for one session
        subprocess.run(
            [self.bindir / "initdb", "-D", self.data, "-U", DB_USER, "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            **self.as_user,
        )
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [
                    self.bindir / "postgres",
                    "-D",
                    self.data,
                    "-p",
                    str(self.port),
                    "-k",
                    self.root,
                    "-c",
                    "listen_addresses=127.0.0.1",
                    "-c",
                    "fsync=off",
                    "-c",
                    "synchronous_commit=off",
                    "-c",
                    "full_page_writes=off",
                    "-c",
                    "max_connections=200",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                **self.as_user,
                **tether(),
            )
        deadline = time.monotonic() + 60
        while subprocess.run([self.bindir / "pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"PostgreSQL did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.1)
        subprocess.run(
            [self.bindir / "createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", DB_USER, DB_NAME],
            check=True,
            capture_output=True,
        )

    def stop(self) -> None:
        if self.process is not None:
            stop_tree(self.process, signal.SIGINT, grace=20)  # SIGINT: fast shutdown, clients cut off
        shutil.rmtree(self.root, ignore_errors=True)


class Airflow:
    """The four Airflow services on one PostgreSQL database, and their REST API with a JWT.

    :param env: the child environment (the e2e session's, with this Airflow's home and database).
    :param logs: folder for each service's output.
    """

    def __init__(self, env: dict[str, str], logs: Path):
        self.env = env
        self.logs = logs
        self.streamrep_home = Path(env["STREAMREP_HOME"])
        self.port = int(env["AIRFLOW__API__PORT"])
        self.base = f"http://127.0.0.1:{self.port}"
        self.processes: dict[str, subprocess.Popen] = {}
        self.token: str | None = None
        self.timings: dict[str, float] = {}

    def start(self, service: str) -> None:
        """Start one service (``api-server``, ``scheduler``, ``dag-processor``, ``triggerer``)."""
        args = [shutil.which("airflow", path=self.env["PATH"]), *service.split()]
        if service == "api-server":
            args += ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.logs / f"{service}.log", "ab") as log:
            self.processes[service] = subprocess.Popen(
                [sys.executable, __file__, *args],
                env=self.env,
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                **tether(),
            )

    def stop(self, service: str) -> None:
        """Stop one service and everything it started (the scheduler: its task processes and their
        Spark jobs)."""
        process = self.processes.pop(service, None)
        if process is not None:
            stop_tree(process, grace=SERVICE_GRACE_SECONDS + 15)

    def stop_all(self) -> None:
        for service in reversed(list(self.processes)):
            self.stop(service)

    def log(self, service: str, tail: int = 4000) -> str:
        return (self.logs / f"{service}.log").read_text(errors="replace")[-tail:]

    # -- REST -----------------------------------------------------------------------
    def request(
        self, method: str, path: str, body: Any = None, auth: bool = True, idempotent: bool | None = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if auth and self.token else {}
        return http_json(self.base + path, method, body, headers, idempotent=idempotent)

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        assert status == 200, (path, status, body)
        return body

    def login(self, username: str, password: str) -> None:
        """A JWT from the simple auth manager (``POST /auth/token``) for every later request."""
        status, body = self.request(
            "POST", "/auth/token", {"username": username, "password": password}, auth=False, idempotent=True
        )
        assert status in (200, 201), (status, body)
        self.token = body["access_token"]

    def health(self) -> dict[str, str]:
        """Each component's status from ``/api/v2/monitor/health`` (no login needed)."""
        try:
            # polled until healthy (wait_healthy): a slow answer is a late one, not a failure
            with urllib.request.urlopen(self.base + "/api/v2/monitor/health", timeout=30) as resp:
                health = json.loads(resp.read())
        except (OSError, ValueError):
            return {}
        return {
            part: (health.get(part) or {}).get("status")
            for part in ("metadatabase", "scheduler", "triggerer", "dag_processor")
        }

    def wait_healthy(
        self, timeout: float = 300, parts: tuple[str, ...] = ("metadatabase", "scheduler", "triggerer", "dag_processor")
    ) -> float:
        """Seconds until every part in ``parts`` is healthy."""
        start = time.monotonic()
        while True:
            health = self.health()
            if all(health.get(p) == "healthy" for p in parts):
                return time.monotonic() - start
            dead = [s for s, p in self.processes.items() if p.poll() is not None]
            if dead or time.monotonic() - start > timeout:
                raise AssertionError(
                    f"Airflow not healthy ({health}); exited: {dead}\n"
                    + "\n".join(f"--- {s}\n{self.log(s, 2500)}" for s in self.processes)
                )
            time.sleep(0.5)

    def wait_dags(self, dag_ids: set[str], timeout: float = 300) -> None:
        """Until the dag-processor has serialized every DAG in ``dag_ids`` (healthy services may
        not have parsed the files yet); an import error fails at once."""
        deadline = time.monotonic() + timeout
        while not dag_ids <= {d["dag_id"] for d in self.get("/api/v2/dags?limit=100")["dags"]}:
            errors = self.get("/api/v2/importErrors")
            assert errors["total_entries"] == 0, errors
            assert time.monotonic() < deadline, f"DAGs not parsed after {timeout} s:\n{self.log('dag-processor')}"
            time.sleep(1)

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """``POST /api/v2/dags/{dag_id}/dagRuns``; returns the run id. The run id is chosen here,
        so that the request can be repeated when its connection fails: a repeat that finds the run
        made (409) is its success."""
        self.request(
            "PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False}, idempotent=True
        )  # scheduled DAGs start paused
        run_id = f"manual__e2e_{secrets.token_hex(6)}"
        body = {"dag_run_id": run_id, "logical_date": None, "conf": conf}
        status, run = self.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body, idempotent=True)
        if status == 409:  # made by an attempt whose connection failed
            run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            assert run["conf"] == conf, run
            return run_id
        assert status == 200, (status, run)
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 600) -> str:
        """The run's final state (``success`` or ``failed``), polled."""
        deadline = time.monotonic() + timeout
        while (state := self.run_state(dag_id, run_id)) not in ("success", "failed"):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{dag_id} run {run_id} still {state} after {timeout} s:\n" + self.log("scheduler")
                )
            time.sleep(1)
        return state

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]


@pytest.fixture(scope="module")  # stopped after its module: an idle Airflow costs the rest of the suite CPU
def postgres() -> Postgres:
    """A PostgreSQL server for its module; skips only when no PostgreSQL server is installed."""
    bindir = postgres_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server is installed (apt-get install -y postgresql; ./run test does it)")
    server = Postgres(bindir)
    started = time.monotonic()
    try:
        server.start()
        server.seconds_to_start = round(time.monotonic() - started, 2)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")  # stopped after its module: an idle Airflow costs the rest of the suite CPU
def airflow_production(e2e_homes, postgres: Postgres) -> Airflow:
    """Airflow's four services on ``postgres`` with the LocalExecutor, login on, the repository's
    dags and plugins, and ``e2e_homes``' environment (its own STREAMREP_HOME, ``spark_default``
    local); healthy and logged in as ``admin``. Stopped with every process below them at session end."""
    e2e = e2e_homes
    logs = e2e.root / "airflow-production-logs"
    logs.mkdir()
    home = e2e.airflow_home
    password = secrets.token_urlsafe(12)
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({"admin": password}))
    port, worker_log_port, trigger_log_port = free_ports(3)
    env = {
        **e2e.env,
        **FAST_AIRFLOW,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        # one secret for every service: tokens made by one are checked by another
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),  # >= 64 bytes for HS512
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(64),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_log_port),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_log_port),
    }
    env.pop("PORT", None)  # scripts/airflow-ui.sh's
    airflow = Airflow(env, logs)
    started = time.monotonic()
    migrate = subprocess.run(
        [shutil.which("airflow", path=env["PATH"]), "db", "migrate"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,  # a bound, not an expectation: 18 s at load 12, 101 s at load 30
    )
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    airflow.timings["airflow db migrate (PostgreSQL)"] = round(time.monotonic() - started, 1)
    try:
        started = time.monotonic()
        for service in SERVICES:
            airflow.start(service)
        airflow.wait_healthy()
        airflow.timings["four services until healthy"] = round(time.monotonic() - started, 1)
        airflow.login("admin", password)
        # the package's DAGs (through dags/streamrep_dags.py) and the examples, each named after its file
        import streamrep.dags

        airflow.wait_dags({*streamrep.dags.__all__, *(path.stem for path in (REPO / "dags").glob("*example.py"))})
        airflow.timings["four services until healthy and the DAGs parsed"] = round(time.monotonic() - started, 1)
        yield airflow
    finally:
        airflow.stop_all()
        e2e.timings.update({f"production: {k}": v for k, v in airflow.timings.items()})
        e2e.timings["production: postgres initdb+start"] = getattr(postgres, "seconds_to_start", None)


if __name__ == "__main__":  # the supervisor of one Airflow service (Airflow.start)
    sys.exit(supervise(sys.argv[1:]))
