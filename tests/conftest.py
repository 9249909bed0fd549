"""Shared fixtures: an isolated STREAMREP_HOME with two embedded clusters, and admins.

``home`` sets ``STREAMREP_HOME`` with ``monkeypatch.setenv``, so code that builds its own
``Clusters()`` (the CLI, for example) sees the same registry as the test.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

if "airflow" not in sys.modules:  # a throwaway Airflow home for in-process Airflow: never ~/airflow
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="streamrep-airflow-unit-")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import Clusters
from streamrep.model.ace import Identity

ALICE = Identity(user="alice", groups=frozenset({"eng"}))
BOB = Identity(user="bob", groups=frozenset({"sales"}))
CAROL = Identity(user="carol", groups=frozenset({"eng"}))

# Environment variables that would change behaviour under test if the caller had them set.
_ISOLATED_ENV = ("STREAMREP_DEFAULT_CLUSTER", "STREAMREP_USER", "STREAMREP_GROUPS", "STREAMREP_SYNC")


@pytest.fixture
def empty_home(tmp_path, monkeypatch) -> Clusters:
    """A fresh STREAMREP_HOME with no cluster registered."""
    home = tmp_path / "streamrep-home"
    monkeypatch.setenv("STREAMREP_HOME", str(home))
    for name in _ISOLATED_ENV:
        monkeypatch.delenv(name, raising=False)
    clusters = Clusters()
    yield clusters
    clusters.close()


@pytest.fixture
def home(empty_home) -> Clusters:
    """STREAMREP_HOME with the embedded clusters ``sanfrancisco`` (the default) and ``newyork``."""
    empty_home.add("sanfrancisco")
    empty_home.add("newyork")
    return empty_home


@pytest.fixture
def admin(home) -> StreamAdmin:
    """The admin API as alice (group ``eng``)."""
    return StreamAdmin(home, ALICE)


@pytest.fixture
def bob(home) -> StreamAdmin:
    """The admin API as bob (group ``sales``): owns nothing alice creates."""
    return StreamAdmin(home, BOB)


@pytest.fixture
def carol(home) -> StreamAdmin:
    """The admin API as carol: not alice, but in alice's group ``eng``."""
    return StreamAdmin(home, CAROL)
