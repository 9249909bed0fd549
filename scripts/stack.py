"""The compose stack on a Docker engine of its own: ``./run stack [up|check|down|logs SERVICE]``.

    up      install docker.io, docker-compose and mmdebstrap from Debian when missing; start a
            dockerd whose data, socket and logs live in .docker/ unless an engine answers already;
            make the base image debian:bookworm-slim with mmdebstrap when it is missing; build
            the images (cached layers); start every service and wait until each is healthy
    check   the walkthrough of docs/operations.md inside the stack, timed part by part
    down    remove the stack's containers, networks and volumes; stop the dockerd that up started
    logs    the logs of one service (docker-compose logs)

Every docker and docker-compose call gets DOCKER_HOST. A user error prints one line naming the fix.
The one copy of this logic: ``tests/e2e/test_stack.py`` imports it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kafka_local import _relative  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker-compose.yaml"
PROJECT = "streamrep"
COMPOSE = ["docker-compose", "-p", PROJECT, "-f", str(COMPOSE_FILE)]
DOCKER_DIR = REPO / ".docker"  # git- and docker-ignored
DATA_ROOT = DOCKER_DIR / "data"
SOCKET = DOCKER_DIR / "docker.sock"
PIDFILE = DOCKER_DIR / "dockerd.pid"
LOGS = DOCKER_DIR / "logs"
DOCKERD_LOG = LOGS / "dockerd.log"
BUILD_LOG = LOGS / "build.log"
UP_LOG = LOGS / "up.log"
BASE_IMAGE = "debian:bookworm-slim"
BASE_TARBALL = REPO / ".cache" / "docker" / "debian-bookworm-minbase.tar"
PACKAGES = {"dockerd": "docker.io", "docker-compose": "docker-compose", "mmdebstrap": "mmdebstrap"}
SYSTEM_SOCKET = Path("/var/run/docker.sock")
# The host's own certificate authorities, and where the builds find them (docker/extra-ca/README.md).
HOST_CAS = Path("/usr/local/share/ca-certificates")
EXTRA_CA = REPO / "docker" / "extra-ca"
# A unix socket path holds at most 107 bytes, and containerd's sockets sit deep under the exec
# root: a long checkout path moves the exec root to a short folder in /tmp.
EXEC_ROOT_MAX = 40

ENGINE_TIMEOUT_S = 60.0
HEALTHY_TIMEOUT_S = 600.0
DAG_TIMEOUT_S = 900.0
ADMIN = ("admin", "admin")  # .env.example's AIRFLOW_ADMIN_USER / AIRFLOW_ADMIN_PASSWORD


class StackError(Exception):
    """A one-line failure that names its fix."""


class DockerUnavailable(StackError):
    """No Docker engine can be used here; the stack (and its test) cannot run."""


def _exec_root() -> Path:
    inside = DOCKER_DIR / "exec"
    if len(str(inside)) <= EXEC_ROOT_MAX:
        return inside
    return Path("/tmp") / f"streamrep-docker-{uuid.uuid5(uuid.NAMESPACE_URL, str(REPO)).hex[:8]}"


# ---------------------------------------------------------------- the engine


def install_packages() -> None:
    """Debian's docker.io, docker-compose and mmdebstrap, when their commands are missing."""
    missing = [package for command, package in PACKAGES.items() if shutil.which(command) is None]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise DockerUnavailable(
            f"Docker unavailable: {' '.join(missing)} not installed; "
            f"install them (apt-get install {' '.join(missing)}) and run again"
        )
    LOGS.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with (LOGS / "apt.log").open("w") as log:
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
            if subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=env).returncode != 0:
                raise DockerUnavailable(
                    f"Docker unavailable: apt-get could not install {' '.join(missing)}; "
                    f"see {_relative(LOGS / 'apt.log')}"
                )


def _answers(host: str) -> bool:
    done = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        env={**os.environ, "DOCKER_HOST": host},
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.returncode == 0


def _own_dockerd_pid() -> int | None:
    """The pid of the dockerd that this script started, while it runs."""
    try:
        pid = int(PIDFILE.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if str(DATA_ROOT).encode() in cmdline else None


def engine_host(*, start: bool) -> str:
    """DOCKER_HOST of a Docker engine that answers: the caller's, the system's, or this repository's.

    :param start: start this repository's dockerd when no engine answers
    :raises DockerUnavailable: none answers and none can be started
    """
    if os.environ.get("DOCKER_HOST"):
        host = os.environ["DOCKER_HOST"]
        if shutil.which("docker") is None or not _answers(host):
            raise DockerUnavailable(
                f"Docker unavailable: no engine answers at DOCKER_HOST={host}; "
                "start it, or unset DOCKER_HOST to let ./run stack start its own"
            )
        return host
    own = f"unix://{SOCKET}"
    if shutil.which("docker") is not None:
        for host in (own, f"unix://{SYSTEM_SOCKET}"):
            if Path(host[len("unix://") :]).exists() and _answers(host):
                return host
    if not start:
        raise DockerUnavailable("Docker unavailable: no engine runs (./run stack up starts one)")
    install_packages()
    _start_dockerd()
    return own


def _start_dockerd() -> None:
    if os.geteuid() != 0:
        raise DockerUnavailable(
            "Docker unavailable: starting dockerd needs root; run as root, or set DOCKER_HOST to a running engine"
        )
    for folder in (DATA_ROOT, LOGS, _exec_root()):
        folder.mkdir(parents=True, exist_ok=True)
    SOCKET.unlink(missing_ok=True)
    command = [
        "dockerd",
        "--data-root",
        str(DATA_ROOT),
        "--exec-root",
        str(_exec_root()),
        "--host",
        f"unix://{SOCKET}",
        "--pidfile",
        str(PIDFILE),
    ]
    with DOCKERD_LOG.open("ab") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + ENGINE_TIMEOUT_S
    while not (SOCKET.exists() and _answers(f"unix://{SOCKET}")):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            lines = [line for line in DOCKERD_LOG.read_text(errors="replace").splitlines() if "level=" in line]
            last = f": {lines[-1][:200]}" if lines else ""
            raise DockerUnavailable(f"Docker unavailable: dockerd did not start{last}; see {_relative(DOCKERD_LOG)}")
        time.sleep(0.5)


def stop_dockerd() -> bool:
    """Stop the dockerd that this script started (SIGTERM, then SIGKILL) and undo what it left
    mounted; ``True`` if it ran."""
    pid = _own_dockerd_pid()
    for sig, wait in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 10.0)) if pid is not None else ():
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
            time.sleep(0.2)
        if not Path(f"/proc/{pid}").exists():
            break
    if pid is not None or not SOCKET.exists() or not _answers(f"unix://{SOCKET}"):
        PIDFILE.unlink(missing_ok=True)
        SOCKET.unlink(missing_ok=True)
        # dockerd keeps its default network namespace mounted in the exec root after it exits.
        for mount in reversed(engine_mounts()):
            subprocess.run(["umount", mount], capture_output=True)
    return pid is not None


def engine_mounts() -> list[str]:
    """Mount points inside this repository's engine folders (the exec root, the data root)."""
    roots = (str(DOCKER_DIR) + "/", str(_exec_root()) + "/")
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1].replace("\\040", " ") for line in mounts]
    return [p for p in points if p.startswith(roots)]


# ---------------------------------------------------------------- docker and compose calls


@dataclass
class Stack:
    """The compose project on one engine; every call carries its DOCKER_HOST."""

    host: str
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        # COMPOSE_DOCKER_CLI_BUILD=0: docker-compose 1.29 builds through the engine's API (the
        # classic builder), which honours build.network.
        return {**os.environ, "DOCKER_HOST": self.host, "COMPOSE_DOCKER_CLI_BUILD": "0", "DOCKER_BUILDKIT": "0"}

    def docker(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        done = subprocess.run(["docker", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and done.returncode != 0:
            raise StackError(f"docker {args[0]} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        return done

    def compose(
        self, *args: str, log: Path | None = None, input: str | None = None, check: bool = True, timeout: float = 3600
    ) -> subprocess.CompletedProcess:
        command = [*COMPOSE, *args]
        if log is not None:
            with log.open("a") as out:
                out.write(f"\n$ {' '.join(command)}\n")
                out.flush()
                return subprocess.run(
                    command,
                    cwd=REPO,
                    env=self.env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    timeout=timeout,
                )
        done = subprocess.run(
            command, cwd=REPO, env=self.env, input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise StackError(f"docker-compose {args[0]} failed: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
        return done

    def timed(self, name: str, started: float) -> None:
        self.timings[name] = time.monotonic() - started
        print(f"stack: {name}: {self.timings[name]:.0f} s", flush=True)

    # ------------------------------------------------------------ up

    def base_image(self) -> None:
        """``debian:bookworm-slim``, from mmdebstrap's Debian bookworm (minbase) when it is missing."""
        if self.docker("image", "inspect", BASE_IMAGE, check=False, timeout=60).returncode == 0:
            return
        started = time.monotonic()
        print(f"stack: making {BASE_IMAGE} (mmdebstrap, then docker import)", flush=True)
        if not BASE_TARBALL.is_file():
            if shutil.which("mmdebstrap") is None:
                install_packages()
            BASE_TARBALL.parent.mkdir(parents=True, exist_ok=True)
            partial = BASE_TARBALL.with_suffix(".partial.tar")
            with (LOGS / "mmdebstrap.log").open("w") as log:
                done = subprocess.run(
                    ["mmdebstrap", "--variant=minbase", "bookworm", str(partial)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            if done.returncode != 0:
                partial.unlink(missing_ok=True)
                raise StackError(
                    f"base image: mmdebstrap failed (are Debian's mirrors reachable?); "
                    f"see {_relative(LOGS / 'mmdebstrap.log')}"
                )
            partial.rename(BASE_TARBALL)
        self.docker("import", str(BASE_TARBALL), BASE_IMAGE, timeout=600)
        self.timed("base image", started)

    def build(self) -> None:
        """Every image of the compose file (cached layers); a failure names the build log."""
        started = time.monotonic()
        _copy_host_cas()
        print(f"stack: building the images (log: {_relative(BUILD_LOG)})", flush=True)
        BUILD_LOG.write_text("")
        # One service per image: several services share one (the Airflow image runs 8 of them).
        per_image = {}
        for name, service in json_config(self)["services"].items():
            if "build" in service:
                per_image.setdefault(service["image"], name)
        if self.compose("build", "--parallel", *per_image.values(), log=BUILD_LOG).returncode != 0:
            raise StackError(f"image build failed: {_build_failure()}; see {_relative(BUILD_LOG)}")
        self.timed("build", started)

    def running_services(self) -> set[str]:
        out = self.compose("ps", "--services", "--filter", "status=running", check=False).stdout
        return set(out.split())

    def up(self) -> None:
        self.base_image()
        self.build()
        if not self.running_services():
            check_ports()
        started = time.monotonic()
        UP_LOG.write_text("")
        print("stack: starting the services, waiting until each is healthy", flush=True)
        failed = self.compose("up", "-d", "--no-build", log=UP_LOG).returncode != 0
        self.wait_healthy(failed)
        self.timed("up", started)

    def containers(self) -> dict[str, dict]:
        """Each service's container as ``docker inspect`` describes it."""
        ids = self.compose("ps", "-a", "-q", check=False).stdout.split()
        if not ids:
            return {}
        found = json.loads(self.docker("inspect", *ids).stdout)
        return {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in found}

    def wait_healthy(self, up_failed: bool) -> None:
        services = set(json_config(self)["services"])
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        while True:
            containers = self.containers()
            bad = None
            pending = []
            for name in sorted(services):
                state = containers.get(name, {}).get("State")
                if state is None:
                    pending.append(name)
                    continue
                health = (state.get("Health") or {}).get("Status")
                if name == "airflow-init":
                    if state["Status"] == "exited" and state["ExitCode"] != 0:
                        bad = (name, f"exited with status {state['ExitCode']}")
                    elif state["Status"] != "exited":
                        pending.append(name)
                elif health == "unhealthy" or state["Status"] in ("exited", "dead"):
                    bad = (name, health if health == "unhealthy" else f"{state['Status']}")
                elif health != "healthy":
                    pending.append(name)
            if bad is None and not pending:
                return
            if bad is None and up_failed and not any(s in containers for s in pending):
                bad = (pending[0], "not started (docker-compose up failed)")
            if bad is None and time.monotonic() > deadline:
                bad = (pending[0], f"not healthy after {HEALTHY_TIMEOUT_S:.0f} s")
            if bad is not None:
                raise StackError(
                    f"service {bad[0]} is {bad[1]}: see ./run stack logs {bad[0]} (and {_relative(UP_LOG)})"
                )
            time.sleep(3)

    # ------------------------------------------------------------ down

    def down(self) -> None:
        started = time.monotonic()
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "30", timeout=600)
        self.timed("down", started)


def json_config(stack: Stack | None = None) -> dict:
    """``docker-compose config`` as JSON-compatible data (1.29 prints YAML; YAML is what it reads)."""
    import yaml

    env = stack.env if stack else os.environ
    done = subprocess.run([*COMPOSE, "config"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise StackError(f"docker-compose.yaml is not valid: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    return yaml.safe_load(done.stdout)


def _copy_host_cas() -> None:
    """The host's local CAs into docker/extra-ca/, so that builds reach HTTPS registries through a
    proxy that the host trusts. Unchanged files are left as they are, which keeps the layer cache."""
    wanted = {crt.name: crt.read_bytes() for crt in HOST_CAS.glob("*.crt") if crt.is_file()}
    for old in EXTRA_CA.glob("*.crt"):
        if old.name not in wanted:
            old.unlink()
    for name, content in wanted.items():
        target = EXTRA_CA / name
        if not target.is_file() or target.read_bytes() != content:
            target.write_bytes(content)


def _build_failure() -> str:
    """The build log's failed service and its most telling error line (apt's ``E:``, Maven's
    ``[ERROR]``, pip's or uv's ``error:``)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", BUILD_LOG.read_text(errors="replace"))  # the builder's colours
    lines = [line.strip() for line in text.splitlines()]
    service = next(
        (m.group(1) for line in reversed(lines) if (m := re.search(r"Service '([\w-]+)' failed to build", line))), None
    )
    details = [
        line
        for line in lines
        if re.match(r"(E: |\[ERROR\] |error: |ERROR: )", line)
        and "failed to build" not in line
        and not line.startswith("ERROR: for ")
    ]
    detail = details[0] if details else (lines[-1] if lines else "docker-compose build exited non-zero")
    return f"{service or 'an image'}: {detail[:200]}"


# ---------------------------------------------------------------- ports

PORT_VARIABLE = re.compile(r'"127\.0\.0\.1:\$\{(\w+):-(\d+)\}:')


def _dotenv() -> dict[str, str]:
    path = REPO / ".env"
    if not path.is_file():
        return {}
    return dict(re.findall(r"^(\w+)=(.*)$", path.read_text(encoding="utf-8"), flags=re.MULTILINE))


def published_ports() -> dict[str, int]:
    """The .env variable of each published port, with its value (environment, then .env, then default)."""
    dotenv = _dotenv()
    ports = {}
    for name, default in PORT_VARIABLE.findall(COMPOSE_FILE.read_text(encoding="utf-8")):
        value = os.environ.get(name) or dotenv.get(name) or default
        if not value.isdigit():
            raise StackError(f"{name}={value} is not a port number: fix it in .env")
        ports[name] = int(value)
    return ports


def check_ports() -> None:
    """Each published port is free on 127.0.0.1, or one line naming it and its .env variable."""
    for name, port in published_ports().items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                raise StackError(
                    f"port {port} on 127.0.0.1 is already in use: stop what uses it, "
                    f"or set {name} to a free port in .env"
                ) from None


# ---------------------------------------------------------------- check: the walkthrough of docs/operations.md


class Airflow:
    """Airflow's REST API on the published port, logged in as the admin."""

    def __init__(self) -> None:
        self.base = f"http://127.0.0.1:{published_ports()['AIRFLOW_PORT']}"
        dotenv = _dotenv()
        user = os.environ.get("AIRFLOW_ADMIN_USER") or dotenv.get("AIRFLOW_ADMIN_USER") or ADMIN[0]
        password = os.environ.get("AIRFLOW_ADMIN_PASSWORD") or dotenv.get("AIRFLOW_ADMIN_PASSWORD") or ADMIN[1]
        self.token = self._call("POST", "/auth/token", {"username": user, "password": password}, auth=False)[
            "access_token"
        ]

    def _call(self, method: str, path: str, body: dict | None = None, *, auth: bool = True) -> dict:
        request = urllib.request.Request(
            self.base + path, method=method, data=json.dumps(body).encode() if body is not None else None
        )
        request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            raise StackError(f"Airflow {method} {path} answered {err.code}: {err.read()[:200]!r}") from None
        except (urllib.error.URLError, OSError) as err:
            raise StackError(
                f"Airflow at {self.base} does not answer ({err}): see ./run stack logs airflow-apiserver"
            ) from None

    def wait_dag(self, dag_id: str, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._call("GET", f"/api/v2/dags/{dag_id}")
                return
            except StackError:
                if time.monotonic() > deadline:
                    raise StackError(
                        f"DAG {dag_id} not parsed after {timeout:.0f} s: see ./run stack logs airflow-dag-processor"
                    ) from None
                time.sleep(2)

    def trigger(self, dag_id: str, conf: dict) -> str:
        self.wait_dag(dag_id)
        self._call("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})  # scheduled DAGs start paused
        run = self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        return run["dag_run_id"]

    def state(self, dag_id: str, run_id: str) -> str:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")["state"]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = DAG_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        state, unanswered = "queued", None
        while state not in ("success", "failed"):
            if time.monotonic() > deadline:
                raise StackError(f"DAG run {dag_id} {run_id} still {state} after {timeout:.0f} s{unanswered or ''}")
            try:
                state, unanswered = self.state(dag_id, run_id), None
            except StackError as err:  # an API server slow to answer one poll (a loaded host): ask again
                if "does not answer" not in str(err):
                    raise
                unanswered = f"; the last poll: {err}"
            time.sleep(3)
        if state != "success":
            failed = self._call(
                "GET", f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances?state=failed"
            )["task_instances"]
            tasks = ", ".join(t["task_id"] for t in failed) or "?"
            why = "".join(f"; {t['task_id']}: {self.task_error(dag_id, run_id, t)}" for t in failed[:1])
            raise StackError(f"DAG run {dag_id} {run_id} failed (tasks: {tasks}){why}: see the run in Airflow's UI")

    def task_error(self, dag_id: str, run_id: str, task: dict) -> str:
        """The last error line of a failed task's log (``?`` when it cannot be read): a run whose
        stack is gone by the time anyone looks still says why it failed."""
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}/taskInstances/{task['task_id']}"
            f"/logs/{task.get('try_number') or 1}?full_content=true"
        )
        try:
            content = self._call("GET", path).get("content") or []
        except StackError:
            return "?"
        lines = [item.get("event", "") if isinstance(item, dict) else str(item) for item in content]
        errors = [line for line in lines if "streamrep:" in line or "Error" in line or "error" in line]
        return (errors or lines or ["?"])[-1].strip()[:300]


@dataclass
class CheckResult:
    """What ``check`` saw."""

    source: str
    replica: str
    consumed: list[str]
    replica_row: dict
    gateway: dict  # gateway list's row of gw1 while it ran
    worker_hostnames: list[str]  # of the airflow-worker containers
    spark_apps: list[str]  # the Spark master's applications, finished and running
    verified_row: dict  # replica list's row of the replica after stream_replica_verify
    timings: dict[str, float]


CLI_SERVICE = "airflow-worker"  # the CLI runs where the tasks run, as the same user


def check(stack: Stack) -> CheckResult:
    """The walkthrough of docs/operations.md: autosetup (copystream on Spark), a continuous gateway, produce on
    sanfrancisco, consume on newyork, ``replica list`` up to date, and the verification DAG on Spark."""
    down = set(json_config(stack)["services"]) - {"airflow-init"} - stack.running_services()
    if down:
        raise StackError(f"the stack is not up ({', '.join(sorted(down))} not running): run ./run stack up first")
    name = f"check{time.strftime('%H%M%S')}"
    source, replica = f"/mapr/sanfrancisco/{name}", f"/mapr/newyork/{name}"

    def sr(*args: str, input: str | None = None) -> str:
        done = stack.compose("exec", "-T", CLI_SERVICE, "streamrep", *args, input=input, check=False, timeout=300)
        if done.returncode != 0:
            raise StackError(
                f"streamrep {' '.join(args[:3])} failed in {CLI_SERVICE}: "
                f"{(done.stderr.strip().splitlines() or ['?'])[-1]}"
            )
        return done.stdout

    started = time.monotonic()
    sr("stream", "create", "-path", source, "-defaultpartitions", "3")
    sr("stream", "topic", "create", "-path", source, "-topic", "clicks")
    sr("produce", "-path", f"{source}:clicks", "-keysep", "=", input="user1=hello\nuser2=world\n")
    stack.timed("check: stream created, 2 messages produced on sanfrancisco", started)

    airflow = Airflow()
    started = time.monotonic()
    run = airflow.trigger(
        "stream_replica_autosetup", {"path": source, "replica": replica, "multimaster": False, "synchronous": False}
    )
    airflow.wait_run("stream_replica_autosetup", run)
    stack.timed("check: autosetup DAG (copystream on the Spark cluster)", started)

    started = time.monotonic()
    sr("cluster", "gateway", "set", "-cluster", "sanfrancisco", "-dstcluster", "newyork", "-gateways", "gw1")
    airflow.wait_run(
        "stream_gateway_service", airflow.trigger("stream_gateway_service", {"action": "start", "cluster": "newyork"})
    )
    try:
        sr("produce", "-path", f"{source}:clicks", "-keysep", "=", input="user3=again\n")
        row = _wait_up_to_date(sr, source, replica)
        gateway = next(
            g for g in _json_lines(sr("gateway", "list", "-cluster", "newyork", "-json")) if g["id"] == "gw1"
        )
        stack.timed("check: gateway started, 1 message produced and replicated", started)

        started = time.monotonic()
        out = sr("consume", "-path", f"{replica}:clicks", "-fromstart", "true", "-json")
        consumed = sorted(m["value"] for m in _json_lines(out))
        stack.timed("check: consumed on newyork", started)
    finally:
        # A gateway runs until stopped, holding a Spark core and a worker slot: never leave one behind.
        started = time.monotonic()
        airflow.wait_run(
            "stream_gateway_service",
            airflow.trigger("stream_gateway_service", {"action": "stop", "cluster": "newyork"}),
        )
        _wait_gateways_stopped(sr, "newyork")
        stack.timed("check: gateway stopped", started)
    started = time.monotonic()
    verify = {"cluster": "sanfrancisco", "engine": "spark", "crc": True}  # every replica of sanfrancisco's streams
    airflow.wait_run("stream_replica_verify", airflow.trigger("stream_replica_verify", verify))
    rows = _json_lines(sr("stream", "replica", "list", "-path", source, "-json"))
    verified = next((r for r in rows if r.get("replicaPath") == replica), {})
    if verified.get("verification") != "same":
        raise StackError(f"stream_replica_verify succeeded but replica list shows {verified}")
    stack.timed("check: verification DAG (diffstreamswithcrc on the Spark cluster)", started)
    workers = [c["Config"]["Hostname"] for name, c in stack.containers().items() if name == "airflow-worker"]
    with urllib.request.urlopen(
        f"http://127.0.0.1:{published_ports()['SPARK_MASTER_UI_PORT']}/json/", timeout=30
    ) as answer:
        master = json.load(answer)
    apps = [a["name"] for a in master["completedapps"] + master["activeapps"]]
    print(f"stack: check: {replica} holds {consumed}; replica list: {row}", flush=True)
    print(
        f"stack: check: gateway gw1 ran as {gateway.get('engine')} on {gateway.get('master')} from host "
        f"{gateway.get('host')} (workers: {workers}); Spark applications: {apps}",
        flush=True,
    )
    print(f"stack: check: verified: {verified.get('verificationSummary')}", flush=True)
    return CheckResult(source, replica, consumed, row, gateway, workers, apps, verified, dict(stack.timings))


def _json_lines(out: str) -> list[dict]:
    text = out.strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return data if isinstance(data, list) else data.get("data", [data])


def _wait_gateways_stopped(sr, cluster: str, timeout: float = 300) -> None:
    """Until no gateway of ``cluster`` is live: each ends after its micro-batch, and its Spark app with it."""
    deadline = time.monotonic() + timeout
    while live := [
        g["id"] for g in _json_lines(sr("gateway", "list", "-cluster", cluster, "-json")) if g.get("status") == "live"
    ]:
        if time.monotonic() > deadline:
            raise StackError(f"gateways {live} of {cluster} still live {timeout:.0f} s after gateway stop")
        time.sleep(3)


def _wait_up_to_date(sr, source: str, replica: str, timeout: float = 300) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        rows = _json_lines(sr("stream", "replica", "list", "-path", source, "-json"))
        row = next((r for r in rows if r.get("replicaPath") == replica), {})
        if row.get("isUptodate") and row.get("pendingMessages") == 0:
            return row
        if time.monotonic() > deadline:
            raise StackError(f"replica {replica} not up to date after {timeout:.0f} s: {row}")
        time.sleep(3)


# ---------------------------------------------------------------- ./run stack


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "up"
    if command == "up":
        stack = Stack(engine_host(start=True))
        stack.up()
        print(f"stack: up; Airflow at http://127.0.0.1:{published_ports()['AIRFLOW_PORT']} (DOCKER_HOST={stack.host})")
        return 0
    if command == "check":
        check(Stack(engine_host(start=False)))
        return 0
    if command == "down":
        try:
            stack = Stack(engine_host(start=False))
        except DockerUnavailable:
            stack = None
        if stack is not None:
            stack.down()
        print(f"stack: down; {'stopped the dockerd of .docker/' if stop_dockerd() else 'no dockerd of ours ran'}")
        return 0
    if command == "logs" and len(argv) == 2:
        stack = Stack(engine_host(start=False))
        return subprocess.run(
            [*COMPOSE, "logs", "--no-color", "--tail", "200", argv[1]], cwd=REPO, env=stack.env
        ).returncode
    print("usage: ./run stack [up|check|down|logs SERVICE]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except StackError as err:
        print(f"stack: {err}", file=sys.stderr)
        sys.exit(1)
