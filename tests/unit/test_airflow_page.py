"""The "Stream replication" page and the Airflow plugin, on real embedded clusters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamrep.airflow.page import render_page, short_state, topology
from streamrep.client import Producer
from streamrep.model.replication import ReplicaState
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


def test_topology_has_clusters_streams_links_and_gateways(mesh):
    topo = topology(mesh)
    assert [c["name"] for c in topo["clusters"]] == ["newyork", "sanfrancisco"]
    streams = {s["path"]: s for c in topo["clusters"] for s in c["streams"]}
    assert set(streams) == {SF, NY, "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"}
    assert streams[NY]["messages"] == 8 and streams[SF]["upstreams"] == [NY]
    links = {(link["source"], link["replica"]): link for link in topo["links"]}
    assert links[(SF, NY)]["replicaState"] == "REPLICA_STATE_REPLICATING" and links[(SF, NY)]["isUptodate"]
    assert links[(NY, SF)]["kind"] == "replica"
    orders = links[("/mapr/sanfrancisco/orders", "/mapr/newyork/orders")]
    assert orders["paused"] and orders["pendingMessages"] == 7 and orders["replicationLagMillis"] >= 0
    gateways = {g["id"]: g for g in next(c for c in topo["clusters"] if c["name"] == "newyork")["gateways"]}
    assert gateways["gw1"]["status"] == "live" and gateways["gw1"]["listedBy"] == ["sanfrancisco"]
    assert gateways["gw2"]["status"] == "down" and gateways["gw2"]["heartbeatAgeSeconds"] is None


def test_page_draws_the_topology_as_svg(mesh):
    page = render_page(topology(mesh))
    assert page.startswith("<!doctype html>") and "<title>Stream replication</title>" in page
    svg = re.search(r"<svg .*?</svg>", page, re.S).group(0)
    assert svg.count('class="cluster"') == 2 and svg.count('class="stream"') == 4
    assert f'data-source="{SF}" data-replica="{NY}" data-state="REPLICATING"' in svg
    assert f'data-source="{NY}" data-replica="{SF}"' in svg
    assert 'data-replica="/mapr/newyork/orders" data-state="PAUSED"' in svg
    assert "7 pending" in svg and re.search(r"<path d=\"M[\d.]+,[\d.]+ C", svg)
    assert 'data-gateway="gw1" data-status="live"' in svg and 'data-gateway="gw2" data-status="down"' in svg
    assert 'id="replicas"' in page and 'id="gateways"' in page and 'id="streams"' in page
    # sources are drawn left of their replicas: sanfrancisco (2 links out, 1 in) before newyork
    assert svg.index('data-cluster="sanfrancisco"') < svg.index('data-cluster="newyork"')


def test_page_escapes_and_shows_an_empty_registry(empty_home):
    page = render_page(topology(__import__("streamrep.client", fromlist=["StreamAdmin"]).StreamAdmin()))
    assert "No clusters yet" in page


def test_airflow_loads_the_plugin_through_the_installed_package_entry_point():
    from airflow._shared.plugins_manager import _load_entrypoint_plugins

    plugins, errors = _load_entrypoint_plugins()
    assert errors == {}
    (plugin,) = [p for p in plugins if p.name == "streamrep"]
    (app,) = plugin.fastapi_apps
    assert app["url_prefix"] == "/streamrep" and app["app"] is not None
    (view,) = plugin.external_views
    assert view["href"] == "/streamrep/replication" and view["url_route"] == "stream-replication"
    assert view["name"] == "Stream replication"


def test_a_stream_the_page_may_administer_but_not_count_still_shows_its_links(mesh, bob):
    """Topic counts need a read right, the replica list adminperm (as MapR's ``stream replica
    list``): each read fails on its own, so a page identity that may administer a stream but not
    read it still sees its links, and one that may do neither sees the refusal and no link."""
    topo = topology(bob)
    streams = {s["path"]: s for c in topo["clusters"] for s in c["streams"]}
    assert "consumeperm" in streams[SF]["error"]
    assert (SF, NY) not in {(link["source"], link["replica"]) for link in topo["links"]}
    mesh.edit_stream(SF, adminperm="u:alice | u:bob")
    topo = topology(bob)
    streams = {s["path"]: s for c in topo["clusters"] for s in c["streams"]}
    assert "consumeperm" in streams[SF]["error"]
    links = {(link["source"], link["replica"]): link for link in topo["links"]}
    assert links[(SF, NY)]["replicaState"] == "REPLICA_STATE_REPLICATING"


def test_the_page_shows_an_error_above_a_pause(mesh):
    """The drawn state is ``replicaState`` (an error outranks a pause), not a second ranking."""
    mesh.catalog.set_replica_state(SF, NY, ReplicaState.UNEXPECTED, "boom")
    mesh.pause_replica(SF, NY)
    link = next(link for link in topology(mesh)["links"] if (link["source"], link["replica"]) == (SF, NY))
    assert link["paused"] and short_state(link) == "UNEXPECTED"


# -- the lag chart ----------------------------------------------------------------------------
def test_the_page_draws_each_replicas_recorded_lag_as_a_chart(mesh):
    from streamrep.replication import lag
    from streamrep.replication.flows import flows_into

    orders_src, orders_dst = "/mapr/sanfrancisco/orders", "/mapr/newyork/orders"
    lag.set_alert(mesh, orders_src, orders_dst, max_lag_messages=50)
    [orders] = [f for f in flows_into(mesh, "newyork")[0] if str(f.replica) == orders_dst]
    store = mesh.clusters.store("newyork")
    [(first, first_ms)] = [(s.t, s.ms) for s in lag.lag_history(mesh, orders_src, orders_dst)]  # gw1's pass
    start = first + 10_000
    for i, (messages, ms) in enumerate([(30, 60_000), (12, 90_000), (0, 0)]):
        lag.record(store, orders, lag.LagSample(t=start + i * 10_000, messages=messages, bytes=messages * 10, ms=ms))
    topo = topology(mesh)
    page = render_page(topo)
    charts = dict(re.findall(r'<svg [^>]*class="lag-chart"[^>]*data-replica="([^"]+)"(.*?)</svg>', page, re.S))
    head = re.search(r'<svg [^>]*class="lag-chart"[^>]*data-replica="/mapr/newyork/orders"[^>]*>', page).group(0)
    assert 'data-samples="4"' in head and 'data-max-messages="30"' in head and 'data-max-ms="90000"' in head
    assert 'data-last-messages="0"' in head and f'data-first="{first}"' in head
    chart = charts[orders_dst]
    for series in ("messages", "ms"):
        points = re.search(rf'data-series="{series}" data-points="4" points="([^"]+)"', chart).group(1).split()
        corners = [tuple(map(float, p.split(","))) for p in points]
        xs = [cx for cx, _ in corners]
        assert xs == sorted(xs) and len(set(xs)) == 4  # left to right in time
        # steps: each sample holds until the next (a horizontal run, then a vertical one), no slopes
        assert len(corners) == 7
        for i in range(1, 4):
            assert corners[2 * i - 1][1] == corners[2 * i - 2][1] and corners[2 * i - 1][0] == corners[2 * i][0]
    ys = [
        float(p.split(",")[1])
        for p in re.search(r'data-series="messages"[^>]*points="([^"]+)"', chart).group(1).split()
    ][::2]
    assert ys[1] < ys[2] < ys[0] < ys[3]  # 7, 30, 12, 0: 30 highest, 0 on the time axis (SVG's y grows down)
    assert 'data-shape="steps"' in head
    assert "messages behind" in chart and "lag (s)" in chart and "time (UTC)" in chart
    assert re.search(r'data-axis="time".*?\d\d:\d\d:\d\d', chart)
    assert 'data-threshold="maxLagMessages" data-value="50"' in chart and "maxLagMillis" not in chart
    # the live replica was sampled by gw1's pass in ``mesh``: a one-sample chart; the reverse link none yet
    assert 'data-samples="1"' in re.search(rf'<svg [^>]*class="lag-chart"[^>]*data-replica="{NY}"[^>]*>', page).group(0)
    assert f'class="empty lag-none" data-source="{NY}" data-replica="{SF}"' in page
    assert page.index('id="topology"') < page.index('id="lag-charts"') < page.index('id="replicas"')


def test_nice_axis_tops():
    from streamrep.airflow.page import nice_max

    assert [nice_max(v) for v in (0, 1, 3, 7, 30, 90_000, 101)] == [1, 1, 5, 10, 50, 100_000, 200]


def test_the_lag_chart_marks_a_replica_that_no_live_gateway_serves(mesh):
    """Issue 21, item 13: after the last sample nothing is measured; a chart of a replica with no
    live gateway says so, instead of showing its last figure as if it were current."""

    def head_and_chart(page, replica):
        found = re.search(rf'(<svg [^>]*class="lag-chart"[^>]*data-replica="{replica}"[^>]*>)(.*?)</svg>', page, re.S)
        return found.group(1), found.group(2)

    head, chart = head_and_chart(render_page(topology(mesh)), NY)  # gw1 is live
    assert 'data-live-gateway="true"' in head and "no-gateway" not in chart
    Gateway(mesh, "newyork", "gw1").stop()  # gw1 gone: its heartbeat withdrawn
    head, chart = head_and_chart(render_page(topology(mesh)), NY)
    assert 'data-live-gateway="false"' in head
    since = re.search(r'data-last="(\d+)"', head).group(1)
    assert f'class="no-gateway" data-since="{since}"' in chart and "no live gateway" in chart


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
