"""Who is calling: the principal a cluster's settings authenticate as, else the process identity;
and the files that are an embedded cluster's only boundary are created owner-only."""

from __future__ import annotations

import json
import os
import stat

import pytest

from streamrep.client import StreamAdmin
from streamrep.client.config import Clusters
from streamrep.errors import PermissionDenied
from streamrep.model.ace import Identity

SECURE = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "alice",
    "sasl.password": "secret",
    "streamrep.group.eng": "alice,carol",
}


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Clusters:
    """A registry holding one secured Kafka cluster (written as the file format is: registering
    would connect to it) and one embedded cluster."""
    monkeypatch.delenv("STREAMREP_USER", raising=False)
    clusters = Clusters(str(tmp_path / "home"))
    clusters.add("local")
    with clusters._editing() as data:
        data["clusters"]["secure"] = {"url": "kafka://127.0.0.1:9", "settings": SECURE}
        data["clusters"]["plain"] = {"url": "kafka://127.0.0.1:9", "settings": {"streamrep.namespace": "x"}}
    return clusters


def test_on_a_sasl_cluster_the_caller_is_the_principal_with_its_mapped_groups(registry):
    admin = StreamAdmin(registry)  # nobody named an identity: the OS user elsewhere
    assert admin.caller("secure") == Identity("alice", frozenset({"eng"}))
    assert admin.caller("local") == admin.identity and admin.caller("plain") == admin.identity


def test_naming_the_principal_itself_is_accepted_and_its_groups_come_from_the_cluster(registry):
    admin = StreamAdmin(registry, Identity("alice", frozenset({"admins"})))
    assert admin.caller("secure") == Identity("alice", frozenset({"eng"}))  # not the claimed 'admins'


def test_acting_as_someone_else_on_a_sasl_cluster_is_refused_in_one_line(registry, monkeypatch):
    with pytest.raises(PermissionDenied) as info:
        StreamAdmin(registry, Identity("bob")).caller("secure")
    assert str(info.value) == (
        "cluster secure authenticates this client as alice; acting as bob is refused "
        "(the caller is the authenticated principal)"
    )
    monkeypatch.setenv("STREAMREP_USER", "bob")
    with pytest.raises(PermissionDenied, match="acting as bob"):
        StreamAdmin(registry).caller("secure")
    assert StreamAdmin(registry).caller("local").user == "bob"  # an embedded cluster: the named user


def test_the_registry_and_an_embedded_store_are_owner_only(registry):
    def mode(path: str) -> int:
        return stat.S_IMODE(os.stat(path).st_mode)

    assert mode(registry.home) == 0o700
    assert mode(registry.registry_path) == 0o600  # it holds Kafka passwords
    assert mode(os.path.join(registry.home, ".clusters.lock")) == 0o600
    db = registry.embedded_file("local", registry.get("local").url)
    assert mode(db) == 0o600
    registry.store("local").catalog_list("stream")
    for extra in (db + "-wal", db + "-shm"):  # SQLite gives its journal the database's modes
        if os.path.exists(extra):
            assert mode(extra) == 0o600
    assert json.load(open(registry.registry_path))["clusters"]["secure"]["settings"]["sasl.username"] == "alice"
