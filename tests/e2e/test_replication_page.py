"""The "Stream replication" page in a real browser: Airflow's API server (login off, as
``scripts/airflow-ui.sh`` runs it) serving the React plugin, headless Chromium driven by Playwright,
real embedded clusters, in light and in dark mode.

Each topology lives in a STREAMREP_HOME of its own; the test points the ``streamrep_default``
connection's ``home`` at it, as a user would. What a person would check is asserted: every
link is drawn between its own two streams and never through another cluster's box, no box
overlaps another, everything is on the canvas, errors are shown whole, the colours are Airflow's
own, and one unreachable cluster does not hold up the others. Screenshots are kept in
``test-artifacts/replication-page/`` (``STREAMREP_TEST_ARTIFACTS`` moves it).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_production import http_json

from conftest import REPO, Session, _stop_group, free_port
from streamrep.airflow.page import supervisor_note
from streamrep.client import Clusters, Producer, StreamAdmin
from streamrep.model.ace import Identity
from streamrep.model.message import Message
from streamrep.replication import lag, verification
from streamrep.replication.diff import diff_streams
from streamrep.replication.failover import failover
from streamrep.replication.flows import flows_into
from streamrep.replication.gateway import Gateway

pytestmark = pytest.mark.slow

USER = "alice"  # STREAMREP_USER of the API server (conftest.Session)
PAGE = "/plugin/stream-replication"
ARTIFACTS = Path(os.environ.get("STREAMREP_TEST_ARTIFACTS") or REPO / "test-artifacts") / "replication-page"
SCHEMES = ("light", "dark")
LAYOUT_SECONDS = 60  # a bound for a loaded machine, not an expectation
MIN_TEXT_PX = 9  # a stream's name on screen, at the zoom that fits the topology in a 1400 px window


# -- topologies: real embedded clusters, built through the library as alice ------------------------
class World:
    """One STREAMREP_HOME and the admin API on it."""

    def __init__(self, root: Path, clusters: list[str]):
        self.home = root
        self.admin = StreamAdmin(Clusters(str(root)), Identity(USER))
        for name in clusters:
            self.admin.clusters.add(name)
        self.made: set[str] = set()

    def stream(self, path: str, messages: int = 3) -> None:
        """A stream with one topic, named after its cluster: a fan-in's upstreams need unique names."""
        topic = f"{cluster_of(path)}-events"
        self.admin.create_stream(path, defaultpartitions=2)
        self.admin.create_topic(path, topic)
        with Producer(self.admin) as producer:
            for i in range(messages):
                producer.send(f"{path}:{topic}", f"m{i}".encode(), key=str(i).encode())
        self.made.add(path)

    def link(self, source: str, replica: str, paused: bool = False) -> None:
        """``source`` -> ``replica``, as the manual setup makes it (the replica created with
        copymeta when it is new)."""
        if source not in self.made:
            self.stream(source)
        if replica not in self.made:
            self.admin.create_stream(replica, copymetafrom=source)
            self.made.add(replica)
        self.admin.add_replica(source, replica, paused=True)
        self.admin.add_upstream(replica, source)
        if not paused:
            self.admin.resume_replica(source, replica)

    def replicate(self, cluster: str) -> None:
        Gateway(self.admin, cluster, "gw1").run_once()

    def verify(self, source: str, replica: str) -> None:
        """Compare ``source`` with its replica and record it as the link's last verification."""
        verification.record(self.admin, source, replica, diff_streams(self.admin, source, replica).to_dict(""), "local")

    def close(self) -> None:
        self.admin.clusters.close()


def one_cluster(world: World) -> None:
    """An intracluster replica."""
    world.link("/mapr/tokyo/orders", "/mapr/tokyo/orders-copy")
    world.stream("/mapr/tokyo/audit")
    world.replicate("tokyo")


def two_clusters(world: World) -> None:
    """A multi-master pair, a paused link, and a lag history with an unsampled stretch."""
    sf, ny = "/mapr/sanfrancisco/activity", "/mapr/newyork/activity"
    world.link(sf, ny)
    world.link(ny, sf)
    world.link("/mapr/sanfrancisco/orders", "/mapr/newyork/orders", paused=True)
    [flow] = [f for f in flows_into(world.admin, "newyork")[0] if str(f.replica) == ny]
    store = world.admin.clusters.store("newyork")
    start = int(time.time() * 1000) - 290_000
    # sampled for 20 s, then nothing for 4 minutes (no gateway), then sampled again; the gateway's
    # pass below adds a sixth sample, about 20 s after the fifth
    for at, behind in ((0, 5), (10, 30), (20, 12), (260, 40), (270, 0)):
        lag.record(store, flow, lag.LagSample(t=start + at * 1000, messages=behind, bytes=behind, ms=behind * 1000))
    world.replicate("newyork")
    world.replicate("sanfrancisco")
    # Each link's last verification, from real compares: the pair is the same; the paused orders
    # replica holds a topic of its own (written as a plain client would), so it differs; the way
    # back (newyork -> sanfrancisco) was never verified.
    world.verify(sf, ny)
    orders = world.admin.path("/mapr/newyork/orders")
    store, uuid = world.admin.store(orders), world.admin.entry(orders).uuid
    store.create_topic(uuid, "planted", 1)
    planted = Message(b"own", b"k", timestamp=int(time.time() * 1000))  # within the stream's ttl
    store.append(uuid, "planted", {0: [planted]})
    world.verify("/mapr/sanfrancisco/orders", str(orders))


FOUR = ("amsterdam", "berlin", "chicago", "denver")


def four_clusters(world: World) -> None:
    """A chain (A -> B -> C), a fan-out, a fan-in and a failed-over pair."""
    a, b, c, d = FOUR
    world.link(f"/mapr/{a}/events", f"/mapr/{b}/events")
    world.link(f"/mapr/{b}/events", f"/mapr/{c}/events")
    for target in (a, b, c):
        world.link(f"/mapr/{d}/logs", f"/mapr/{target}/logs")
    world.link(f"/mapr/{a}/metrics", f"/mapr/{d}/metrics")
    world.link(f"/mapr/{b}/metrics", f"/mapr/{d}/metrics")
    world.link(f"/mapr/{c}/billing", f"/mapr/{a}/billing")
    world.replicate(a)
    failover(world.admin, f"/mapr/{c}/billing", f"/mapr/{a}/billing", timeout=30, grace=0.1)
    for cluster in (b, c, d):
        world.replicate(cluster)


TWELVE = (
    "athens",
    "bogota",
    "cairo",
    "dublin",
    "essen",
    "fukuoka",
    "geneva",
    "hanoi",
    "izmir",
    "jakarta",
    "kyoto",
    "lagos",
)


def twelve_clusters(world: World) -> None:
    """A chain through eight clusters, a multi-master pair, a fan-out, a fan-in, an
    intracluster replica and a paused link."""
    for i in range(7):
        world.link(f"/mapr/{TWELVE[i]}/trail", f"/mapr/{TWELVE[i + 1]}/trail")
    world.link("/mapr/athens/profiles", "/mapr/geneva/profiles")
    world.link("/mapr/geneva/profiles", "/mapr/athens/profiles")
    for target in ("hanoi", "izmir", "jakarta"):
        world.link("/mapr/cairo/prices", f"/mapr/{target}/prices")
    world.link("/mapr/dublin/sensors", "/mapr/kyoto/sensors")
    world.link("/mapr/essen/sensors", "/mapr/kyoto/sensors")
    world.link("/mapr/lagos/raw", "/mapr/lagos/clean")
    world.link("/mapr/fukuoka/ledger", "/mapr/bogota/ledger", paused=True)


def with_unreachable_clusters(world: World) -> None:
    """Three clusters that answer, one whose store is gone (a lost disk), and links into it."""
    a, b, c, d = FOUR
    world.link(f"/mapr/{a}/events", f"/mapr/{b}/events")
    world.link(f"/mapr/{b}/events", f"/mapr/{c}/events")
    world.link(f"/mapr/{a}/events", f"/mapr/{d}/events")
    world.close()
    store = world.home / "clusters" / f"{d}.db"
    store.rename(store.with_suffix(".lost"))


TOPOLOGIES: dict[str, tuple[tuple[str, ...], Callable[[World], None]]] = {
    "one": (("tokyo",), one_cluster),
    "two": (("sanfrancisco", "newyork"), two_clusters),
    "four": (FOUR, four_clusters),
    "twelve": (TWELVE, twelve_clusters),
    "unreachable": (FOUR, with_unreachable_clusters),
}


# -- Airflow's API server and the browser -----------------------------------------------------------
class Server:
    """``airflow api-server`` with scripts/airflow-env.sh's settings (login off)."""

    def __init__(self, e2e: Session, homes: dict[str, Path]):
        self.homes = homes
        port = free_port()
        self.base = f"http://localhost:{port}"
        self.log = e2e.root / "page-api-server.log"
        env = {**e2e.env_for(e2e.copy_airflow_home("airflow-home-page")), "PORT": str(port)}
        command = f'REPO="{REPO}"; source scripts/airflow-env.sh; exec airflow api-server --port {port}'
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(
                ["bash", "-c", command], env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 240
        while http_json(self.base + "/api/v2/monitor/health", timeout=240)[0] != 200:
            assert time.monotonic() < deadline and self.process.poll() is None, self.log.read_text()[-3000:]
            time.sleep(1)

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http_json(self.base + path, method, body)

    def connection(self, conn_id: str, fields: dict[str, Any]) -> None:
        """Creates or replaces an Airflow connection through Airflow's REST API."""
        self.request("DELETE", f"/api/v2/connections/{conn_id}")
        status, body = self.request("POST", "/api/v2/connections", {"connection_id": conn_id, **fields})
        assert status == 201, body

    def show(self, topology: str) -> None:
        """Points the page at a topology's STREAMREP_HOME."""
        extra = json.dumps({"home": str(self.homes[topology])})
        self.connection("streamrep_default", {"conn_type": "streamrep", "extra": extra})

    def data(self) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """What the page reads: the cluster list, and each cluster's answer."""
        status, listing = self.request("GET", "/streamrep/api/clusters")
        assert status == 200, listing
        answers = {}
        for cluster in listing["clusters"]:
            status, answers[cluster["name"]] = self.request(
                "GET", "/streamrep/api/clusters/" + urllib.parse.quote(cluster["name"])
            )
            assert status == 200, answers[cluster["name"]]
        return listing, answers


@pytest.fixture(scope="module")
def server(e2e: Session, tmp_path_factory) -> Iterator[Server]:
    homes = {}
    for name, (clusters, build) in TOPOLOGIES.items():
        homes[name] = tmp_path_factory.mktemp(f"page-{name}")
        world = World(homes[name], list(clusters))
        build(world)
        world.close()
    running = Server(e2e, homes)
    try:
        yield running
    finally:
        _stop_group(running.process)


def open_page(browser: Any, server: Server, scheme: str, asked: dict[str, float] | None = None) -> Any:
    """The page in a new browser context; ``asked`` gets when it asked for the cluster list."""
    context = browser.new_context(color_scheme=scheme, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    if asked is not None:
        page.on(
            "request", lambda r: r.url.endswith("/streamrep/api/clusters") and asked.setdefault("at", time.monotonic())
        )
    page.goto(server.base + PAGE)
    return page


def laid_out(page: Any, clusters: int) -> None:
    page.wait_for_selector(
        f'[data-testid=replication-page][data-layout=done][data-clusters-loaded="{clusters}"]',
        timeout=LAYOUT_SECONDS * 1000,
    )


def record_timing(what: str, seconds: float) -> None:
    """Kept beside the screenshots (timings.json), for the notes of whoever changes the page."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    timings = ARTIFACTS / "timings.json"
    known = json.loads(timings.read_text()) if timings.exists() else {}
    timings.write_text(json.dumps({**known, what: round(seconds, 2)}, indent=1))


def screenshot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(shot), full_page=True)
    return shot


# What a person sees, measured in the browser: boxes, and each link's path as points on screen.
GEOMETRY = """() => {
  const box = (e) => { const r = e.getBoundingClientRect(); return {x: r.left, y: r.top, w: r.width, h: r.height}; };
  const all = (sel) => [...document.querySelectorAll(sel)];
  const links = all('[data-testid=link-edge]').map((g) => {
    const path = g.querySelector('[data-testid=link-path]');
    const m = path.getScreenCTM(), len = path.getTotalLength(), points = [];
    for (let d = 0; d <= len; d += 3) { const p = path.getPointAtLength(d).matrixTransform(m); points.push([p.x, p.y]); }
    const end = path.getPointAtLength(len).matrixTransform(m);
    points.push([end.x, end.y]);
    return {source: g.dataset.source, replica: g.dataset.replica, state: g.dataset.state, points};
  });
  const viewport = document.querySelector('.react-flow__viewport');
  const scale = new DOMMatrix(getComputedStyle(viewport).transform).a;
  const name = document.querySelector('[data-testid=stream-node] [data-testid=stream-name]')
    || document.querySelector('[data-testid=stream-node]');
  const errors = all('[data-testid=replica-row] [data-testid=link-errors]').map((e) => ({
    text: e.textContent, clipped: e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1,
    ...box(e), table: box(e.closest('table').parentElement)}));
  return {
    namePx: parseFloat(getComputedStyle(name).fontSize) * scale,
    errors,
    canvas: box(document.querySelector('[data-testid=topology]')),
    clusters: all('[data-testid=cluster-node]').map((e) => ({name: e.dataset.cluster, ...box(e)})),
    streams: all('[data-testid=stream-node]').map((e) => ({path: e.dataset.path, ...box(e)})),
    labels: all('[data-testid=link-label]').map((e) => ({source: e.dataset.source, replica: e.dataset.replica, ...box(e)})),
    links,
  };
}"""


def inside(point: list[float], rect: dict[str, float], margin: float = 0.0) -> bool:
    x, y = point
    return (
        rect["x"] - margin <= x <= rect["x"] + rect["w"] + margin
        and rect["y"] - margin <= y <= rect["y"] + rect["h"] + margin
    )


def overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (
        a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]
    )


def shrunk(rect: dict[str, float], by: float) -> dict[str, float]:
    return {"x": rect["x"] + by, "y": rect["y"] + by, "w": rect["w"] - 2 * by, "h": rect["h"] - 2 * by}


def cluster_of(path: str) -> str:
    return path.split("/")[2]


def check_drawing(geometry: dict[str, Any], answers: dict[str, dict[str, Any]]) -> None:
    """The drawing says what the data says, and reads right."""
    expected = {(link["source"], link["replica"]) for a in answers.values() for link in a["links"]}
    drawn = [(link["source"], link["replica"]) for link in geometry["links"]]
    assert sorted(drawn) == sorted(expected)  # every link once, no other
    clusters = {c["name"]: c for c in geometry["clusters"]}
    streams = {s["path"]: s for s in geometry["streams"]}
    assert set(clusters) == set(answers)
    shown = {s["path"] for a in answers.values() for s in a["streams"]}
    assert shown <= set(streams)
    canvas = geometry["canvas"]
    for rect in [*clusters.values(), *streams.values()]:  # nothing pushed off the canvas
        assert inside([rect["x"], rect["y"]], canvas, 1) and inside(
            [rect["x"] + rect["w"], rect["y"] + rect["h"]], canvas, 1
        ), rect
    names = sorted(clusters)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not overlap(clusters[a], clusters[b]), (a, b)
    paths = sorted(streams)
    for i, a in enumerate(paths):
        for b in paths[i + 1 :]:
            assert not overlap(streams[a], streams[b]), (a, b)
        assert inside([streams[a]["x"] + 1, streams[a]["y"] + 1], clusters[cluster_of(a)]), a  # in its own cluster
    for link in geometry["links"]:
        source, replica, points = streams[link["source"]], streams[link["replica"]], link["points"]
        # it leaves its source's box and ends at its replica's (the arrow's tip on the border)
        assert inside(points[0], source, 3), (link["source"], points[0], source)
        assert inside(points[-1], replica, 3), (link["replica"], points[-1], replica)
        ends = {cluster_of(link["source"]), cluster_of(link["replica"])}
        for name, rect in clusters.items():
            if name in ends:
                continue
            through = [p for p in points if inside(p, shrunk(rect, 2))]
            assert not through, f"{link['source']} -> {link['replica']} crosses cluster {name} at {through[:3]}"
        for path, rect in streams.items():  # nor through another stream's box
            if path in (link["source"], link["replica"]):
                continue
            assert not [p for p in points if inside(p, shrunk(rect, 2))], (link["source"], link["replica"], path)
    labels = geometry["labels"]
    for i, label in enumerate(labels):  # a link's label sits on its own path, clear of the others
        [link] = [g for g in geometry["links"] if (g["source"], g["replica"]) == (label["source"], label["replica"])]
        assert any(inside(p, label, 2) for p in link["points"]), label
        for other in labels[i + 1 :]:
            assert not overlap(label, other), (label, other)
        for path, rect in streams.items():
            assert not overlap(label, rect), (label, path)
    assert geometry["namePx"] >= MIN_TEXT_PX, f"stream names are drawn {geometry['namePx']:.1f} px high"
    for error in geometry["errors"]:  # the replicas table shows each error whole
        assert not error["clipped"] and error["x"] + error["w"] <= error["table"]["x"] + error["table"]["w"] + 1, error


THEME = """() => {
  const behind = (e) => { for (; e; e = e.parentElement) { const c = getComputedStyle(e).backgroundColor;
    if (c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent') return c; } return null; };
  const heading = document.querySelector("h2");
  const table = document.querySelector('[data-testid=replication-page] table');
  return {
    dark: document.documentElement.classList.contains('dark'),
    background: behind(heading), heading: getComputedStyle(heading).color,
    table: table && behind(table), cell: table && getComputedStyle(table.querySelector('th')).color,
  };
}"""


def airflows_own_theme(browser: Any, server: Server, scheme: str) -> dict[str, Any]:
    """The colours of Airflow's own Dags page in ``scheme``."""
    page = browser.new_context(color_scheme=scheme, viewport={"width": 1400, "height": 1000}).new_page()
    page.goto(server.base + "/dags")
    page.wait_for_selector("h2", timeout=LAYOUT_SECONDS * 1000)
    theme = page.evaluate(THEME)
    page.context.close()
    return theme


# -- the tests ------------------------------------------------------------------------------------
@pytest.mark.parametrize("topology", ["one", "two", "four", "twelve"])
def test_every_topology_reads_right_in_light_and_dark_mode(server, browser, topology):
    server.show(topology)
    _, answers = server.data()
    assert all(a["error"] is None for a in answers.values()), answers
    for scheme in SCHEMES:
        page = open_page(browser, server, scheme)
        laid_out(page, len(answers))
        check_drawing(page.evaluate(GEOMETRY), answers)
        failed_over = [link for a in answers.values() for link in a["links"] if link.get("failover")]
        assert bool(failed_over) == (topology == "four")
        for link in failed_over:
            label = page.locator(
                f'[data-testid=link-label][data-source="{link["source"]}"][data-replica="{link["replica"]}"]'
            )
            assert "FAILED OVER" in label.inner_text(), link  # a failed-over pair is marked as such
        ours, airflows = page.evaluate(THEME), airflows_own_theme(browser, server, scheme)
        assert ours["dark"] is airflows["dark"] is (scheme == "dark")
        # Airflow's own background and text colour, on the page and in its tables
        assert ours["background"] == ours["table"] == airflows["background"], (ours, airflows)
        assert ours["heading"] == ours["cell"] == airflows["heading"], (ours, airflows)
        screenshot(page, f"{topology}-{scheme}")
        page.context.close()


def test_the_page_is_in_airflows_navigation_with_its_icon_and_whole_label(server, browser):
    server.show("one")
    page = open_page(browser, server, "light")
    laid_out(page, 1)
    entry = page.locator(f'a[href$="{PAGE}"]')
    assert entry.get_attribute("aria-label") == "Replication"
    assert entry.locator("img").evaluate("(img) => img.complete && img.naturalWidth > 0")
    label = entry.locator("div").last
    assert label.inner_text() == "Replication"
    assert label.evaluate("(e) => e.scrollWidth <= e.clientWidth")  # not cut to "Repl..."
    assert page.locator("h2", has_text="Stream replication").count() == 1  # the title, once
    page.context.close()


def test_a_page_with_unreachable_clusters_renders_the_others_within_3_s(server, browser, silent_broker):
    """A cluster whose store is gone and a Kafka cluster that hangs: the others are drawn within
    3 s of the page asking for the clusters, and each error is shown whole."""
    hung = silent_broker
    try:
        server.show("unreachable")
        server.connection("streamrep_hung", {"conn_type": "streamrep", "host": f"kafka://127.0.0.1:{hung.port}"})
        reachable = [f"/mapr/{c}/events" for c in FOUR[:3]]
        for scheme in SCHEMES:
            asked: dict[str, float] = {}
            page = open_page(browser, server, scheme, asked)
            selector = ", ".join(f'[data-testid=stream-node][data-path="{p}"]' for p in reachable)
            page.wait_for_function(
                f"document.querySelectorAll({json.dumps(selector)}).length === {len(reachable)}", timeout=30_000
            )
            drawn = time.monotonic() - asked["at"]
            record_timing(f"unreachable-{scheme}: the others drawn after the page asked (s)", drawn)
            assert drawn < 3, f"the clusters that answer were drawn {drawn:.1f} s after the page asked"
            laid_out(page, 5)
            _, answers = server.data()
            for name in ("denver", "hung"):
                error = page.locator(f'[data-testid=cluster-error][data-cluster="{name}"]').first
                assert error.inner_text().strip() == answers[name]["error"]
                assert error.evaluate(
                    "(e) => e.scrollWidth <= e.clientWidth + 1 && e.scrollHeight <= e.clientHeight + 1"
                )
            assert "store file" in answers["denver"]["error"] and "missing" in answers["denver"]["error"]
            assert answers["hung"]["error"].startswith("Kafka cluster hung is unreachable")
            check_drawing(page.evaluate(GEOMETRY), answers)
            screenshot(page, f"unreachable-{scheme}")
            page.context.close()
    finally:
        server.request("DELETE", "/api/v2/connections/streamrep_hung")


def test_the_lag_chart_shows_an_unsampled_stretch_as_a_gap(server, browser):
    server.show("two")
    page = open_page(browser, server, "light")
    laid_out(page, 2)
    chart = page.locator('[data-testid=lag-chart][data-replica="/mapr/newyork/activity"]')
    assert chart.get_attribute("data-samples") == "6" and chart.get_attribute("data-gaps") == "1"
    other = page.locator('[data-testid=lag-chart][data-replica="/mapr/sanfrancisco/activity"]')
    assert other.get_attribute("data-gaps") == "0"
    # a chart whose replica no live gateway serves says so: its last figure is not current
    _, answers = server.data()
    for link in (link for a in answers.values() for link in a["links"] if not link["paused"]):
        drawn = page.locator(
            f'[data-testid=lag-chart][data-replica="{link["replica"]}"][data-source="{link["source"]}"]'
        )
        assert drawn.get_attribute("data-live-gateway") == str(bool(link["gateways"])).lower(), link
    page.context.close()


# The badge's word and colours, read in the browser as [r, g, b] (a canvas converts the oklch()
# colours Chakra's tokens resolve to).
BADGE_COLOURS = """(e) => {
  const b = e.querySelector('.chakra-badge') || e.firstElementChild, s = getComputedStyle(b);
  const ctx = document.createElement('canvas').getContext('2d', {willReadFrequently: true});
  const rgb = (c) => { ctx.clearRect(0, 0, 1, 1); ctx.fillStyle = c; ctx.fillRect(0, 0, 1, 1);
    return [...ctx.getImageData(0, 0, 1, 1).data.slice(0, 3)]; };
  return {text: rgb(s.color), background: rgb(s.backgroundColor), word: b.textContent};
}"""


def test_each_link_shows_its_last_verification_when_and_its_result(server, browser):
    """On each replica link's label and in the replicas table: green ``same``, red ``differs``,
    grey ``never verified``; when, relative to now; the compare's summary on hover."""
    server.show("two")
    _, answers = server.data()
    links = {(one["source"], one["replica"]): one for a in answers.values() for one in a["links"]}
    assert sorted(one["verification"] for one in links.values()) == ["differs", "never", "same"]
    for scheme in SCHEMES:
        page = open_page(browser, server, scheme)
        laid_out(page, 2)
        assert all(s["error"] is None for a in answers.values() for s in a["streams"]), answers
        for (source, replica), link in links.items():
            where = f'[data-source="{source}"][data-replica="{replica}"]'
            for holder in (f"[data-testid=link-label]{where}", f"[data-testid=replica-row]{where}"):
                badge = page.locator(f"{holder} [data-testid=link-verification]")
                assert badge.get_attribute("data-verification") == link["verification"]
                colours = badge.evaluate(BADGE_COLOURS)
                r, g, b = colours["text"]
                if link["verification"] == "same":
                    assert colours["word"] == "same" and g > r + 30, colours
                elif link["verification"] == "differs":
                    assert colours["word"] == "differs" and r > g + 30, colours
                else:
                    assert colours["word"] == "never verified" and abs(r - g) < 30, colours  # grey: neither
                title = badge.get_attribute("title")
                if link["lastVerification"] is None:
                    assert "never verified" in title and "ago" not in badge.inner_text()
                else:
                    assert title.startswith(link["verificationSummary"]) and "diffstreams (local) by alice" in title
                    assert "ago" in badge.inner_text()  # "a few seconds ago", "3 minutes ago"
                    assert badge.evaluate("(e) => e.scrollWidth <= e.clientWidth + 1"), holder  # not cut off
        differs = page.locator("[data-testid=link-label] [data-testid=link-verification][data-verification=differs]")
        differs.hover()
        screenshot(page, f"verification-{scheme}")
        page.context.close()


def test_start_and_stop_say_what_happens_next_and_update_in_place(server, browser):
    server.show("two")
    page = open_page(browser, server, "light")
    laid_out(page, 2)
    page.evaluate("window.__notReloaded = true")
    page.locator('[data-testid=gateway-start][data-cluster="newyork"]').click()
    hint = page.locator('[data-testid=gateway-hint][data-cluster="newyork"]')
    hint.wait_for(timeout=30_000)
    # what the supervisor DAG will do, as this Airflow knows it (a copied database may hold it, paused)
    paused = server.request("GET", "/streamrep/api/clusters")[1]["service"]["paused"]
    assert supervisor_note(paused) in hint.inner_text()
    assert "streamrep gateway run -cluster newyork" in hint.inner_text()
    page.wait_for_function(
        "document.querySelector('[data-testid=desired-state][data-cluster=\"newyork\"]').textContent.includes('running')",
        timeout=30_000,
    )
    page.locator('[data-testid=gateway-stop][data-cluster="newyork"]').click()
    page.wait_for_function(
        "document.querySelector('[data-testid=gateway-hint][data-cluster=\"newyork\"]').textContent.includes('stopped')",
        timeout=30_000,
    )
    page.wait_for_function(
        "document.querySelector('[data-testid=desired-state][data-cluster=\"newyork\"]').textContent.includes('stopped')",
        timeout=30_000,
    )
    assert page.evaluate("window.__notReloaded === true")  # updated in place
    _, answers = server.data()
    assert answers["newyork"]["desired"] == "stopped"
    page.context.close()
