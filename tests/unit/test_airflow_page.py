"""The "Stream replication" page's data and API, and the Airflow plugin, on real embedded
clusters (the page itself, in a browser: tests/e2e/test_replication_page.py)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from streamrep.airflow.page import STATIC, create_app
from streamrep.airflow.page_access import PageAccess
from streamrep.airflow.page_data import ClusterHealth, cluster_view
from streamrep.client import Producer
from streamrep.model.replication import ReplicaState
from streamrep.replication import service
from streamrep.replication.copy import copy_stream
from streamrep.replication.gateway import Gateway

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
SF, NY = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"


@pytest.fixture(autouse=True)
def as_alice(empty_home, monkeypatch):
    monkeypatch.setenv("STREAMREP_USER", "alice")
    monkeypatch.setenv("STREAMREP_GROUPS", "eng")


@pytest.fixture
def mesh(admin):
    """sanfrancisco/activity <-> newyork/activity (multi-master, replicated by gw1 of newyork),
    plus sanfrancisco/orders -> newyork/orders paused, with messages pending."""
    for stream, topic in ((SF, "clicks"), ("/mapr/sanfrancisco/orders", "orders")):
        admin.create_stream(stream, defaultpartitions=2)
        admin.create_topic(stream, topic)
        with Producer(admin) as producer:
            for i in range(7):
                producer.send(f"{stream}:{topic}", b"x" * 10, key=str(i).encode())
    for src, dst in ((SF, NY), ("/mapr/sanfrancisco/orders", "/mapr/newyork/orders")):
        admin.create_stream(dst, copymetafrom=src)
        admin.add_replica(src, dst, paused=True)
        admin.add_upstream(dst, src)
    copy_stream(admin, SF, NY)
    admin.add_replica(NY, SF, paused=True)
    admin.add_upstream(SF, NY)
    admin.resume_replica(SF, NY)
    admin.resume_replica(NY, SF)
    admin.set_gateways("newyork", "gw1 gw2", cluster="sanfrancisco")
    with Producer(admin) as producer:
        producer.send(f"{SF}:clicks", b"new", key=b"k")
    Gateway(admin, "newyork", "gw1").run_once()  # gw1 heartbeats and replicates; gw2 never started
    return admin


def views(admin) -> dict[str, dict]:
    return {info.name: cluster_view(admin, info) for info in admin.clusters.list()}


def links_of(view_by_name: dict[str, dict]) -> dict[tuple[str, str], dict]:
    return {(link["source"], link["replica"]): link for v in view_by_name.values() for link in v["links"]}


def test_each_cluster_answers_with_its_streams_its_links_and_its_gateways(mesh):
    found = views(mesh)
    assert sorted(found) == ["newyork", "sanfrancisco"]
    streams = {s["path"]: s for v in found.values() for s in v["streams"]}
    assert set(streams) == {SF, NY, "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"}
    assert streams[NY]["messages"] == 8 and streams[SF]["upstreams"] == [NY]
    # a link comes with its source's cluster
    assert {link["source"] for link in found["sanfrancisco"]["links"]} == {SF, "/mapr/sanfrancisco/orders"}
    assert {(link["source"], link["replica"]) for link in found["newyork"]["links"]} == {(NY, SF)}
    links = links_of(found)
    assert links[(SF, NY)]["replicaState"] == "REPLICA_STATE_REPLICATING" and links[(SF, NY)]["isUptodate"]
    assert links[("/mapr/sanfrancisco/orders", "/mapr/newyork/orders")]["paused"]
    assert [g["id"] for g in found["newyork"]["gateways"]] == ["gw1", "gw2"]
    assert found["newyork"]["gateways"][0]["status"] == "live" and found["newyork"]["error"] is None
    assert found["newyork"]["sampleSeconds"] > 0


def test_a_stream_the_page_may_administer_but_not_count_still_shows_its_links(mesh, bob):
    """Topic counts need a read right, the replica list adminperm (as MapR's ``stream replica
    list``): each read fails on its own, so a page identity that may administer a stream but not
    read it still sees its links, and one that may do neither sees the refusal and no link."""
    found = views(bob)
    streams = {s["path"]: s for v in found.values() for s in v["streams"]}
    assert "consumeperm" in streams[SF]["error"]
    assert (SF, NY) not in links_of(found)
    mesh.edit_stream(SF, adminperm="u:alice | u:bob")
    found = views(bob)
    streams = {s["path"]: s for v in found.values() for s in v["streams"]}
    assert "consumeperm" in streams[SF]["error"]
    assert links_of(found)[(SF, NY)]["replicaState"] == "REPLICA_STATE_REPLICATING"


def test_the_page_shows_an_error_above_a_pause(mesh):
    """The drawn state is ``replicaState`` (an error outranks a pause), not a second ranking."""
    mesh.set_replica_state(SF, NY, ReplicaState.UNEXPECTED, "boom")
    mesh.pause_replica(SF, NY)
    link = links_of(views(mesh))[(SF, NY)]
    assert link["paused"] and link["replicaState"] == "REPLICA_STATE_UNEXPECTED"


def test_each_link_carries_its_recorded_lag_in_time_order(mesh):
    from streamrep.replication import lag
    from streamrep.replication.flows import flows_into

    orders_src, orders_dst = "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"
    lag.set_alert(mesh, orders_src, orders_dst, max_lag_messages=50)
    [orders] = [f for f in flows_into(mesh, "newyork")[0] if str(f.replica) == orders_dst]
    store = mesh.clusters.store("newyork")
    [first] = [s.t for s in lag.lag_history(mesh, orders_src, orders_dst)]  # gw1's pass
    for i, (messages, ms) in enumerate([(30, 60_000), (12, 90_000), (0, 0)]):
        lag.record(store, orders, lag.LagSample(t=first + (i + 1) * 10_000, messages=messages, bytes=messages, ms=ms))
    link = links_of(views(mesh))[(orders_src, orders_dst)]
    assert [s["messages"] for s in link["lagHistory"]][1:] == [30, 12, 0]
    assert [s["t"] for s in link["lagHistory"]] == sorted(s["t"] for s in link["lagHistory"])
    assert link["maxLagMessages"] == 50 and link["maxLagMillis"] is None


def test_each_link_carries_its_last_verification_whole(mesh):
    """A real compare of the paused orders link, its replica holding a topic of its own: recorded
    as the link's last verification, served whole on its link; a link never verified says so."""
    from streamrep.model.message import Message
    from streamrep.replication.diff import diff_streams
    from streamrep.replication.verification import record

    orders_src, orders_dst = "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"
    dst = mesh.path(orders_dst)
    store, uuid = mesh.store(dst), mesh.entry(dst).uuid
    store.create_topic(uuid, "planted", 1)
    store.append(uuid, "planted", {0: [Message(b"own", b"k")]})
    done = record(mesh, orders_src, orders_dst, diff_streams(mesh, orders_src, orders_dst).to_dict(""), "spark")
    link = links_of(views(mesh))[(orders_src, orders_dst)]
    assert link["verification"] == "differs" and link["verificationSummary"].startswith("differ: ")
    assert link["lastVerification"]["at"] == done.at and link["lastVerification"]["extraInDst"] == 1
    assert (link["lastVerification"]["engine"], link["lastVerification"]["by"]) == ("spark", "alice")
    never = links_of(views(mesh))[(SF, NY)]
    assert (never["verification"], never["lastVerified"], never["lastVerification"]) == ("never", None, None)
    served = client_of().get("/api/clusters/sanfrancisco").json()["links"]
    assert [s["lastVerification"] for s in served if s["replica"] == orders_dst] == [link["lastVerification"]]


# -- the API ------------------------------------------------------------------------------------
async def alice_may_all(request=None) -> PageAccess:
    return PageAccess("alice", True, True, frozenset({"eng"}))


async def vic_sees_less(request=None) -> PageAccess:
    return PageAccess("vic", False, False)


def client_of(access=alice_may_all, paused=lambda: True):
    from fastapi.testclient import TestClient

    return TestClient(create_app(access=access, control=access, paused=paused))


def test_the_api_lists_the_clusters_then_answers_for_each(mesh):
    client = client_of()
    listing = client.get("/api/clusters").json()
    assert [c["name"] for c in listing["clusters"]] == ["newyork", "sanfrancisco"]
    assert listing["user"] == "alice" and listing["mayControl"] and listing["seesLocations"]
    assert listing["service"] == {"dagId": "stream_gateway_service", "paused": True}
    newyork = client.get("/api/clusters/newyork").json()
    assert [s["path"] for s in newyork["streams"]] == [NY, "/mapr/newyork/orders"]
    assert newyork["url"].startswith("embedded:") and newyork["elapsedMs"] >= 0
    unknown = client.get("/api/clusters/boston")
    assert unknown.status_code == 404 and "boston" in unknown.json()["error"]
    hidden = client_of(vic_sees_less).get("/api/clusters/newyork").json()
    assert hidden["url"] is None and [s["path"] for s in hidden["streams"]] == [NY, "/mapr/newyork/orders"]
    assert client_of(vic_sees_less).get("/api/clusters").json()["clusters"][0]["url"] is None


def test_reading_never_creates_a_store(empty_home, monkeypatch, tmp_path):
    """A connection whose ``embedded:`` path has a typo: the page says the store is missing, and
    no file appears at that path."""
    import json

    typo = tmp_path / "no-such-folder" / "tokyo.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_STREAMREP_TOKYO", json.dumps({"conn_type": "streamrep", "host": f"embedded:{typo}"})
    )
    client = client_of()
    assert "tokyo" in [c["name"] for c in client.get("/api/clusters").json()["clusters"]]
    answer = client.get("/api/clusters/tokyo").json()
    assert "missing" in answer["error"] and str(typo) in answer["error"]
    assert not typo.exists() and not typo.parent.exists()


def test_reading_leaves_a_stores_folder_as_it_was(empty_home):
    """Not even SQLite's -wal and -shm files appear next to a store the page reads."""
    from streamrep.client import Clusters, StreamAdmin
    from streamrep.model.ace import Identity

    clusters = Clusters()
    clusters.add("tokyo")
    StreamAdmin(clusters, Identity("alice")).create_stream("/mapr/tokyo/a")
    clusters.close()
    folder = Path(clusters.home) / "clusters"
    before = sorted(p.name for p in folder.iterdir())
    answer = client_of().get("/api/clusters/tokyo").json()
    assert [s["path"] for s in answer["streams"]] == ["/mapr/tokyo/a"]
    assert sorted(p.name for p in folder.iterdir()) == before == ["tokyo.db"]


def test_a_stream_holding_messages_past_its_ttl_is_shown_and_left_to_its_writers(empty_home):
    """Retention is a write: the page's read-only store shows such a stream (the messages counted
    until a writer purges them) instead of failing on "attempt to write a readonly database"."""
    from streamrep.client import Clusters, StreamAdmin
    from streamrep.model.ace import Identity

    clusters = Clusters()
    clusters.add("tokyo")
    admin = StreamAdmin(clusters, Identity("alice"))
    admin.create_stream("/mapr/tokyo/a", ttl=0)
    admin.create_topic("/mapr/tokyo/a", "t")
    with Producer(admin) as producer:
        producer.send("/mapr/tokyo/a:t", b"old", timestamp=1_000)
    admin.edit_stream("/mapr/tokyo/a", ttl=60)  # the message is now far past the ttl, not yet purged
    clusters.close()
    answer = client_of().get("/api/clusters/tokyo").json()
    assert answer.get("error") is None, answer
    [stream] = answer["streams"]
    assert stream["path"] == "/mapr/tokyo/a" and stream.get("error") is None, stream["error"]


def test_a_cluster_that_hangs_or_is_down_answers_within_the_bound_and_delays_no_other(mesh, monkeypatch, silent_broker):
    """A Kafka cluster whose broker accepts connections but never answers costs its own answer
    the health check's 2 s, no more; one whose port is closed is refused at once; the embedded
    clusters answer within 3 s, although their reads touch both (the gateways they list)."""
    import json

    silent = silent_broker
    closed = socket.create_server(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    for name, port in (("hung", silent.port), ("down", closed_port)):
        conn = {"conn_type": "streamrep", "host": f"kafka://127.0.0.1:{port}"}
        monkeypatch.setenv(f"AIRFLOW_CONN_STREAMREP_{name.upper()}", json.dumps(conn))
    client = client_of()
    answers: dict[str, tuple[float, dict]] = {}

    def fetch(name):
        start = time.monotonic()
        body = client.get(f"/api/clusters/{name}").json()
        answers[name] = (time.monotonic() - start, body)

    threads = [threading.Thread(target=fetch, args=(n,)) for n in ("hung", "down", "newyork", "sanfrancisco")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers["hung"][1]["error"] == "Kafka cluster hung is unreachable: it did not answer within 2 s"
    assert 1.9 < answers["hung"][0] < 4
    assert answers["down"][1]["error"].startswith("Kafka cluster down is unreachable: no bootstrap server")
    assert answers["down"][0] < 3
    for name in ("newyork", "sanfrancisco"):
        assert answers[name][1]["error"] is None and answers[name][0] < 3, answers[name]


def test_the_health_check_remembers_a_down_cluster_and_sees_it_come_back():
    from streamrep.client.config import ClusterInfo
    from streamrep.errors import Unavailable

    calls: list[tuple] = []
    up = {"yes": False}

    def connect(address, timeout):
        calls.append(address)
        if not up["yes"]:
            raise ConnectionRefusedError(111, "Connection refused")
        return socket.socket()

    catalogs: list[str] = []
    health = ClusterHealth(lambda info: catalogs.append(info.name), connect)
    info = ClusterInfo("tokyo", "kafka://k1:9092,k2:9093")
    with pytest.raises(Unavailable, match=r"k1:9092: Connection refused; k2:9093: Connection refused\)$"):
        health(info)
    with pytest.raises(Unavailable):
        health(info)
    assert calls == [("k1", 9092), ("k2", 9093)] and catalogs == []  # the second answer came from memory
    up["yes"] = True
    health._verdicts.clear()  # as when the memory expires
    health(info)
    health(ClusterInfo("local", "embedded:/x.db"))  # an embedded cluster is never probed
    assert calls[-1] == ("k1", 9092) and len(calls) == 3 and catalogs == ["tokyo"]


def test_a_read_that_hangs_answers_within_its_bound_and_is_shared_until_it_ends():
    from streamrep.airflow.page import ClusterReads
    from streamrep.errors import StreamrepError

    reads, release, calls = ClusterReads(), threading.Event(), []

    def view():
        calls.append(1)
        release.wait(10)
        return {"name": "slow"}

    for _ in range(2):  # the second request waits on the first one's read, not a new one
        start = time.monotonic()
        with pytest.raises(StreamrepError, match="^cluster slow did not answer within 0.3 s$"):
            reads.read("slow", view, seconds=0.3)
        assert time.monotonic() - start < 1
    assert len(calls) == 1
    release.set()
    assert reads.read("slow", view) == {"name": "slow"}


def test_start_and_stop_act_as_the_caller_and_say_what_happens_next(mesh, carol):
    client = client_of(paused=lambda: True)
    started = client.post("/api/gateways/newyork/start").json()
    assert started["desired"] == "running" and started["by"] == "alice" and started["requestedBy"] == "alice"
    assert started["hint"] == "already running: gw1"
    Gateway(mesh, "newyork", "gw1").stop()
    started = client.post("/api/gateways/newyork/start").json()
    assert started["hint"] == (
        "the stream_gateway_service DAG is paused, so nothing starts them yet: unpause it, "
        "or run 'streamrep gateway run -cluster newyork'"
    )
    assert (
        client_of(paused=lambda: False)
        .post("/api/gateways/newyork/start")
        .json()["hint"]
        .startswith("the stream_gateway_service DAG starts them within a minute")
    )
    assert client.post("/api/gateways/newyork/stop").json()["hint"] == "stopped"
    assert service.desired_state(mesh.clusters.store("newyork")) == "stopped"
    mesh.set_cluster_ace("u:alice", "newyork")

    async def bob_the_operator(request=None) -> PageAccess:
        return PageAccess("bob", True, True)

    refused = client_of(bob_the_operator).post("/api/gateways/newyork/start")
    assert refused.status_code == 403 and "adminperm" in refused.json()["error"]
    assert service.desired_state(mesh.clusters.store("newyork")) == "stopped"
    assert client.post("/api/gateways/newyork/reboot").status_code == 404
    assert client.post("/api/gateways/boston/start").status_code == 404


def test_the_old_address_leads_to_the_page_in_airflows_ui(empty_home):
    answer = client_of().get("/replication", follow_redirects=False)
    assert answer.status_code == 307 and answer.headers["location"] == "../plugin/stream-replication"


def test_the_bundle_is_built_and_served(empty_home):
    """``./run test`` builds it from ui/ (npm ci, then vite)."""
    assert (STATIC / "replication.js").is_file(), "the page's bundle is not built: run ./run test"
    answer = client_of().get("/static/replication.js")
    assert answer.status_code == 200 and "javascript" in answer.headers["content-type"]
    assert b"AirflowPlugin" in answer.content
    assert client_of().get("/static/icon.svg").headers["content-type"].startswith("image/svg")


def test_airflow_loads_the_plugin_through_the_installed_package_entry_point():
    from airflow._shared.plugins_manager import _load_entrypoint_plugins

    plugins, errors = _load_entrypoint_plugins()
    assert errors == {}
    (plugin,) = [p for p in plugins if p.name == "streamrep"]
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/streamrep" and app["app"] is not None
    (view,) = plugin.react_apps
    assert view["bundle_url"] == "/streamrep/static/replication.js" and view["url_route"] == "stream-replication"
    assert view["name"] == "Replication" and view["destination"] == "nav"
    assert view["icon"] == "/streamrep/static/icon.svg"


def test_the_bundles_address_follows_the_api_servers_base_url(monkeypatch):
    from streamrep.airflow.plugin import static_url

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com/data/airflow/")
    assert static_url("replication.js") == "/data/airflow/streamrep/static/replication.js"
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "http://localhost:8080")
    assert static_url("icon.svg") == "/streamrep/static/icon.svg"


def test_a_drain_ends_its_lag_history_with_what_it_left(admin):
    """A ``-once`` drain shorter than the sampling period records its final lag (0), so the chart
    does not hold the lag it started with until another gateway runs."""
    from streamrep.replication import lag

    admin.create_stream(SF, defaultpartitions=1)
    admin.create_topic(SF, "clicks")
    admin.create_stream(NY, copymetafrom=SF)
    admin.add_replica(SF, NY)
    admin.add_upstream(NY, SF)
    with Producer(admin) as producer:
        producer.send(f"{SF}:clicks", b"one", key=b"k")
        producer.send(f"{SF}:clicks", b"two", key=b"k")
    gateway = Gateway(admin, "newyork", "gw1")
    gateway.lag.sample()  # the drain's first sample: 2 behind
    while gateway.run_once(whole=True):
        pass
    gateway.lag.sample(final=True)
    gateway.stop()
    history = lag.lag_history(admin, SF, NY)
    assert [s.messages for s in history] == [2, 0]
    assert history[-1].t - history[0].t < lag.SAMPLE_SECONDS * 1000  # inside one period: recorded anyway
