"""The built wheel, installed with pip into Airflow environments that are not this repository's.

For each supported Airflow release (``scripts/wheel_envs.py``: a venv per lock in
``tests/wheel/``, made by ``./run test`` before the tests, so nothing is downloaded here), the
wheel built from this checkout by ``uv build`` is installed with ``pip install --no-index``:
pip finds every dependency the wheel declares already there, or fails. ``AIRFLOW_HOME`` has an
empty plugins folder, and its dags folder holds only the short file that docs/airflow.md shows. Then:

* ``airflow providers list`` and ``airflow plugins`` show streamrep;
* an API server with login on serves the page (401 without a token, 200 with one), the
  connection form's fields, and the Test button;
* ``airflow dags test stream_replica_manual_setup`` copies on Spark with the app from the
  installed package;
* the Airflow guide's example user test passes with the package's pytest fixtures, in a folder
  outside the repository.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import wheel_envs  # loaded by tests/conftest.py from scripts/wheel_envs.py
from airflow_production import Airflow, free_ports

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
AIRFLOW_GUIDE = REPO / "docs" / "airflow.md"
FILE_MARKER = re.compile(r"<!-- file: (?P<name>[\w/.]+) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)
SOURCE, REPLICA = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"


def documented_files() -> dict[str, str]:
    """The files the Airflow guide (docs/airflow.md) shows whole, each after a ``<!-- file: NAME -->`` line."""
    text = AIRFLOW_GUIDE.read_text(encoding="utf-8")
    return {m["name"]: m["body"] for m in FILE_MARKER.finditer(text)}


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    """The wheel and sdist of this checkout, built offline with the locked hatchling."""
    out = tmp_path_factory.mktemp("dist")
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


@dataclass
class Installed:
    """One Airflow release's venv with the wheel installed, and an Airflow home for it."""

    release: str
    venv: Path
    root: Path
    env: dict[str, str]

    def run(
        self, *args: str, timeout: float = 300, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.venv / "bin" / args[0]), *args[1:]],
            cwd=cwd or self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def ok(self, *args: str, timeout: float = 300) -> str:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (
            f"{' '.join(args)}: {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
        return done.stdout


@pytest.fixture(scope="module", params=wheel_envs.AIRFLOW_RELEASES, ids=lambda r: f"airflow-{r}")
def installed(request, wheel, tmp_path_factory) -> Installed:
    release = request.param
    venv = wheel_envs.env_path(release)
    if not (venv / ".lock.sha256").is_file():
        pytest.skip(f"{venv} is missing: ./run test makes it (scripts/wheel_envs.py install)")
    pip = str(venv / "bin" / "pip")
    subprocess.run([pip, "uninstall", "--quiet", "--yes", "streamrep"], capture_output=True, timeout=120)
    done = subprocess.run(
        [pip, "install", "--no-index", "--no-cache-dir", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"pip install of the wheel into Airflow {release}:\n{done.stdout}\n{done.stderr}"

    root = tmp_path_factory.mktemp(f"airflow-{release}")
    home = root / "airflow-home"
    (home / "plugins").mkdir(parents=True)
    (home / "dags").mkdir()
    (home / "dags" / "streamrep_dags.py").write_text(documented_files()["dags/streamrep_dags.py"])
    (port,) = free_ports(1)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "STREAMREP_", "SPARK_", "PYSPARK_", "PYTHON", "VIRTUAL_ENV", "PYTEST"))
    }
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
        }
    )
    (root / "passwords.json").write_text(json.dumps({"admin": "admin-password"}))
    found = Installed(release, venv, root, env)
    found.ok("airflow", "db", "migrate")
    return found


def test_pip_installed_the_wheel_and_nothing_else_and_pyspark_is_whole(installed, wheel):
    out = installed.ok(
        "python",
        "-c",
        "import airflow, pyspark, streamrep, streamrep.dags, streamrep.testing; "
        "print(airflow.__version__, pyspark.__version__, streamrep.__file__)",
    )
    airflow_version, pyspark_version, location = out.strip().splitlines()[-1].split()  # after any log line
    assert airflow_version == installed.release and pyspark_version == "4.3.0"
    assert location.startswith(str(installed.venv / "lib")), location  # the installed copy, not the checkout
    assert not any((installed.root / "airflow-home" / "plugins").iterdir())  # no file copied in


def test_airflow_lists_the_provider_and_its_plugin(installed):
    providers = json.loads(installed.ok("airflow", "providers", "list", "-o", "json"))
    (ours,) = [p for p in providers if p["package_name"] == "streamrep"]
    assert ours["version"] == "0.1.0"
    plugins = json.loads(installed.ok("airflow", "plugins", "-o", "json"))
    (page,) = [p for p in plugins if p["name"] == "streamrep"]
    assert "streamrep" in json.dumps(page.get("source") or page)  # loaded from the package's entry point
    hooks = installed.ok("airflow", "providers", "hooks", "-o", "json")
    assert '"streamrep"' in hooks and "streamrep.airflow.hook.StreamrepHook" in hooks


@pytest.fixture(scope="module")
def api_server(installed) -> Airflow:
    logs = installed.root / "logs"
    logs.mkdir()
    server = Airflow(installed.env, logs)
    server.start("api-server")
    try:
        deadline = time.monotonic() + 180
        while server.health().get("metadatabase") != "healthy":
            assert server.processes["api-server"].poll() is None, server.log("api-server")
            assert time.monotonic() < deadline, server.log("api-server")
            time.sleep(0.5)
        yield server
    finally:
        server.stop_all()


def test_the_page_answers_only_behind_login(api_server):
    api_server.token = None
    status, _ = api_server.request("GET", "/streamrep/replication", auth=False)
    assert status == 401
    api_server.login("admin", "admin-password")
    status, page = api_server.request("GET", "/streamrep/replication")
    assert status == 200 and "Stream replication" in page


def test_the_connection_form_has_its_fields_and_the_test_button_works(api_server, installed):
    api_server.login("admin", "admin-password")
    hooks = api_server.get("/ui/connections/hook_meta")  # what the UI builds the form from
    (form,) = [h for h in hooks if h["connection_type"] == "streamrep"]
    assert form["hook_name"] == "Streamrep cluster"
    fields = form["standard_fields"]
    assert fields["host"]["title"] == "Cluster URL" and fields["login"]["title"] == "Act as user"
    assert "embedded:" in fields["host"]["placeholder"]
    assert fields["port"]["hidden"] is True and fields["password"]["hidden"] is True

    tested = {
        "connection_id": "streamrep_tested",
        "conn_type": "streamrep",
        "host": f"embedded:{installed.root / 'tested.db'}",
    }
    status, answer = api_server.request("POST", "/api/v2/connections/test", tested)
    assert status == 200 and answer["status"] is False and "no cluster store at" in answer["message"], answer
    installed.ok("streamrep", "cluster", "add", "-name", "tested", "-url", tested["host"])
    status, answer = api_server.request("POST", "/api/v2/connections/test", tested)
    assert status == 200 and answer["status"] is True, answer
    status, answer = api_server.request(
        "POST",
        "/api/v2/connections/test",
        {"connection_id": "streamrep_bad", "conn_type": "streamrep", "host": "ftp://nowhere"},
    )
    assert status == 200 and answer["status"] is False and "\n" not in answer["message"], answer
    assert "embedded:" in answer["message"]  # names the forms a cluster URL takes


def test_the_manual_setup_dag_copies_on_spark_with_the_packaged_app(installed):
    for cluster in ("sanfrancisco", "newyork"):
        installed.ok("streamrep", "cluster", "add", "-name", cluster)
    installed.ok("streamrep", "stream", "create", "-path", SOURCE, "-defaultpartitions", "2")
    produce = subprocess.run(
        [str(installed.venv / "bin" / "streamrep"), "produce", "-path", f"{SOURCE}:clicks"],
        input="".join(f"click {i}\n" for i in range(50)),
        env=installed.env,
        cwd=installed.root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert produce.returncode == 0, produce.stderr
    run = installed.run(
        "airflow",
        "dags",
        "test",
        "stream_replica_manual_setup",
        "-c",
        json.dumps({"path": SOURCE, "replica": REPLICA}),
        timeout=600,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    app = installed.venv / "lib" / "python3.11" / "site-packages" / "streamrep" / "spark" / "apps" / "copystream.py"
    assert f"spark-submit {app}" in output, output[-6000:]
    topics = json.loads(installed.ok("streamrep", "stream", "topic", "list", "-path", REPLICA, "-json"))
    assert [(t["topic"], t["messages"]) for t in topics["data"]] == [("clicks", 50)]
    replicas = json.loads(installed.ok("streamrep", "stream", "replica", "list", "-path", SOURCE, "-json"))
    (row,) = replicas["data"]
    assert row["replicaPath"] == REPLICA and row["paused"] is False


def test_the_guides_example_user_test_passes_with_the_packaged_fixtures(installed):
    user_repo = installed.root / "user-dag-repo"
    (user_repo / "tests").mkdir(parents=True)
    name = "tests/test_orders_replication.py"
    (user_repo / name).write_text(documented_files()[name])
    env = {k: v for k, v in installed.env.items() if not k.startswith("AIRFLOW")}  # the plugin's own home
    done = installed.run("pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=user_repo, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout[-2000:]


def test_an_unsupported_python_is_refused_in_one_line_naming_the_range(installed, wheel, tmp_path):
    done = installed.run(
        "pip",
        "install",
        "--dry-run",
        "--no-index",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.12",
        "--target",
        str(tmp_path / "t"),
        str(wheel),
    )
    assert done.returncode != 0
    (line,) = [x for x in done.stderr.splitlines() if "requires a different Python" in x]
    assert "3.12" in line and ">=3.11" in line and "<3.12" in line
