"""plugins/ as a deployment by folders mounts it: what Airflow's plugin loader imports from it
under bare names, and the dist-info that registers the provider (tests/e2e/test_folder_deployment.py
runs it in a real Airflow)."""

from __future__ import annotations

import configparser
import importlib.util
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGINS = REPO / "plugins"
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def ignored(relative: str) -> bool:
    """Whether .airflowignore keeps ``relative`` out of the plugin loader (its glob syntax, the
    default since Airflow 3; every pattern is also a valid regexp)."""
    patterns = [p.strip() for p in (PLUGINS / ".airflowignore").read_text().splitlines() if p.strip()]
    return any(relative.startswith(p.rstrip("/") + "/") for p in patterns if p.endswith("/"))


def test_the_loader_imports_only_streamrep_plugins_and_it_shadows_nothing():
    loaded = [p for p in PLUGINS.rglob("*.py") if not ignored(p.relative_to(PLUGINS).as_posix())]
    assert [p.name for p in loaded] == ["streamrep_plugins.py"]
    assert ignored("streamrep/replication/copy.py")  # would shadow the standard library's copy
    for path in loaded:
        name = path.stem
        spec = importlib.util.find_spec(name)  # this venv's editable install puts plugins/ on sys.path
        assert name not in sys.stdlib_module_names and (spec is None or Path(spec.origin) == path), name


def test_the_folders_dist_info_registers_the_provider_as_the_wheel_does():
    dist = PLUGINS / "streamrep.dist-info"
    metadata = dict(
        line.split(": ", 1) for line in (dist / "METADATA").read_text().splitlines() if re.match(r"\w[\w-]*: ", line)
    )
    assert metadata["Name"] == PROJECT["name"] and metadata["Version"] == PROJECT["version"]
    entry_points = configparser.ConfigParser()
    entry_points.read(dist / "entry_points.txt")
    # only the provider: the page and the REST form come from streamrep_plugins.py in a folder deployment
    assert entry_points.sections() == ["apache_airflow_provider"]
    assert dict(entry_points["apache_airflow_provider"]) == PROJECT["entry-points"]["apache_airflow_provider"]


def test_the_spark_apps_have_one_source_that_the_wheel_carries():
    from streamrep.spark import command

    wheel = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert wheel["force-include"] == {"spark_apps": "streamrep/spark_apps"}
    assert sorted(p.stem for p in (REPO / "spark_apps").glob("*.py")) == sorted(command.APPS)
    assert Path(command.app_path("gateway")) == REPO / "spark_apps" / "gateway.py"  # this checkout: beside plugins/
