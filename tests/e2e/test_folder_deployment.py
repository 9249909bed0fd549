"""streamrep deployed by folders: the repository's ``dags/``, ``plugins/`` and ``spark_apps/``
copied (as a compose file mounts them) into an Airflow venv that has streamrep's dependencies but
not streamrep (``scripts/wheel_envs.py``'s ``FOLDERS``), with ``PYTHONPATH`` naming the plugins
folder, as docs/airflow.md ("Deploying by folders") tells.

* the provider, the page and the REST form are registered once each, and neither the plugins
  nor the DAGs have import errors; every DAG of ``dags/`` is parsed;
* ``airflow dags test stream_replica_manual_setup`` copies on Spark with the deployed
  ``spark_apps/copystream.py``, the package reaching Spark's executors by ``PYTHONPATH``;
* without ``PYTHONPATH``, and with the wheel also installed, one line says what happens and what to do;
* a deployment without ``spark_apps/`` fails its copy in one line naming the fix, not retried.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import wheel_envs  # loaded by tests/conftest.py from scripts/wheel_envs.py
from airflow_venv import REPO, AirflowVenv, require_venv

pytestmark = pytest.mark.slow

SOURCE, REPLICA = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
FOLDERS = ("dags", "plugins", "spark_apps")


def copy_folders(into: Path, folders=FOLDERS) -> Path:
    for folder in folders:
        shutil.copytree(REPO / folder, into / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return into


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> AirflowVenv:
    venv = wheel_envs.env_path(*wheel_envs.FOLDERS, purpose="folders-")
    require_venv(venv)
    root = tmp_path_factory.mktemp("folders")
    deployment = copy_folders(root / "deployment")
    found = AirflowVenv.make(
        venv,
        root,
        AIRFLOW__CORE__DAGS_FOLDER=str(deployment / "dags"),
        AIRFLOW__CORE__PLUGINS_FOLDER=str(deployment / "plugins"),
        PYTHONPATH=str(deployment / "plugins"),
    )
    assert (
        found.run(
            "python",
            "-c",
            "import importlib.util as u; assert u.find_spec('streamrep') is None",
            env={**found.env, "PYTHONPATH": ""},
        ).returncode
        == 0
    ), "streamrep is installed in the venv"
    found.ok("airflow", "db", "migrate")
    return found


def last_json(stdout: str):
    """The JSON an ``airflow ... -o json`` printed: its last line, after any log line."""
    return json.loads(stdout.strip().splitlines()[-1])


def plugins_of(listing: str) -> list[str]:
    return sorted(p["name"] for p in last_json(listing))


def test_provider_page_and_rest_form_are_registered_once_with_no_import_errors(deployed):
    listed = deployed.run("airflow", "plugins", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert plugins_of(listed.stdout) == ["streamrep", "streamrep_rest"]
    assert "streamrep:" not in listed.stderr, listed.stderr  # neither warning line
    providers = last_json(deployed.ok("airflow", "providers", "list", "-o", "json"))
    assert [p["version"] for p in providers if p["package_name"] == "streamrep"] == ["0.1.0"]
    assert "streamrep" in deployed.ok("airflow", "providers", "hooks", "-o", "json")
    errors = deployed.ok("airflow", "dags", "list-import-errors", "--local", "-o", "json")
    assert last_json(errors) == [], errors
    from airflow.dag_processing.dagbag import DagBag

    expected = set(DagBag(dag_folder=str(REPO / "dags")).dag_ids)
    listed_dags = last_json(deployed.ok("airflow", "dags", "list", "--local", "-o", "json"))
    assert {d["dag_id"] for d in listed_dags} == expected and len(expected) >= 10


def test_the_manual_setup_dag_copies_on_spark_with_the_deployed_app(deployed):
    cli = ("python", "-m", "streamrep.cli")
    for cluster in ("sanfrancisco", "newyork"):
        deployed.ok(*cli, "cluster", "add", "-name", cluster)
    deployed.ok(*cli, "stream", "create", "-path", SOURCE, "-defaultpartitions", "2")
    deployed.ok(*cli, "produce", "-path", f"{SOURCE}:clicks", input="".join(f"click {i}\n" for i in range(40)))
    run = deployed.run(
        "airflow", "dags", "test", "stream_replica_manual_setup", "-c",
        json.dumps({"path": SOURCE, "replica": REPLICA}), timeout=600,
    )  # fmt: skip
    output = run.stdout + run.stderr
    assert run.returncode == 0, output[-6000:]
    app = deployed.root / "deployment" / "spark_apps" / "copystream.py"
    assert f"spark-submit {app}" in output, output[-6000:]
    topics = json.loads(deployed.ok(*cli, "stream", "topic", "list", "-path", REPLICA, "-json"))
    assert [(t["topic"], t["messages"]) for t in topics["data"]] == [("clicks", 40)]


def test_without_pythonpath_one_line_says_the_provider_is_not_registered(deployed):
    listed = deployed.run("airflow", "plugins", "-o", "json", env={**deployed.env, "PYTHONPATH": ""})
    assert listed.returncode == 0, listed.stderr
    (line,) = [x for x in listed.stderr.splitlines() if x.startswith("streamrep:")]
    assert "provider not registered" in line and f"PYTHONPATH={deployed.root / 'deployment' / 'plugins'}" in line
    assert plugins_of(listed.stdout) == ["streamrep", "streamrep_rest"]  # the page still loads


def test_both_installed_and_in_the_plugins_folder_says_which_is_used_and_registers_once(deployed, wheel):
    target = deployed.root / "installed"
    deployed.ok("pip", "install", "--no-index", "--no-deps", "--quiet", "--target", str(target), str(wheel))
    pythonpath = f"{target}:{deployed.root / 'deployment' / 'plugins'}"
    listed = deployed.run("airflow", "plugins", "-o", "json", env={**deployed.env, "PYTHONPATH": pythonpath})
    assert listed.returncode == 0, listed.stderr
    (line,) = {x for x in listed.stderr.splitlines() if x.startswith("streamrep:")}
    assert "installed and also in the plugins folder" in line and "pip uninstall streamrep" in line
    assert plugins_of(listed.stdout) == ["streamrep", "streamrep_rest"]


def test_a_deployment_without_spark_apps_fails_its_copy_in_one_line_not_retried(deployed, tmp_path):
    bare = copy_folders(tmp_path, ("plugins",))
    code = (
        "from streamrep.airflow.hook import user_errors\n"
        "from streamrep.spark.command import app_path\n"
        "with user_errors():\n"
        "    app_path('copystream')\n"
    )
    done = deployed.run("python", "-c", code, env={**deployed.env, "PYTHONPATH": str(bare / "plugins")})
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("airflow.sdk.exceptions.AirflowFailException: streamrep: Spark app copystream.py not found")
    assert "mount spark_apps/ beside plugins/" in last
