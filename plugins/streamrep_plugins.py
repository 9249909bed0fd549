"""streamrep's Airflow plugins for a deployment by folders: this folder mounted as Airflow's
plugins folder (docs/airflow.md, "Deploying by folders").

An installed wheel registers the same two plugins through its ``airflow.plugins`` entry points, so
here they are registered only when no streamrep distribution is installed: never twice. Airflow
imports this file under its bare name; ``.airflowignore`` keeps it out of the package itself.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import entry_points
from pathlib import Path

HERE = Path(__file__).resolve().parent


def installed_plugins() -> list[str]:
    """The ``airflow.plugins`` entry points of an installed streamrep distribution (this folder's
    own ``streamrep.dist-info`` declares none)."""
    return [ep.value for ep in entry_points(group="airflow.plugins") if ep.dist and ep.dist.name == "streamrep"]


def on_pythonpath() -> bool:
    """Whether this folder is on PYTHONPATH: Airflow reads providers' entry points before it adds
    its plugins folder to ``sys.path``, so the provider is found only then."""
    return any(p and Path(p).resolve() == HERE for p in os.environ.get("PYTHONPATH", "").split(os.pathsep))


if installed_plugins():
    print(
        f"streamrep: installed and also in the plugins folder {HERE}: the installed package is used "
        f"and these files are not; remove streamrep/ from the plugins folder or pip uninstall streamrep",
        file=sys.stderr,
    )
else:
    if not on_pythonpath():
        print(
            f"streamrep: provider not registered (its connection form and asset scheme): "
            f"set PYTHONPATH={HERE} for every Airflow process",
            file=sys.stderr,
        )
    from streamrep.airflow.plugin import StreamrepPlugin
    from streamrep.cli.rest import RestPlugin

    __all__ = ["RestPlugin", "StreamrepPlugin"]
