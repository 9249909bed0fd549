"""The built wheel, installed with plain pip into Airflow environments that are not this repository's.

For each tested cell (the checks that start servers run on the newest cell in CI), an Airflow release on a Python (``scripts/wheel_envs.py``: every interpreter
the wheel declares on the newest Airflow, and one cell per older Airflow minor; a venv per lock in
``tests/wheel/``, made by ``./run test`` before the tests, so nothing is downloaded here), the
wheel built from this checkout by ``uv build`` is installed with ``pip install --no-index``: pip
finds every dependency the wheel declares already there, or fails. ``AIRFLOW_HOME`` has an empty
plugins folder, and its dags folder holds only the short file that docs/airflow.md shows. Then:

* pyspark is whole (its Python files are its jars' release), also after pip reinstalls
  pyspark-client over it;
* ``airflow providers list`` and ``airflow plugins`` show streamrep, with no deprecation warning
  of streamrep's own;
* an API server with login on serves the page (401 without a token, 200 with one), the
  connection form's fields, and the Test button;
* ``airflow dags test stream_replica_manual_setup`` copies on Spark with the app from the
  installed package;
* the Airflow guide's example user test passes with the package's pytest fixtures, in a folder
  outside the repository;
* pip refuses, in one line naming the range, a Python or an Airflow below what the wheel declares.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass

import pytest
import wheel_envs  # loaded by tests/conftest.py from scripts/wheel_envs.py
from airflow_production import Airflow
from airflow_venv import AirflowVenv, documented_files, require_venv

from matrix import full_matrix_only

pytestmark = pytest.mark.slow

SOURCE, REPLICA = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"


@dataclass
class Installed(AirflowVenv):
    release: str = ""


def cell_id(cell: tuple[str, str]) -> str:
    return wheel_envs.cell_name(*cell)


# Every cell runs the checks that take seconds: the wheel installs whole, and Airflow lists it. The
# checks that start an API server or Spark (minutes each) run on the newest Airflow on the newest
# Python in CI, and also on the oldest Airflow on the oldest Python with STREAMREP_FULL_MATRIX=1
# (they passed there when the matrix was made; CI's time budget keeps them to one cell). pip's
# refusals, which no cell changes, run on the newest only.
NEWEST_CELL = (wheel_envs.NEWEST, wheel_envs.PYTHONS[-1])
OLDEST_CELL = min(wheel_envs.CELLS)
at_the_corners = pytest.mark.parametrize(
    "installed", [NEWEST_CELL, full_matrix_only(OLDEST_CELL)], indirect=True, ids=cell_id
)
on_the_newest = pytest.mark.parametrize("installed", [NEWEST_CELL], indirect=True, ids=cell_id)


@pytest.fixture(scope="module", params=wheel_envs.CELLS, ids=cell_id)
def installed(request, wheel, tmp_path_factory) -> Installed:
    release, python = request.param
    venv = wheel_envs.env_path(release, python)
    require_venv(venv)
    pip = str(venv / "bin" / "pip")
    subprocess.run([pip, "uninstall", "--quiet", "--yes", "streamrep"], capture_output=True, timeout=120)
    done = subprocess.run(
        [pip, "install", "--no-index", "--no-cache-dir", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"pip install of the wheel into {request.node.name}:\n{done.stdout}\n{done.stderr}"
    root = tmp_path_factory.mktemp(wheel_envs.cell_name(release, python))
    made = AirflowVenv.make(venv, root)
    found = Installed(made.venv, made.root, made.env, release)
    (root / "airflow-home" / "dags" / "streamrep_dags.py").write_text(documented_files()["dags/streamrep_dags.py"])
    found.ok("airflow", "db", "migrate")
    return found


WHOLE = (
    "import airflow, pyspark, streamrep, streamrep.dags, streamrep.testing; "
    "from streamrep.spark.command import require_matching_pyspark; require_matching_pyspark(); "
    "print(airflow.__version__, pyspark.__version__, streamrep.__file__)"
)


def test_pip_installed_the_wheel_and_nothing_else_and_pyspark_is_whole(installed):
    out = installed.ok("python", "-c", WHOLE)
    airflow_version, pyspark_version, location = out.strip().splitlines()[-1].split()  # after any log line
    assert airflow_version == installed.release and pyspark_version == "4.2.0"
    assert location.startswith(str(installed.venv / "lib")), location  # the installed copy, not the checkout
    assert not any((installed.root / "airflow-home" / "plugins").iterdir())  # no file copied in
    installed.ok("pip", "check")


def test_pyspark_stays_whole_when_pip_reinstalls_pyspark_client_over_it(installed):
    """pyspark-client writes its Python files over pyspark's; pinned to one release, they are the
    same files, so the order pip installs them in does not matter."""
    (client,) = wheel_envs.WHEELHOUSE.glob("pyspark_client-*.whl")
    installed.ok("pip", "install", "--no-index", "--no-deps", "--force-reinstall", "--quiet", str(client))
    installed.ok("python", "-c", WHOLE)


def test_airflow_lists_the_provider_and_its_plugin(installed):
    listed = installed.run("airflow", "providers", "list", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    ours_warned = [line for line in listed.stderr.splitlines() if "Warning" in line and "streamrep" in line]
    assert not ours_warned, ours_warned  # no deprecated Airflow API of streamrep's own
    providers = json.loads(listed.stdout)
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


@at_the_corners
def test_the_page_answers_only_behind_login_and_its_bundle_is_in_the_wheel(api_server, browser):
    api_server.token = None
    status, _ = api_server.request("GET", "/streamrep/api/clusters", auth=False)
    assert status == 401
    api_server.login("admin", "admin-password")
    status, listing = api_server.request("GET", "/streamrep/api/clusters")
    assert status == 200 and listing["user"] == "admin"
    status, bundle = api_server.request("GET", "/streamrep/static/replication.js", auth=False)
    assert status == 200 and "AirflowPlugin" in bundle  # the UI loads it before anyone logs in
    plugins = api_server.get("/api/v2/plugins")["plugins"]
    [app] = [a for p in plugins if p["name"] == "streamrep" for a in p["react_apps"]]
    assert app["bundle_url"] == "/streamrep/static/replication.js" and app["url_route"] == "stream-replication"
    # this release's UI loads the bundle and renders the page (3.2 imports bundle_url as it is)
    context = browser.new_context()
    context.add_cookies([{"name": "_token", "value": api_server.token, "url": api_server.base}])
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    page.goto(api_server.base + "/plugin/stream-replication")
    page.wait_for_selector("[data-testid=replication-page][data-layout=done]", timeout=120_000)
    assert page.locator("h2", has_text="Stream replication").count() == 1 and not errors, errors
    context.close()


@at_the_corners
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


@at_the_corners
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
    app = installed.venv / "lib" / f"python{installed.python_version}" / "site-packages" / "streamrep" / "spark_apps"
    app = app / "copystream.py"
    assert f"spark-submit {app}" in output, output[-6000:]
    topics = json.loads(installed.ok("streamrep", "stream", "topic", "list", "-path", REPLICA, "-json"))
    assert [(t["topic"], t["messages"]) for t in topics["data"]] == [("clicks", 50)]
    replicas = json.loads(installed.ok("streamrep", "stream", "replica", "list", "-path", SOURCE, "-json"))
    (row,) = replicas["data"]
    assert row["replicaPath"] == REPLICA and row["paused"] is False


@at_the_corners
def test_the_guides_example_user_test_passes_with_the_packaged_fixtures(installed):
    user_repo = installed.root / "user-dag-repo"
    (user_repo / "tests").mkdir(parents=True)
    for name in ("tests/conftest.py", "tests/test_orders_replication.py"):  # the plugin is opt-in
        (user_repo / name).write_text(documented_files()[name])
    env = {k: v for k, v in installed.env.items() if not k.startswith("AIRFLOW")}  # the plugin's own home
    done = installed.run("pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=user_repo, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert re.search(r"\b2 passed\b", done.stdout), done.stdout[-2000:]


@on_the_newest
def test_a_python_below_the_declared_one_is_refused_in_one_line_naming_the_range(installed, wheel, tmp_path):
    done = installed.run(
        "pip",
        "install",
        "--dry-run",
        "--no-index",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        "3.10",
        "--target",
        str(tmp_path / "t"),
        str(wheel),
    )
    assert done.returncode != 0
    (line,) = [x for x in done.stderr.splitlines() if "requires a different Python" in x]
    assert "3.10" in line and ">=3.11" in line


@on_the_newest
def test_an_airflow_below_the_floor_is_refused_naming_the_requirement(installed, wheel, tmp_path):
    """An environment held below the floor (here by a constraint, as Airflow's constraint files
    hold it) is refused, not downgraded or half-installed."""
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("apache-airflow<3.2.2\n")
    done = installed.run("pip", "install", "--dry-run", "--no-index", "-c", str(constraints), str(wheel))
    assert done.returncode != 0
    assert "apache-airflow>=3.2.2" in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-2000:]
