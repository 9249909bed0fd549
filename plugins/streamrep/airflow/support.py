"""Which Airflow releases the provider supports, checked when it is imported."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

# The range pyproject.toml declares (tests/unit/test_provider_distribution.py keeps them equal);
# docs/airflow.md, "Supported versions", lists the releases the wheel was tested on.
SUPPORTED_AIRFLOW = ">=3.2.2"


def require_airflow(version: str | None = None) -> None:
    """ImportError in one line when ``version`` (default: the installed Airflow's) is not Airflow 3."""
    if version is None:
        from airflow import __version__ as installed

        version = installed
    try:
        major = Version(version).release[0]
    except InvalidVersion:
        return  # a development build: let Airflow itself decide
    if major < 3:
        raise ImportError(
            f"streamrep needs Apache Airflow 3 (apache-airflow{SUPPORTED_AIRFLOW}), and this environment "
            f"has Airflow {version}: upgrade Airflow, or install streamrep into an Airflow 3 environment"
        )
