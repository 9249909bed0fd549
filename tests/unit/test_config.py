"""Tests for streamrep.client.config: the cluster registry under STREAMREP_HOME."""

import json
import os

import pytest

from streamrep.client.admin import StreamAdmin
from streamrep.client.config import ClusterInfo, Clusters
from streamrep.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from streamrep.model.ace import Identity


def test_home_comes_from_env(empty_home, tmp_path):
    assert empty_home.home == str(tmp_path / "streamrep-home")
    assert empty_home.list() == []
    assert empty_home.default is None


def test_first_cluster_is_default(empty_home):
    info = empty_home.add("sanfrancisco")
    assert info == ClusterInfo("sanfrancisco", info.url)
    assert info.kind == "embedded"
    assert empty_home.default == "sanfrancisco"
    empty_home.add("newyork")
    assert empty_home.default == "sanfrancisco"


def test_add_createsembedded_file_under_home(empty_home):
    info = empty_home.add("sanfrancisco")
    path = os.path.join(empty_home.home, "clusters", "sanfrancisco.db")
    assert info.url == "embedded:" + path
    assert os.path.exists(path)


def test_home_fixture(home):
    assert [c.name for c in home.list()] == ["newyork", "sanfrancisco"]
    assert home.default == "sanfrancisco"


def test_default_switch(home):
    home.add("london", default=True)
    assert home.default == "london"
    # Another Clusters on the same home reads the same registry.
    assert Clusters().default == "london"


def test_remove_of_the_default_leaves_no_default(home):
    removed = home.remove("sanfrancisco")
    assert removed.name == "sanfrancisco"
    assert home.default is None  # never a silent switch to another cluster
    home.remove("newyork")
    assert home.default is None
    assert home.list() == []


def test_remove_non_default_keeps_default(home):
    home.remove("newyork")
    assert home.default == "sanfrancisco"


def test_remove_keeps_data_file(home):
    path = home.get("newyork").url[len("embedded:") :]
    home.remove("newyork")
    assert os.path.exists(path)


def test_unknown_cluster(home):
    with pytest.raises(NotFound, match="cluster boston is not known"):
        home.get("boston")
    with pytest.raises(NotFound, match="cluster boston is not known"):
        home.store("boston")
    with pytest.raises(NotFound, match="cluster boston is not known"):
        home.remove("boston")


def test_duplicate_cluster(home):
    before = home.get("newyork")
    with pytest.raises(AlreadyExists, match="cluster newyork already exists"):
        home.add("newyork", url="embedded:/tmp/elsewhere.db")
    assert home.get("newyork") == before


@pytest.mark.parametrize("name", ["", "-x", "new york", "a/b", "x" * 129, "ny\n"])
def test_invalid_cluster_name(empty_home, name):
    with pytest.raises(InvalidArgument, match="invalid cluster name"):
        empty_home.add(name)
    assert empty_home.list() == []


@pytest.mark.parametrize(
    "url",
    ["kafka://", "kafka://broker", "kafka://broker:0", "kafka://broker:99999", "kafka://a:1,,b:2", "kafka://a b:1"],
)
def test_malformed_kafka_url_refused_clearly(empty_home, url):
    with pytest.raises(InvalidArgument, match=r"expected kafka://host:port\[,host:port...\]"):
        empty_home.add("big", url=url)
    assert empty_home.list() == []


def test_client_settings_only_for_kafka(empty_home):
    with pytest.raises(InvalidArgument, match="only to kafka:// clusters"):
        empty_home.add("e", settings={"security.protocol": "SSL"})
    assert empty_home.list() == []


@pytest.mark.parametrize("url", ["embedded:", "http://x", "/some/file.db"])
def test_bad_url(empty_home, url):
    with pytest.raises(InvalidArgument, match="invalid cluster url"):
        empty_home.add("c", url=url)


def test_explicit_embedded_url(empty_home, tmp_path):
    path = tmp_path / "data" / "mine.db"
    path.parent.mkdir()
    info = empty_home.add("mine", url=f"embedded:{path}")
    assert empty_home.get("mine") == info
    assert path.exists()


def test_an_explicit_embedded_url_in_a_missing_folder_is_refused_and_makes_no_folder(empty_home, tmp_path):
    path = tmp_path / "nonexistent" / "dir" / "x.db"
    with pytest.raises(InvalidArgument, match=f"^cannot add cluster x: folder {path.parent} does not exist"):
        empty_home.add("x", url=f"embedded:{path}")
    assert not (tmp_path / "nonexistent").exists() and empty_home.list() == []


@pytest.mark.parametrize("content", ["{not json", "[]", '{"clusters": []}', ""])
def test_corrupt_registry_is_unavailable(empty_home, content):
    os.makedirs(empty_home.home, exist_ok=True)
    with open(empty_home.registry_path, "w") as f:
        f.write(content)
    with pytest.raises(Unavailable) as err:
        empty_home.list()
    assert empty_home.registry_path in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(Unavailable):
        empty_home.add("x")


def test_corrupt_cluster_entry_is_unavailable(empty_home):
    os.makedirs(empty_home.home, exist_ok=True)
    with open(empty_home.registry_path, "w") as f:
        json.dump({"default": "a", "clusters": {"a": "embedded:/x.db"}}, f)
    with pytest.raises(Unavailable, match="corrupt"):
        empty_home.get("a")
    with pytest.raises(Unavailable, match="corrupt"):
        empty_home.list()


def test_default_cluster_env_override(home, monkeypatch):
    monkeypatch.setenv("STREAMREP_DEFAULT_CLUSTER", "newyork")
    assert home.default == "newyork"
    monkeypatch.setenv("STREAMREP_DEFAULT_CLUSTER", "")
    assert home.default == "sanfrancisco"


def test_default_cluster_env_override_resolves_paths(home, monkeypatch):
    monkeypatch.setenv("STREAMREP_DEFAULT_CLUSTER", "newyork")
    StreamAdmin(home, Identity("alice")).create_stream("activity")
    assert home.store("newyork").catalog_get("stream", "/activity") is not None
    assert home.store("sanfrancisco").catalog_get("stream", "/activity") is None


def test_registry_survives_new_object(home):
    again = Clusters(home.home)
    assert again.list() == home.list()
    assert again.default == "sanfrancisco"


def test_unwritable_home_is_unavailable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    clusters = Clusters(str(blocker / "home"))
    with pytest.raises(Unavailable, match="cannot write to STREAMREP_HOME"):
        clusters.add("a")


def test_store_is_opened_once(home):
    assert home.store("sanfrancisco") is home.store("sanfrancisco")
    assert home.store("sanfrancisco") is not home.store("newyork")
